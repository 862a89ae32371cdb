package jobstore

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

// scriptJob is a hand-made record for driving the scripts through the store.
type scriptJob struct {
	s    *Store
	id   string
	keys Keys
}

func newStore(t *testing.T) *Store {
	db := redistest.NewDB(t)
	return New(db.Client, locking.New(db.Client), Config{WorkerID: "w"})
}

func newScriptJob(t *testing.T, status string, token int64) scriptJob {
	t.Helper()
	s := newStore(t)
	id := NewJobID("r", time.Now())
	keys, err := s.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	fields := []any{FieldJobID, id, FieldStatus, status, FieldDelivery, DeliveryID(id, 1), FieldDeliveries, 1, FieldAttempt, 1, FieldMaxAttempts, 3, FieldResource, "r"}
	s.rdb.HSet(bg, keys.Record, fields...)
	if token > 0 {
		// The fence as locking's protocol records it, written through its own fenced write.
		if err := s.locks.SetFields(bg, locking.Fence{Token: token, Owner: "owner-1"}, keys.Record, time.Hour, FieldFencing, token); err != nil {
			t.Fatal(err)
		}
		s.rdb.Set(bg, keys.Fence, token, 0)
	}
	return scriptJob{s: s, id: id, keys: keys}
}

func (j scriptJob) start(owner string) string {
	st, err := j.s.Start(bg, j.keys, StartArgs{Delivery: DeliveryID(j.id, 1), Owner: owner, LeaseTTL: 5 * time.Second, Now: time.Now()})
	if err != nil {
		return "error " + err.Error()
	}
	return string(st.State)
}

func (j scriptJob) finish(token int64, owner string, outcome Status) string {
	f, err := j.s.Finish(bg, j.keys, FinishArgs{Delivery: DeliveryID(j.id, 1), Token: token, Owner: owner, Now: time.Now(),
		Outcome: Outcome{Status: outcome}})
	if err != nil {
		return "error " + err.Error()
	}
	return string(f.State)
}

func (j scriptJob) status() string { return j.s.rdb.HGet(bg, j.keys.Record, FieldStatus).Val() }

// Every transition of DESIGN.md's table, and the forbidden ones, at the script level.
func TestTransitionTable(t *testing.T) {
	t.Parallel()
	// start: queued, retrying and processing (a redelivery once the lease lapsed) may start; terminal
	// states are acknowledged.
	for from, want := range map[string]string{
		"queued": "run", "retrying": "run", "processing": "run", "done": "terminal", "failed": "terminal", "revoked": "terminal",
	} {
		j := newScriptJob(t, from, 3)
		if got := j.start("owner-2"); got != want {
			t.Errorf("start from %s: %s, want %s", from, got, want)
		}
		if want == "run" {
			if tok := j.s.rdb.HGet(bg, j.keys.Record, FieldFencing).Val(); tok != "4" || j.status() != "processing" {
				t.Errorf("start from %s: token %s status %s", from, tok, j.status())
			}
		}
	}
	// finish from processing: every outcome of the table.
	for _, to := range []Status{StatusDone, StatusRetrying, StatusFailed, StatusRevoked, StatusQueued} {
		j := newScriptJob(t, "processing", 5)
		if got := j.finish(5, "owner-1", to); got != "ok" || j.status() != string(to) {
			t.Errorf("processing -> %s: %s, status %s", to, got, j.status())
		}
	}
	// finish from anything but processing is rejected and leaves the status.
	for _, from := range []string{"queued", "retrying", "done", "failed", "revoked"} {
		for _, to := range []Status{StatusDone, StatusFailed} {
			j := newScriptJob(t, from, 5)
			if got := j.finish(5, "owner-1", to); got != "invalid" || j.status() != from {
				t.Errorf("%s -> %s: %s, status %s", from, to, got, j.status())
			}
		}
	}
}

