package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Retries and cancels racing on one failed job, many rounds against real Redis: every answer is
// clean (retry 202 or 409, cancel 200 or 409, each refusal problem+json), at most one retry wins,
// and asynq holds at most one waiting delivery of the job afterwards, none when a cancel won.
// Found by an adversarial probe: about one round in 4-6 a retry answered 500 ('engine: replay
// ...: task ID conflicts with another task') and rounds left extra pending deliveries.
func TestRetryAndCancelRacingOnAFailedJob(t *testing.T) {
	t.Parallel()
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNotFound) // permanent: a job fails at its first run
	}))
	defer upstream.Close()
	url := redistest.NewDB(t).URL()
	const rounds, retries, cancels = 30, 4, 2
	worker := startApp(t, RoleWorker, map[string]string{"REDIS_URL": url, "REBUILD_SOURCE_URL": upstream.URL})
	api := startApp(t, RoleAPI, map[string]string{"REDIS_URL": url, "RATE_LIMIT": "0"})
	ids := make([]string, rounds)
	for i := range ids {
		resp, body := post(t, api, "/jobs/rebuild-cache", fmt.Sprintf(`{"tenant_id":"t1","resource_id":"race-%d"}`, i))
		var a jobAnswer
		if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 {
			t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
		}
		ids[i] = a.JobID
	}
	for _, id := range ids {
		waitJob(t, api, id, "failed")
	}
	worker.shutdown(t) // the replays' deliveries stay where the race left them

	insp := asynq.NewInspectorFromRedisClient(api.Redis())
	waiting := func(id string) []string {
		t.Helper()
		var out []string
		for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){insp.ListPendingTasks, insp.ListScheduledTasks} {
			tasks, err := list("default", asynq.PageSize(1000))
			if err != nil {
				t.Fatal(err)
			}
			for _, ti := range tasks {
				if strings.HasPrefix(ti.ID, id+".") {
					out = append(out, ti.ID)
				}
			}
		}
		return out
	}
	for round, id := range ids {
		type answer struct {
			verb string
			code int
			body string
			resp *http.Response
		}
		answers := make(chan answer, retries+cancels)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range retries + cancels {
			verb := "retry"
			if i%3 == 2 {
				verb = "cancel"
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				resp, body := post(t, api, "/jobs/"+id+"/"+verb, "")
				answers <- answer{verb, resp.StatusCode, body, resp}
			}()
		}
		close(start)
		wg.Wait()
		close(answers)
		won := map[string]int{}
		for a := range answers {
			ok := (a.verb == "retry" && (a.code == 202 || a.code == 409)) || (a.verb == "cancel" && (a.code == 200 || a.code == 409))
			if !ok {
				t.Fatalf("round %d: %s answered %d %s", round, a.verb, a.code, a.body)
			}
			if a.code == 409 {
				decodeProblem(t, a.resp, a.body)
			} else {
				won[a.verb]++
			}
		}
		left := waiting(id)
		switch {
		case won["retry"] > 1:
			t.Fatalf("round %d: %d retries won", round, won["retry"])
		case won["cancel"] > 0 && len(left) > 0:
			t.Fatalf("round %d: a cancel won and asynq still holds %v", round, left)
		case len(left) > 1:
			t.Fatalf("round %d: asynq holds %d waiting deliveries of the job: %v (answers %v)", round, len(left), left, won)
		}
	}
}
