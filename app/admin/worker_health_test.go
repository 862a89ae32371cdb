package admin

import (
	"strings"
	"testing"
	"time"
)

// Before its start and after its stop a worker is not ready; the API role has no worker to check.
func TestWorkerNotReadyOutsideItsRun(t *testing.T) {
	t.Parallel()
	w := NewWorkerHealth(nil, time.Second)
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "not running") {
		t.Fatalf("before start: %v", err)
	}
	w.Start()
	if err := w.Ready(); err != nil {
		t.Fatalf("just started (heartbeat grace): %v", err)
	}
	w.Stop()
	if err := w.Ready(); err == nil {
		t.Fatal("ready after stop")
	}
}
