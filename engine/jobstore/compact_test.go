package jobstore

import (
	"testing"
	"time"
)

// An ended job's record drops the fields that only say "none" (record_compact), and its view
// still shows what it showed before: the same none values, and the last run's lease owner.
func TestFinishedRecordIsCompact(t *testing.T) {
	t.Parallel()
	j := newScriptJob(t, "queued", 0)
	j.s.rdb.HSet(bg, j.keys.Record, FieldAttempt, 0, FieldNotBefore, 0, FieldStartBy, 0, FieldOpKey, "", FieldDedup, "",
		FieldPayload, "", FieldConfirmed, "1")
	st, err := j.s.Start(bg, j.keys, StartArgs{Delivery: DeliveryID(j.id, 1), Owner: "owner-a", LeaseTTL: 5 * time.Second, Now: time.Now()})
	if err != nil || st.State != "run" {
		t.Fatalf("start: %v %v", st.State, err)
	}
	if got := j.finish(st.Token, "owner-a", StatusDone); got != "ok" {
		t.Fatalf("finish: %s", got)
	}
	raw := j.s.rdb.HGetAll(bg, j.keys.Record).Val()
	for _, f := range []string{FieldNotBefore, FieldStartBy, FieldOpKey, FieldDedup, FieldLastError, FieldLeaseOwner} {
		if v, ok := raw[f]; ok {
			t.Errorf("finished record keeps %s=%q", f, v)
		}
	}
	// What a replay and a dedup check read stays: the payload (even empty) and the confirmation.
	if _, ok := raw[FieldPayload]; !ok || raw[FieldConfirmed] != "1" {
		t.Errorf("finished record lost payload or confirmed: %v", raw)
	}
	v, err := j.s.Load(bg, j.id)
	if err != nil {
		t.Fatal(err)
	}
	if v.Record.LeaseOwner != "owner-a" || v.Raw[FieldLeaseOwner] != "owner-a" || v.Record.Status != StatusDone ||
		!v.Record.NotBefore.IsZero() || !v.Record.StartBy.IsZero() || v.Record.LastError != "" {
		t.Fatalf("view of the compacted record: %+v raw %v", v.Record, v.Raw)
	}
}
