package engine

import (
	"context"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
)

// A Redis that lost its scripts (restarted, failed over) meets the enqueue's create and confirm
// as EVALSHA: each is loaded and sent again, and the job is confirmed and runs. Its own server:
// SCRIPT FLUSH is the whole server's.
func TestEnqueueConfirmsWhenRedisLostItsScripts(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	db := redistest.DB{Server: srv, Client: srv.Client(t, 0)}
	h := newHarnessOn(t, db, db.Client, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: "noscript"}, func(ctx context.Context, j *Job) error { return nil })
	})
	for range 2 {
		if err := db.Client.ScriptFlush(bg).Err(); err != nil {
			t.Fatal(err)
		}
		id := h.enqueue(Spec{Type: "noscript"})
		if v := h.waitStatus(id, "done", 10*time.Second); v.Raw["status"] != "done" {
			t.Fatalf("job after a script flush: %v", v.Raw)
		}
	}
}
