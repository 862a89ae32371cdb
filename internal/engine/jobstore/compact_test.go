package jobstore

import (
	"errors"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jobguard/jobguard/locking"
)

// finishedJob is a hand-made job with every field a created and started job has, run to outcome by
// the start and finish scripts; it returns the record's hash as stored, and the view Load reads.
func finishedJob(t *testing.T, outcome Status) (scriptJob, map[string]string, View) {
	t.Helper()
	j := newScriptJob(t, "queued", 0)
	j.s.rdb.HSet(bg, j.keys.Record, FieldAttempt, 0,
		FieldPayload, "", FieldConfirmed, "1", FieldCreatedAt, idMillis(j.id), FieldUpdatedAt, idMillis(j.id),
		FieldType, "t", FieldQueue, "default", FieldTenant, "a")
	st, err := j.s.Start(bg, j.keys, StartArgs{Delivery: DeliveryID(j.id, 1), Owner: "owner-a", LeaseTTL: 5 * time.Second, Now: time.Now()})
	if err != nil || st.State != "run" {
		t.Fatalf("start: %v %v", st.State, err)
	}
	if got := j.finish(st.Token, "owner-a", outcome); got != "ok" {
		t.Fatalf("finish: %s", got)
	}
	v, err := j.s.Load(bg, j.id)
	if err != nil {
		t.Fatal(err)
	}
	return j, j.s.rdb.HGetAll(bg, j.keys.Record).Val(), v
}

// A final record (done) leaves out the fields that only say "none", those it can derive, its
// heartbeat and its fence's owner; its view still shows what it showed before (the owner aside:
// the run is named by its worker and token).
func TestAFinalRecordKeepsWhatItCannotDerive(t *testing.T) {
	t.Parallel()
	j, raw, v := finishedJob(t, StatusDone)
	for _, f := range []string{FieldNotBefore, FieldStartBy, FieldOpKey, FieldDedup, FieldLastError, FieldLeaseOwner,
		FieldJobID, FieldDelivery, FieldConfirmed, FieldCreatedAt, FieldUpdatedAt, FieldFencing, FieldPayload,
		FieldHeartbeatAt, locking.FieldFenceOwner, FieldDeliveries, FieldQueue} {
		if val, ok := raw[f]; ok {
			t.Errorf("the done record keeps %s=%q", f, val)
		}
	}
	r := v.Record
	if r.JobID != j.id || r.Delivery != DeliveryID(j.id, 1) || !r.Confirmed || r.CreatedAt.UnixMilli() != idMillis(j.id) ||
		!r.UpdatedAt.Equal(r.FinishedAt) || r.FinishedAt.IsZero() || r.FencingToken != 1 || r.Status != StatusDone ||
		!r.NotBefore.IsZero() || !r.StartBy.IsZero() || r.LastError != "" || r.LeaseOwner != "" || r.Tenant != "a" ||
		r.Deliveries != 1 || r.Queue != "default" {
		t.Fatalf("view of the final record: %+v raw %v", r, v.Raw)
	}
	if v.Raw[FieldJobID] != j.id || v.Raw[FieldConfirmed] != "1" || v.Raw[FieldQueue] != "default" {
		t.Fatalf("raw view without the derived fields: %v", v.Raw)
	}
}

