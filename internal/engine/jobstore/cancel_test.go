package jobstore

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// A cancel racing a rescue of a run whose worker died (its lease lapsed, its heartbeat old): either
// order ends cancelled, and the timeline says which came first. The rescue's new delivery, if any,
// is then refused at start as the job's, terminal.
func TestCancelRacesRescue(t *testing.T) {
	t.Parallel()
	first := map[string]int{}
	for range 20 {
		j := newScriptJob(t, "processing", 3)
		j.s.rdb.HSet(bg, j.keys.Record, FieldHeartbeatAt, time.Now().Add(-time.Minute).UnixMilli(), FieldLeaseOwner, "owner-1")
		var wg sync.WaitGroup
		var resc Rescue
		var canc Cancelling
		var rerr, cerr error
		wg.Add(2)
		go func() {
			defer wg.Done()
			resc, rerr = j.s.Rescue(bg, j.keys, DeliveryID(j.id, 1), time.Now(), 5*time.Second)
		}()
		go func() { defer wg.Done(); canc, cerr = j.s.Cancel(bg, j.keys, CancelArgs{Now: time.Now(), By: "race"}) }()
		wg.Wait()
		if rerr != nil || cerr != nil || canc.State != Cancelled || j.status() != "cancelled" {
			t.Fatalf("rescue %+v %v, cancel %+v %v, status %s", resc, rerr, canc, cerr, j.status())
		}
		tl := strings.Join(j.s.rdb.LRange(bg, j.keys.Timeline, 0, -1).Val(), "")
		switch resc.State {
		case Skip: // the cancel came first: the run's fence was raised, no new delivery
			if canc.From != StatusProcessing || strings.Contains(tl, `"rescued"`) || canc.Token <= 3 {
				t.Fatalf("cancel first: %+v, timeline %s", canc, tl)
			}
		case Rescued: // the rescue came first: the cancel found it retrying, on the new delivery
			if canc.From != StatusRetrying || canc.Delivery != resc.Delivery ||
				strings.Index(tl, `"rescued"`) > strings.Index(tl, `"cancelled"`) {
				t.Fatalf("rescue first: %+v %+v, timeline %s", resc, canc, tl)
			}
			st, err := j.s.Start(bg, j.keys, StartArgs{Delivery: resc.Delivery, Owner: "owner-3", LeaseTTL: time.Second, Now: time.Now()})
			if err != nil || st.State != Terminal || st.Status != "cancelled" {
				t.Fatalf("the rescue's delivery after the cancel: %+v %v", st, err)
			}
		default:
			t.Fatalf("rescue: %+v", resc)
		}
		first[string(resc.State)]++
	}
	t.Logf("rescue answers over 20 races: %v", first)
}
