package jobstore

import (
	"testing"
	"time"
)

// newJob creates an unconfirmed job with an until_done marker through the store.
func createJob(t *testing.T, s *Store, resource string, claim time.Duration) (string, Keys) {
	t.Helper()
	id := NewJobID(resource, time.Now())
	k, err := s.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	k = s.WithMarker(k, "m", "done")
	st, _, err := s.Create(bg, k, NewJob{ID: id, Type: "x", Queue: "default", Resource: resource, MaxAttempts: 3,
		Dedup: "until_done:m", Policy: "until_done", Now: time.Now(), ClaimTTL: claim, MarkerTTL: claim})
	if err != nil || st != Created {
		t.Fatalf("create: %v %v", st, err)
	}
	return id, k
}

// Review findings, each seen failing before its fix: abandon after a confirmation whose answer was
// lost must keep the job; a marker whose job ran out covers nothing; an event keeps a claim's TTL.
func TestClaimsStayClaims(t *testing.T) {
	t.Parallel()
	s := newStore(t)

	// abandon keeps a confirmed record.
	id, k := createJob(t, s, "r1", 5*time.Second)
	pipe := s.rdb.Pipeline()
	c := s.QueueConfirm(bg, pipe, k, id, time.Hour, 0)
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	if st, err := c.Result(); err != nil || st != Confirmed {
		t.Fatalf("confirm: %v %v", st, err)
	}
	if err := s.Abandon(bg, k, id); err != nil {
		t.Fatal(err)
	}
	if s.rdb.Exists(bg, k.Record).Val() != 1 || s.rdb.Get(bg, k.Marker).Val() != id {
		t.Fatal("abandon removed a confirmed job")
	}

	// a marker that outlived its job's claim is stale: the next request creates a job.
	id2, k2 := createJob(t, s, "r2", 5*time.Second)
	s.rdb.Del(bg, k2.Record, k2.Pending) // what the claim's end leaves of a throttle window's marker
	id3 := NewJobID("r2", time.Now())
	k3, _ := s.Keys(id3, "")
	k3 = s.WithMarker(k3, "m", "done")
	st, existing, err := s.Create(bg, k3, NewJob{ID: id3, Type: "x", Queue: "default", Resource: "r2", MaxAttempts: 3,
		Dedup: "until_done:m", Policy: "throttle", Now: time.Now(), ClaimTTL: 5 * time.Second, MarkerTTL: time.Hour})
	if err != nil || st != Created || existing == id2 {
		t.Fatalf("after a stale marker: %v %q %v", st, existing, err)
	}

	// an event on an unconfirmed job does not make it last a retention.
	id4, k4 := createJob(t, s, "r4", 3*time.Second)
	pipe = s.rdb.Pipeline()
	s.QueueEvents(bg, pipe, k4, time.Now(), Event{Event: "bounced", Delivery: DeliveryID(id4, 1)})
	if _, err := pipe.Exec(bg); err != nil {
		t.Fatal(err)
	}
	if ttl := s.rdb.PTTL(bg, k4.Record).Val(); ttl <= 0 || ttl > 3*time.Second {
		t.Fatalf("an unconfirmed record lives %s after an event", ttl)
	}
	if ttl := s.rdb.PTTL(bg, k4.Timeline).Val(); ttl <= 0 || ttl > 3*time.Second {
		t.Fatalf("an unconfirmed timeline lives %s after an event", ttl)
	}
}

// A job the rescuer fails on its last attempt releases its until_done marker, as an ending run does.
func TestRescueFailureClearsTheMarker(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	id, k := createJob(t, s, "r5", time.Minute)
	s.rdb.HSet(bg, k.Record, FieldConfirmed, "1", FieldStatus, "processing", FieldAttempt, 3, FieldHeartbeatAt, 1, FieldLeaseOwner, "dead")
	res, err := s.Rescue(bg, k, DeliveryID(id, 1), time.Now(), time.Second)
	if err != nil || res.State != RescueFailed {
		t.Fatalf("rescue: %+v %v", res, err)
	}
	if s.rdb.Exists(bg, k.Marker).Val() != 0 {
		t.Fatal("the failed job's marker still collapses requests")
	}
}