// A final record leaves out a queue and max_attempts that are the defaults, and keeps others;
// every reader sees the same values either way.
func TestAFinalRecordLeavesOutOnlyTheDefaults(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		queue    string
		attempts int
		kept     bool
	}{{DefaultQueue, DefaultMaxAttempts, false}, {"critical", 3, true}} {
		j := newScriptJob(t, "queued", 0)
		j.s.rdb.HSet(bg, j.keys.Record, FieldAttempt, 0, FieldType, "t", FieldQueue, c.queue, FieldMaxAttempts, c.attempts)
		st, err := j.s.Start(bg, j.keys, StartArgs{Delivery: DeliveryID(j.id, 1), Owner: "owner-a", LeaseTTL: 5 * time.Second, Now: time.Now()})
		if err != nil || st.State != "run" {
			t.Fatalf("start: %v %v", st.State, err)
		}
		if got := j.finish(st.Token, "owner-a", StatusDone); got != "ok" {
			t.Fatalf("finish: %s", got)
		}
		if n := j.s.rdb.HExists(bg, j.keys.Record, FieldQueue).Val(); n != c.kept {
			t.Errorf("%s: the done record keeps its queue: %v, want %v", c.queue, n, c.kept)
		}
		if n := j.s.rdb.HExists(bg, j.keys.Record, FieldMaxAttempts).Val(); n != c.kept {
			t.Errorf("%s: the done record keeps max_attempts: %v, want %v", c.queue, n, c.kept)
		}
		v, err := j.s.Load(bg, j.id)
		if err != nil || v.Record.Queue != c.queue || v.Record.MaxAttempts != c.attempts {
			t.Fatalf("view's queue %q, max_attempts %d (%v)", v.Record.Queue, v.Record.MaxAttempts, err)
		}
	}
}

// A final record keeps a count of deliveries above one (a redelivered job), and every reader
// derives the same delivery from it.
func TestAFinalRecordKeepsACountOfDeliveriesAboveOne(t *testing.T) {
	t.Parallel()
	j := newScriptJob(t, "queued", 0)
	j.s.rdb.HSet(bg, j.keys.Record, FieldDeliveries, 2, FieldDelivery, DeliveryID(j.id, 2), FieldAttempt, 0,
		FieldType, "t", FieldQueue, "default")
	st, err := j.s.Start(bg, j.keys, StartArgs{Delivery: DeliveryID(j.id, 2), Owner: "owner-a", LeaseTTL: 5 * time.Second, Now: time.Now()})
	if err != nil || st.State != "run" {
		t.Fatalf("start: %v %v", st.State, err)
	}
	f, err := j.s.Finish(bg, j.keys, FinishArgs{Delivery: DeliveryID(j.id, 2), Token: st.Token, Owner: "owner-a", Now: time.Now(),
		Outcome: Outcome{Status: StatusDone}})
	if err != nil || f.State != "ok" {
		t.Fatalf("finish: %v %v", f.State, err)
	}
	if raw := j.s.rdb.HGetAll(bg, j.keys.Record).Val(); raw[FieldDeliveries] != "2" || raw[FieldDelivery] != "" {
		t.Fatalf("the done record of a second delivery: %v", raw)
	}
	v, err := j.s.Load(bg, j.id)
	if err != nil || v.Record.Deliveries != 2 || v.Record.Delivery != DeliveryID(j.id, 2) {
		t.Fatalf("view: %+v (%v)", v.Record, err)
	}
}

// A final record written before records left out their deliveries and the fields that say none
// (all of them there: deliveries 1, not_before and start_by 0, empty resource, op_key and dedup)
// reads as it always did: a job created before an upgrade and finished after it.
func TestAFinalRecordOfThePreviousLayoutReads(t *testing.T) {
	t.Parallel()
	j, _, before := finishedJob(t, StatusDone)
	j.s.rdb.HSet(bg, j.keys.Record, FieldDeliveries, "1", FieldResource, "", FieldNotBefore, 0, FieldStartBy, 0,
		FieldOpKey, "", FieldDedup, "")
	after, err := j.s.Load(bg, j.id)
	if err != nil {
		t.Fatal(err)
	}
	a, b := after.Record, before.Record
	if a.Deliveries != 1 || a.Delivery != b.Delivery || a.Resource != "" || a.Tenant != b.Tenant || a.Status != StatusDone ||
		!a.NotBefore.IsZero() || !a.StartBy.IsZero() || a.OpKey != "" || a.Dedup != "" {
		t.Fatalf("previous layout %+v, current %+v", a, b)
	}
}

