package middleware_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/middleware"
)

// An encrypted job-level type: the plain handler gets the plaintext payload, Status the result;
// Redis holds neither (the record, its timeline, asynq's task: every key of the database).
func TestEncryptedJobIsPlaintextToTheHandlerOnly(t *testing.T) {
	t.Parallel()
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	secret := base64.StdEncoding.EncodeToString(raw)
	ring, err := middleware.ParseKeyRing("k1:" + secret)
	if err != nil {
		t.Fatal(err)
	}
	if s := fmt.Sprintf("%v %+v %#v %s", ring, ring, ring, ring); strings.Contains(s, secret) || !strings.Contains(s, "k1") {
		t.Fatalf("the ring prints as %q", s)
	}
	b := setup(t, middleware.Config{Keys: ring})
	b.guard.ProtectJob("report", middleware.Job{Encrypt: true})
	var seen atomic.Value
	b.serve(t, asynq.Config{Concurrency: 2}, map[string]asynq.HandlerFunc{"report": func(ctx context.Context, task *asynq.Task) error {
		seen.Store(string(task.Payload()))
		run, _ := middleware.RunFrom(ctx)
		run.SetResult("RESULT-MARKER")
		return nil
	}})
	job, err := b.guard.Enqueue(ctx, asynq.NewTask("report", []byte("PAYLOAD-MARKER")), middleware.EnqueueOptions{Tenant: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "job done", func() bool {
		st, err := b.guard.Status(ctx, job.JobID)
		return err == nil && st.Status == "done" && st.Result == "RESULT-MARKER"
	})
	if got := seen.Load(); got != "PAYLOAD-MARKER" {
		t.Fatalf("handler saw %v", got)
	}
	keys := b.rdb.Keys(ctx, "*").Val()
	for _, k := range keys {
		var vals []string
		switch b.rdb.Type(ctx, k).Val() {
		case "hash":
			for _, v := range b.rdb.HGetAll(ctx, k).Val() {
				vals = append(vals, v)
			}
		case "list":
			vals = b.rdb.LRange(ctx, k, 0, -1).Val()
		case "string":
			vals = []string{b.rdb.Get(ctx, k).Val()}
		}
		for _, v := range vals {
			if strings.Contains(v, "PAYLOAD-MARKER") || strings.Contains(v, "RESULT-MARKER") {
				t.Errorf("%s holds plaintext: %q", k, v)
			}
		}
	}
}

// Protecting an encrypted type on a guard without keys is a wiring mistake, found at start.
func TestEncryptedTypeWithoutKeysPanics(t *testing.T) {
	t.Parallel()
	b := setup(t, middleware.Config{})
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		}
	}()
	b.guard.ProtectJob("report", middleware.Job{Encrypt: true})
}
