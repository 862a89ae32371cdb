// Package testsupport holds the helpers tests of several packages share. Only tests import it.
package testsupport

import (
	"testing"
	"time"
)

// Eventually polls cond every 10ms until it holds, or fails the test after d, naming what it
// waited for.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// QuietAsynq is an asynq Logger that drops everything, for servers started by tests.
type QuietAsynq struct{}

func (QuietAsynq) Debug(...any) {}
func (QuietAsynq) Info(...any)  {}
func (QuietAsynq) Warn(...any)  {}
func (QuietAsynq) Error(...any) {}
func (QuietAsynq) Fatal(...any) {}
