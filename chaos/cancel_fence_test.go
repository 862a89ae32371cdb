package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
)

// TestCancelledRebuildWritesNothing: a rebuild is cancelled while its handler waits for the source;
// the source then answers at once. Nothing the handler writes after the cancel's 200 may land, so
// the cache entry must never hold the cancelled job's value.
//
// It failed before a lease's fence carried the resource's fence counter: the cancel raised the
// fence of the job record only, and the handler's cache write (a locking.FencedScript on the cache
// entry's own fence record) landed, sent before the keeper's next renewal told the handler. Now the
// fence prelude refuses a token below the counter, which the cancel's token moved past. CHAOS=short
// runs it (about 10 s).
func TestCancelledRebuildWritesNothing(t *testing.T) {
	if os.Getenv("CHAOS") == "" {
		t.Skip("set CHAOS=short (it builds and runs the binary)")
	}
	bin := buildJobguard(t)
	srv := redistest.Start(t)
	asked := make(chan struct{}, 1)
	release := make(chan struct{})
	var calls atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if calls.Add(1) == 1 {
			asked <- struct{}{}
			<-release
		}
		fmt.Fprint(w, "fresh")
	}))
	defer up.Close()
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	r := newRun(&run{t: t, bin: bin, redis: srv, rdb: srv.Client(t, 0), up: up})
	r.api = r.start("api", srv.Addr)
	r.start("worker", srv.Addr)

	id, code := r.submit("/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"cancelled"}`, "")
	if code != http.StatusAccepted && code != http.StatusOK {
		t.Fatalf("submit: %d", code)
	}
	select {
	case <-asked: // the handler runs and waits for the source
	case <-time.After(30 * time.Second):
		t.Fatal("the rebuild did not ask its source within 30 s")
	}
	r.cancellable(id, cancelTarget{rebuild: "cancelled"})
	r.cancel(id)
	close(release) // the source answers; the handler writes at once
	if f := r.checkCancels(r.jobRecords("status")); f.answered200 != 1 || f.was != "rebuild processing 1" {
		t.Fatalf("cancel: %d answered 200 (%s), want the running job's", f.answered200, f.was)
	}
	// The cache entry must stay unbuilt: poll it for longer than the handler can take.
	deadline := time.Now().Add(3*leaseTTL + 2*time.Second)
	for time.Now().Before(deadline) {
		if got := r.cacheJob("cancelled"); got == id {
			b, _ := json.Marshal(r.rdb.HGetAll(t.Context(), "jobguard:{"+engine.ResourceTag("t1:cancelled")+"}:cache").Val())
			t.Fatalf("the cancelled rebuild %s wrote the cache after its cancel was answered 200: %s", id, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
