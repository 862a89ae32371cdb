package engine

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/seal"
)

// keyEntry is "id:<fresh base64 key>", and the key's text (which nothing may print).
func keyEntry(t *testing.T, id string) (string, string) {
	t.Helper()
	b := make([]byte, seal.KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	k := base64.StdEncoding.EncodeToString(b)
	return id + ":" + k, k
}

func ring(t *testing.T, spec ...string) *seal.Ring {
	t.Helper()
	r, err := seal.Parse(strings.Join(spec, ","))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// noPlaintext fails the test when any key of db holds one of the markers.
func noPlaintext(t *testing.T, db redistest.DB, markers ...string) {
	t.Helper()
	for key, val := range redistest.Dump(t, db.Client) {
		for _, m := range markers {
			if strings.Contains(val, m) {
				t.Errorf("%s holds %q in plaintext: %q", key, m, val)
			}
		}
	}
}

func TestEncryptedJobDataIsCiphertextAtRestAndPlaintextToTheHandler(t *testing.T) {
	t.Parallel()
	a, _ := keyEntry(t, "a")
	db := redistest.NewDB(t)
	payload := []byte(`{"card":"PAYLOAD-MARKER-4111"}`)
	var mu sync.Mutex
	var seen [][]byte
	var cps [][]byte
	h := newHarnessOn(t, db, db.Client, Config{Keys: ring(t, a)}, func(s *Stack) {
		s.Register(TaskConfig{Type: "enc", Encrypt: true, Backoff: Backoff{Base: time.Millisecond, Max: time.Millisecond}},
			func(ctx context.Context, j *Job) error {
				mu.Lock()
				seen, cps = append(seen, j.Payload), append(cps, j.Checkpoint)
				mu.Unlock()
				if j.Attempt == 1 {
					if err := j.SaveCheckpoint(ctx, []byte("CHECKPOINT-MARKER")); err != nil {
						return err
					}
					return errors.New("once more")
				}
				j.SetResult("RESULT-MARKER")
				return nil
			})
	})
	id := h.enqueue(Spec{Type: "enc", Resource: "r1", Payload: payload})
	v := h.waitStatus(id, "done", 15*time.Second)

	mu.Lock()
	if len(seen) != 2 || !bytes.Equal(seen[0], payload) || !bytes.Equal(seen[1], payload) || string(cps[1]) != "CHECKPOINT-MARKER" {
		t.Fatalf("the handler saw payloads %q and checkpoints %q", seen, cps)
	}
	mu.Unlock()
	// At rest: the record's data fields are sealed with key a; nothing in Redis (record,
	// timeline, asynq's task) holds a marker.
	for _, f := range []string{jobstore.FieldPayload, jobstore.FieldResult, jobstore.FieldCheckpoint} {
		if raw := v.Raw[f]; !seal.Sealed(raw) || seal.KeyID(raw) != "a" {
			t.Errorf("%s is stored as %q", f, raw)
		}
	}
	noPlaintext(t, db, "PAYLOAD-MARKER", "RESULT-MARKER", "CHECKPOINT-MARKER")
	// Get returns what is stored; Open what the handler wrote.
	if !seal.Sealed(v.Record.Result) {
		t.Fatalf("Get decrypted the result: %q", v.Record.Result)
	}
	o, err := h.stack.Open(v)
	if err != nil || !bytes.Equal(o.Record.Payload, payload) || o.Record.Result != "RESULT-MARKER" || string(o.Record.Checkpoint) != "CHECKPOINT-MARKER" {
		t.Fatalf("open: %q %q %q, %v", o.Record.Payload, o.Record.Result, o.Record.Checkpoint, err)
	}
}

func TestKeyRotationReencryptAndRemovingTheOldKey(t *testing.T) {
	t.Parallel()
	a, aKey := keyEntry(t, "a")
	b, bKey := keyEntry(t, "b")
	db := redistest.NewDB(t)
	client := asynq.NewClientFromRedisClient(db.Client)
	t.Cleanup(func() { _ = client.Close() })
	stackOn := func(r *seal.Ring) *Stack {
		s := New(db.Client, Config{Keys: r})
		s.Register(TaskConfig{Type: "enc", Encrypt: true}, nil)
		t.Cleanup(s.Close)
		return s
	}
	enqueue := func(s *Stack, resource, payload string) string {
		e, err := s.Enqueue(bg, client, Spec{Type: "enc", Resource: resource, Payload: []byte(payload), ProcessIn: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		return e.JobID
	}
	read := func(s *Stack, id string) (string, string, error) {
		v, err := s.Get(bg, id)
		if err != nil {
			t.Fatal(err)
		}
		o, err := s.Open(v)
		return string(o.Record.Payload), seal.KeyID(v.Raw[jobstore.FieldPayload]), err
	}

	onA := stackOn(ring(t, a))
	old := enqueue(onA, "r1", "OLD-PAYLOAD")
	// b becomes current, a stays for reading.
	onBA := stackOn(ring(t, b, a))
	fresh := enqueue(onBA, "r2", "NEW-PAYLOAD")
	if p, k, err := read(onBA, old); err != nil || p != "OLD-PAYLOAD" || k != "a" {
		t.Fatalf("old job under b,a: %q (key %q), %v", p, k, err)
	}
	if p, k, err := read(onBA, fresh); err != nil || p != "NEW-PAYLOAD" || k != "b" {
		t.Fatalf("new job under b,a: %q (key %q), %v", p, k, err)
	}
	// Without a, the old job does not open: a clear error naming the key id, not the key.
	onB := stackOn(ring(t, b))
	_, _, err := read(onB, old)
	if !errors.Is(err, ErrUndecryptable) || !errors.Is(err, seal.ErrUnknownKey) || !strings.Contains(err.Error(), `"a"`) ||
		strings.Contains(err.Error(), aKey) || strings.Contains(err.Error(), bKey) {
		t.Fatalf("old job under b alone: %v", err)
	}

	st, err := onBA.Reencrypt(bg, nil)
	if err != nil || st.Jobs != 2 || st.Rewritten != 1 {
		t.Fatalf("reencrypt: %+v, %v", st, err)
	}
	if st, err := onBA.Reencrypt(bg, nil); err != nil || st.Rewritten != 0 {
		t.Fatalf("a second pass: %+v, %v", st, err)
	}
	for id, want := range map[string]string{old: "OLD-PAYLOAD", fresh: "NEW-PAYLOAD"} {
		if p, k, err := read(onB, id); err != nil || p != want || k != "b" {
			t.Fatalf("%s under b alone after reencrypt: %q (key %q), %v", id, p, k, err)
		}
	}
	noPlaintext(t, db, "OLD-PAYLOAD", "NEW-PAYLOAD")

	// A pass with only b finds nothing it cannot open; one with a ring that lacks b says which
	// jobs it could not move.
	onC := stackOn(ring(t, func() string { c, _ := keyEntry(t, "c"); return c }()))
	st, err = onC.Reencrypt(bg, nil)
	if !errors.Is(err, ErrReencryptIncomplete) || len(st.Failed) != 2 {
		t.Fatalf("reencrypt without b: %+v, %v", st, err)
	}
}

func TestResealKeepsAConcurrentWrite(t *testing.T) {
	t.Parallel()
	a, _ := keyEntry(t, "a")
	b, _ := keyEntry(t, "b")
	db := redistest.NewDB(t)
	client := asynq.NewClientFromRedisClient(db.Client)
	t.Cleanup(func() { _ = client.Close() })
	s := New(db.Client, Config{Keys: ring(t, a)})
	t.Cleanup(s.Close)
	s.Register(TaskConfig{Type: "enc", Encrypt: true}, nil)
	e, err := s.Enqueue(bg, client, Spec{Type: "enc", Resource: "r", Payload: []byte("one"), ProcessIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rot := New(db.Client, Config{Keys: ring(t, b, a)})
	t.Cleanup(rot.Close)
	rot.Register(TaskConfig{Type: "enc", Encrypt: true}, nil)
	v, _ := rot.Get(bg, e.JobID)
	rw, err := rot.Rewrites(e.JobID, "enc", v.Raw)
	if err != nil || len(rw) != 1 {
		t.Fatalf("rewrites: %+v, %v", rw, err)
	}
	// A writer replaces the payload between the read and the write: the rewrite must not undo it.
	k, _ := rot.Store().Keys(e.JobID, "")
	db.Client.HSet(bg, k.Record, jobstore.FieldPayload, "written meanwhile")
	if n, err := rot.Store().Reseal(bg, e.JobID, rw); err != nil || n != 0 {
		t.Fatalf("reseal over a newer value: %d, %v", n, err)
	}
	if got := db.Client.HGet(bg, k.Record, jobstore.FieldPayload).Val(); got != "written meanwhile" {
		t.Fatalf("payload %q", got)
	}
}

func TestAJobWhoseKeyIsGoneFailsForGoodWithTheReason(t *testing.T) {
	t.Parallel()
	a, aKey := keyEntry(t, "a")
	b, bKey := keyEntry(t, "b")
	db := redistest.NewDB(t)
	client := asynq.NewClientFromRedisClient(db.Client)
	t.Cleanup(func() { _ = client.Close() })
	producer := New(db.Client, Config{Keys: ring(t, a)})
	t.Cleanup(producer.Close)
	producer.Register(TaskConfig{Type: "enc", Encrypt: true}, nil)
	e, err := producer.Enqueue(bg, client, Spec{Type: "enc", Resource: "r", Payload: []byte("PAYLOAD-MARKER")})
	if err != nil {
		t.Fatal(err)
	}
	var called atomic.Bool
	h := newHarnessOn(t, db, db.Client, Config{Keys: ring(t, b)}, func(s *Stack) {
		s.Register(TaskConfig{Type: "enc", Encrypt: true}, func(context.Context, *Job) error { called.Store(true); return nil })
	})
	v := h.waitStatus(e.JobID, "failed", 15*time.Second)
	if called.Load() {
		t.Fatal("the handler ran on data that did not decrypt")
	}
	le := v.Record.LastError
	if !strings.Contains(le, "cannot be decrypted") || !strings.Contains(le, `"a"`) || strings.Contains(le, aKey) || strings.Contains(le, bKey) {
		t.Fatalf("last_error %q", le)
	}
	if v.Record.Attempt != 1 {
		t.Fatalf("attempt %d: a key does not come back with a retry", v.Record.Attempt)
	}
}

func TestRegisteringAnEncryptedTypeWithoutKeysPanics(t *testing.T) {
	t.Parallel()
	s := New(redistest.NewDB(t).Client, Config{})
	defer s.Close()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "no keys") {
			t.Fatalf("recovered %v", r)
		}
	}()
	s.Register(TaskConfig{Type: "enc", Encrypt: true}, nil)
}

// Plaintext that starts like a sealed value (or like a marked plaintext) reads back as written, for
// a type that is not encrypted, and seals and opens for one that is.
func TestReview2PlaintextWithThePrefixRoundTrips(t *testing.T) {
	ring, err := seal.NewRing(seal.Key{ID: "k", Secret: make([]byte, seal.KeySize)})
	if err != nil {
		t.Fatal(err)
	}
	for _, enc := range []bool{false, true} {
		for _, v := range []string{"jgenc:x", "jgraw:y", "jgraw:jgenc:z", "plain", "jgen"} {
			stored, err := sealValue(ring, TaskConfig{Encrypt: enc}, "id", jobstore.FieldPayload, []byte(v))
			if err != nil {
				t.Fatal(err)
			}
			got, err := openValue(ring, "id", jobstore.FieldPayload, stored)
			if err != nil || string(got) != v {
				t.Errorf("encrypt %v, %q stored as %q: read %q, %v", enc, v, stored, got, err)
			}
			// what a re-encrypt does with a stored value of a type now encrypted
			if !enc && ring.Stale(string(stored), true) {
				plain, err := openValue(ring, "id", jobstore.FieldPayload, stored)
				if err != nil || string(plain) != v {
					t.Errorf("re-encrypt of %q opened %q, %v", stored, plain, err)
				}
			}
		}
	}
}