// A job write under an older token, or the same token from another owner, is refused through
// locking's shared fence check and writes nothing but the timeline event.
func TestStaleJobWriteIsRefusedByTheSharedFence(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		token int64
		owner string
	}{{4, "owner-1"}, {5, "owner-2"}} {
		j := newScriptJob(t, "processing", 5)
		f, err := j.s.Finish(bg, j.keys, FinishArgs{Delivery: DeliveryID(j.id, 1), Token: tc.token, Owner: tc.owner, Now: time.Now(),
			Outcome: Outcome{Status: StatusDone}})
		if err != nil || f.State != StaleWrite || f.Current != 5 || j.status() != "processing" {
			t.Errorf("finish by %d/%s: %+v %v, status %s", tc.token, tc.owner, f, err, j.status())
		}
		tl := strings.Join(j.s.rdb.LRange(bg, j.keys.Timeline, 0, -1).Val(), "")
		if !strings.Contains(tl, "stale_write_rejected") {
			t.Errorf("no stale_write_rejected event: %s", tl)
		}
		// The same record refuses the same stale fence through locking's own fenced write.
		if err := j.s.locks.SetFields(bg, locking.Fence{Token: tc.token, Owner: tc.owner}, j.keys.Record, time.Hour, FieldResult, "x"); err == nil {
			t.Errorf("locking accepted the fence %d/%s the job's finish refused", tc.token, tc.owner)
		}
	}
}

// A start retried by go-redis (same owner) neither draws a second token nor counts a second attempt.
func TestRetriedStartIsIdempotent(t *testing.T) {
	t.Parallel()
	j := newScriptJob(t, "queued", 0)
	j.s.rdb.HSet(bg, j.keys.Record, FieldAttempt, 0)
	for i := 0; i < 2; i++ {
		if got := j.start("same-owner"); got != "run" {
			t.Fatalf("start %d: %s", i, got)
		}
	}
	r := j.s.rdb.HGetAll(bg, j.keys.Record).Val()
	if r[FieldAttempt] != "1" || r[FieldFencing] != "1" || j.s.rdb.Get(bg, j.keys.Fence).Val() != "1" {
		t.Fatalf("after a retried start: %v", r)
	}
	if got := j.start("other-owner"); got != "busy" {
		t.Fatalf("another owner: %s", got)
	}
}

// A fence counter that expired while the record holds a token does not go backwards.
func TestStartNeverLowersTheRecordsFence(t *testing.T) {
	t.Parallel()
	j := newScriptJob(t, "failed", 9)
	j.s.rdb.HSet(bg, j.keys.Record, FieldStatus, "queued")
	j.s.rdb.Del(bg, j.keys.Fence)
	if got := j.start("owner-2"); got != "run" {
		t.Fatal(got)
	}
	if tok := j.s.rdb.HGet(bg, j.keys.Record, FieldFencing).Val(); tok != "10" {
		t.Fatalf("token after a lost counter: %s, want 10", tok)
	}
	if got := j.finish(9, "owner-1", StatusDone); got != "stale" {
		t.Fatalf("the old token could write again: %s", got)
	}
}

// Every job script compiles and loads, on a server and on every master of a cluster.
func TestEveryScriptLoads(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	cl := redistest.NewCluster(t)
	for i, sc := range allScripts {
		if err := sc.Load(bg, db.Client).Err(); err != nil {
			t.Errorf("script %d: %v", i, err)
		}
		if err := sc.Load(bg, cl.Client).Err(); err != nil {
			t.Errorf("script %d on the cluster: %v", i, err)
		}
	}
}

// The scripts read and write the record by the names record.go declares, and none spells the
// lease or fence protocol: that is locking's fragment alone.
func TestScriptsUseOnlyRecordFields(t *testing.T) {
	t.Parallel()
	entries, err := os.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	reads := regexp.MustCompile(`rec\.([a-z_]+)`)
	lists := regexp.MustCompile(`record_get\(KEYS\[1\], \{([^}]*)\}\)`)
	hsets := regexp.MustCompile(`'HSET', KEYS\[1\], ([^)]*)\)`)
	literal := regexp.MustCompile(`'([a-z_]+)'`)
	for _, e := range entries {
		b, err := os.ReadFile("scripts/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		src := string(b)
		if strings.Contains(src, "_fence_") || strings.Contains(src, "'INCR'") || strings.Contains(src, "':lock'") {
			t.Errorf("%s spells the fence or lease protocol by hand", e.Name())
		}
		var names []string
		for _, m := range reads.FindAllStringSubmatch(src, -1) {
			names = append(names, m[1])
		}
		for _, m := range append(lists.FindAllStringSubmatch(src, -1), hsets.FindAllStringSubmatch(src, -1)...) {
			// Field names and literal values alike: the values are statuses.
			for _, l := range literal.FindAllStringSubmatch(m[1], -1) {
				names = append(names, l[1])
			}
		}
		for _, n := range names {
			if !slices.Contains(recordFields, n) && !isStatus(n) {
				t.Errorf("%s uses record field %q, not in record.go", e.Name(), n)
			}
		}
	}
}

func isStatus(s string) bool { return slices.Contains(Statuses, Status(s)) || s == "already_applied" }
