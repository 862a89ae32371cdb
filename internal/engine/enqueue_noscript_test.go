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
	h, db := newNoopHarnessOnOwnServer(t, "noscript")
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

// A timeline event added on its own (a bounce's, a lost lease's) is sent by its SHA, and still
// lands when Redis lost its scripts.
func TestEventLandsWhenRedisLostItsScripts(t *testing.T) {
	t.Parallel()
	h, db := newNoopHarnessOnOwnServer(t, "noscript-event")
	id := h.enqueue(Spec{Type: "noscript-event"})
	h.waitStatus(id, "done", 10*time.Second)
	keys, err := h.stack.store.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"noted_once", "noted_twice"} {
		if err := db.Client.ScriptFlush(bg).Err(); err != nil {
			t.Fatal(err)
		}
		h.stack.event(bg, keys, Event{Event: name})
	}
	v, err := h.stack.Get(bg, id)
	if err != nil || !has(v, "noted_once") || !has(v, "noted_twice") {
		t.Fatalf("timeline %v (%v), want both events", events(v), err)
	}
}

// newNoopHarnessOnOwnServer is a harness with no-op type typ on a redis-server of its own (what
// SCRIPT FLUSH empties is the whole server's).
func newNoopHarnessOnOwnServer(t *testing.T, typ string) (*harness, redistest.DB) {
	t.Helper()
	srv := redistest.Start(t)
	db := redistest.DB{Server: srv, Client: srv.Client(t, 0)}
	h := newHarnessOn(t, db, db.Client, Config{}, func(s *Stack) {
		s.Register(TaskConfig{Type: typ}, func(ctx context.Context, j *Job) error { return nil })
	})
	return h, db
}
