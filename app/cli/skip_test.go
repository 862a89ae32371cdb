package cli_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// skip lets a fair sequence blocked by a job that failed for good go on: the failed job stays
// failed and its key's next job, waiting until then, is admitted. A job that blocks
// nothing is exit 4, one that is not there 3.
func TestJobsSkipUnblocksASequence(t *testing.T) {
	t.Parallel()
	s := startAPI(t, map[string]string{"API_TOKENS": twoTenants["API_TOKENS"],
		"TASK_LIMITS": "rebuild-cache=fair:on,sequence:on,on_failure:block"})
	ids := []string{s.enqueueType(t, tokenA, "rebuild-cache", `{"tenant_id":"t1","resource_id":"r-1"}`),
		s.enqueueType(t, tokenA, "rebuild-cache", `{"tenant_id":"t1","resource_id":"r-2"}`)}
	asA := map[string]string{"JOBGUARD_URL": s.url, "JOBGUARD_TOKEN": tokenA}
	var v view
	_, out, _ := run(t, asA, "show", ids[1], "-o", "json")
	if decode(t, out, &v); v.Status != "waiting" {
		t.Fatalf("the sequence's second job: %s, want waiting", out)
	}
	if f := s.fairness(t, tokenA, "rebuild-cache"); f.WaitingKeys != 1 || len(f.Keys) != 1 || f.Keys[0].Waiting != 1 {
		t.Fatalf("the admission layer before the skip: %+v, want t1's second job waiting", f)
	}
	if code, out, errOut := run(t, asA, "skip", ids[0]); code != 4 || out != "" || !strings.Contains(errOut, "Conflict") {
		t.Fatalf("skip of a job that has not failed: exit %d %q %q", code, out, errOut)
	}

	s.Redis().HSet(context.Background(), s.recordKey(t, ids[0]), "status", "failed") // as its last attempt leaves it
	code, out, errOut := run(t, asA, "skip", ids[0])
	if code != 0 || !strings.Contains(out, "skipped "+ids[0]) {
		t.Fatalf("skip: exit %d %q %q", code, out, errOut)
	}
	// The next job is admitted and delivered (it stays waiting until a worker starts it, and
	// none runs here): t1's key has nothing waiting any more, one job running.
	if f := s.fairness(t, tokenA, "rebuild-cache"); f.WaitingKeys != 0 || len(f.Keys) != 1 || f.Keys[0].Waiting != 0 || f.Keys[0].Running != 1 {
		t.Fatalf("the admission layer after the skip: %+v, want t1's next job admitted", f)
	}
	_, out, _ = run(t, asA, "show", ids[0], "-o", "json")
	if decode(t, out, &v); v.Status != "failed" || !hasEvent(v, "sequence_skipped") {
		t.Fatalf("the skipped job: %s, want failed with a sequence_skipped event", out)
	}
	if code, out, _ := run(t, asA, "skip", ids[0], "-o", "json"); code != 4 || out != "" {
		t.Fatalf("a second skip: exit %d %q", code, out)
	}
	if code, _, errOut := run(t, asA, "skip", "nope"); code != 3 || !strings.Contains(errOut, "Not Found") {
		t.Fatalf("skip of no job: exit %d %q", code, errOut)
	}
}

// fairnessAnswer is GET /fairness/{type}, as far as the test reads it.
type fairnessAnswer struct {
	WaitingKeys int `json:"waiting_keys"`
	Keys        []struct {
		Key              string
		Waiting, Running int
	} `json:"keys"`
}

// fairness is GET /fairness/{typ} with token.
func (s *server) fairness(t *testing.T, token, typ string) fairnessAnswer {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.url+"/fairness/"+typ, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var f fairnessAnswer
	decode(t, string(raw), &f)
	return f
}

func hasEvent(v view, name string) bool {
	for _, e := range v.Timeline {
		if e.Event == name {
			return true
		}
	}
	return false
}