// A failed job may be replayed: its record drops only the "none" fields, and keeps its payload,
// confirmation, owner and the rest as written.
func TestAFailedRecordKeepsItsFields(t *testing.T) {
	t.Parallel()
	_, raw, v := finishedJob(t, StatusFailed)
	for _, f := range []string{FieldJobID, FieldDelivery, FieldConfirmed, FieldCreatedAt, FieldUpdatedAt, FieldFencing,
		FieldPayload, FieldHeartbeatAt, locking.FieldFenceOwner} {
		if _, ok := raw[f]; !ok {
			t.Errorf("the failed record lost %s: %v", f, raw)
		}
	}
	if v.Record.LeaseOwner != "owner-a" {
		t.Fatalf("failed record's owner %q", v.Record.LeaseOwner)
	}
}

// Lua's record_get and Go's derive agree on every derived field of a final record, and every
// reader of the fields goes through one of them.
func TestLuaAndGoDeriveTheSameFields(t *testing.T) {
	t.Parallel()
	j, _, v := finishedJob(t, StatusDone)
	probe := NewScript(`
-- KEYS[1] job record; ARGV the fields; returns each field's value as record_get reads it ('' absent)
local rec = record_get(KEYS[1], ARGV)
local out = {}
for i, f in ipairs(ARGV) do out[i] = rec[f] or '' end
return out`)
	fields := append([]string{FieldStatus}, derivedFields...)
	args := make([]any, len(fields))
	for i, f := range fields {
		args[i] = f
	}
	lua, err := probe.Run(bg, j.s.rdb, []string{j.keys.Record}, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	goFields, err := ReadFields(bg, j.s.rdb, j.keys.Record, fields...)
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range fields {
		if lua[i] == "" || lua[i] != goFields[f] || lua[i] != v.Raw[f] {
			t.Errorf("%s: Lua %q, ReadFields %q, Load %q", f, lua[i], goFields[f], v.Raw[f])
		}
	}
	if want := strconv.FormatInt(idMillis(j.id), 10); goFields[FieldCreatedAt] != want {
		t.Errorf("created_at %q, want the id's %s", goFields[FieldCreatedAt], want)
	}
	// The folded timeline, rebuilt from derived fields, reads the same through every path.
	page, err := j.s.TimelineSince(bg, j.id, 0)
	if err != nil {
		t.Fatal(err)
	}
	all, err := ReadTimeline(bg, j.s.rdb, j.keys.Record)
	if err != nil || !slices.Equal(page.Events, v.Timeline) || !slices.Equal(all, v.Timeline) {
		t.Fatalf("timelines: since %+v, read %+v, load %+v (%v)", page.Events, all, v.Timeline, err)
	}
	// A record that is not final derives nothing.
	q := newScriptJob(t, "queued", 0)
	q.s.rdb.HDel(bg, q.keys.Record, FieldJobID)
	if got, _ := ReadFields(bg, q.s.rdb, q.keys.Record, FieldJobID); len(got) != 0 {
		t.Fatalf("a queued record derived %v", got)
	}
}

// A final record's fence is sealed: its last run's token no longer writes it, whoever sends it,
// and that run's finish sent again is answered as a second finish (invalid), not as a newer run's.
func TestAFinalRecordIsSealed(t *testing.T) {
	t.Parallel()
	j, _, _ := finishedJob(t, StatusDone)
	err := j.s.locks.SetFields(bg, locking.Fence{Token: 1, Owner: "owner-a"}, j.keys.Record, time.Hour, FieldResult, "late")
	if !errors.Is(err, locking.ErrStaleToken) {
		t.Fatalf("the done run's late write: %v", err)
	}
	if got := j.finish(1, "owner-a", StatusDone); got != "invalid" {
		t.Fatalf("the finish sent again: %s, want invalid", got)
	}
	if got := j.finish(0, "owner-z", StatusDone); got != "stale" {
		t.Fatalf("an older token's finish: %s, want stale", got)
	}
	if v, _ := j.s.Load(bg, j.id); v.Record.Result != "" || v.Record.Status != StatusDone {
		t.Fatalf("after the refused writes: %+v", v.Record)
	}
}
