package rebuildcache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/internal/tasktest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()

// start runs rebuild-cache alone on a real worker.
func start(t *testing.T, deps tasks.Deps) tasktest.Env {
	return tasktest.Start(t, deps, []tasks.Task{Task})
}

func TestRebuildCacheLocalSource(t *testing.T) {
	t.Parallel()
	e := start(t, tasks.Deps{})
	p := RebuildCachePayload{TenantID: "t1", ResourceID: "home"}
	first := e.Wait(e.Enqueue(p.Spec()), "done")
	second := e.Wait(e.Enqueue(p.Spec()), "done")
	c, err := ReadCache(bg, e.Stack.Locks(), "t1", "home")
	if err != nil || !strings.HasPrefix(c.Value, "computed:") || c.Version != 2 || c.FencingToken != 2 || c.JobID != second.Raw["job_id"] {
		t.Fatalf("entry %+v %v (first job %s)", c, err, first.Raw["job_id"])
	}
	if _, err := ReadCache(bg, e.Stack.Locks(), "t1", "never"); !errors.Is(err, ErrNoEntry) {
		t.Fatalf("missing entry: %v", err)
	}
}

// Upstream answers decide the error class: 5xx is retried, 429 waits without spending an attempt,
// other 4xx fail at once.
func TestRebuildCacheUpstreamClasses(t *testing.T) {
	t.Parallel()
	var calls sync.Map
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res := r.URL.Query().Get("resource_id")
		n, _ := calls.LoadOrStore(res, new(atomic.Int32))
		call := n.(*atomic.Int32).Add(1)
		switch {
		case res == "flaky" && call == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		case res == "limited" && call == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		case res == "missing":
			w.WriteHeader(http.StatusNotFound)
		default:
			fmt.Fprintf(w, "%s-v%d", res, call)
		}
	}))
	defer upstream.Close()
	e := start(t, tasks.Deps{Settings: map[string]string{SettingSourceURL: upstream.URL + "/source"}})
	flaky := e.Enqueue(RebuildCachePayload{TenantID: "t", ResourceID: "flaky"}.Spec())
	limited := e.Enqueue(RebuildCachePayload{TenantID: "t", ResourceID: "limited"}.Spec())
	missing := e.Enqueue(RebuildCachePayload{TenantID: "t", ResourceID: "missing"}.Spec())
	if v := e.Wait(flaky, "done"); v.Raw["attempt"] != "2" {
		t.Fatalf("503 then 200: %v", v.Record)
	}
	if v := e.Wait(limited, "done"); v.Raw["attempt"] != "1" {
		t.Fatalf("429 then 200 spent an attempt: %v", v.Record)
	}
	if v := e.Wait(missing, "failed"); v.Raw["attempt"] != "1" || !strings.Contains(v.Raw["last_error"], "404") {
		t.Fatalf("404: %v", v.Record)
	}
	if c, _ := ReadCache(bg, e.Stack.Locks(), "t", "flaky"); c.Value != "flaky-v2" {
		t.Fatalf("cache %+v", c)
	}
}

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	if d := retryAfter("3"); d != 3*time.Second {
		t.Fatal(d)
	}
	if d := retryAfter(time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat)); d < 3*time.Second || d > 5*time.Second {
		t.Fatal(d)
	}
	if d := retryAfter("soon"); d != time.Second {
		t.Fatal(d)
	}
}

// The payload's validation names the first invalid field.
func TestPayloadValidationNamesTheField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err   error
		field string
	}{
		{RebuildCachePayload{TenantID: "t{x}", ResourceID: "r"}.Validate(), "tenant_id"},
		{RebuildCachePayload{TenantID: "t"}.Validate(), "resource_id"},
	} {
		var fe *tasks.FieldError
		if !errors.As(tc.err, &fe) || fe.Field != tc.field {
			t.Errorf("got %v, want an error naming %s", tc.err, tc.field)
		}
	}
}

// The cache read model: the resource parameter validated by the task, a missing entry an
// ErrNotFound whose text names it.
func TestCacheReadModel(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	s := engine.New(db.Client, engine.Config{})
	t.Cleanup(s.Close)
	cache := Task.Routes[0]
	var fe *tasks.FieldError
	if err := cache.Params["resource"]("a/b"); !errors.As(err, &fe) || fe.Field != "resource" {
		t.Errorf("resource a/b: %v", err)
	}
	_, err := cache.Read(bg, tasks.ReadDeps{Locks: s.Locks()}, map[string]string{"tenant": "t1", "resource": "never"})
	if !errors.Is(err, tasks.ErrNotFound) || !errors.Is(err, ErrNoEntry) || err.Error() != "no cache entry for t1/never" {
		t.Errorf("missing entry: %v", err)
	}
}
