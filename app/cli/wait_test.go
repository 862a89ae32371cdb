package cli_test

import (
	"context"
	"strings"
	"testing"
)

// show --wait blocks until the job ends and exits by its outcome: 0 done, 5 failed, 6 ended
// otherwise (cancelled), 7 when --timeout is over first (printing the view it had then); 3 for
// no such job; 2 for a --timeout without --wait or below zero. No worker runs: the test ends a
// job by writing its status, as its last attempt would.
func TestJobsShowWaitExitsByOutcome(t *testing.T) {
	t.Parallel()
	s := startAPI(t, twoTenants)
	ids := []string{s.enqueue(t, tokenA, "t1", "o-1"), s.enqueue(t, tokenA, "t1", "o-2"), s.enqueue(t, tokenA, "t1", "o-3"),
		s.enqueue(t, tokenA, "t1", "o-4")}
	asA := map[string]string{"JOBGUARD_URL": s.url, "JOBGUARD_TOKEN": tokenA}
	ctx := context.Background()

	type result struct {
		code        int
		out, errOut string
	}
	waiting := make(chan result, 1)
	go func() {
		code, out, errOut := run(t, asA, "show", "--wait", ids[0], "--timeout", "20s", "-o", "json")
		waiting <- result{code, out, errOut}
	}()
	// A status that has not ended keeps it waiting; the end answers it, whenever the wait began.
	s.Redis().HSet(ctx, s.recordKey(t, ids[0]), "status", "processing")
	s.Redis().HSet(ctx, s.recordKey(t, ids[0]), "status", "failed")
	r := <-waiting
	var v view
	if decode(t, r.out, &v); r.code != 5 || v.JobID != ids[0] || v.Status != "failed" || !strings.Contains(r.errOut, "ended failed") {
		t.Fatalf("a job that failed: exit %d %s %q", r.code, r.out, r.errOut)
	}

	s.Redis().HSet(ctx, s.recordKey(t, ids[1]), "status", "done")
	if code, out, errOut := run(t, asA, "show", ids[1], "--wait"); code != 0 || !strings.Contains(out, "done") || !strings.Contains(out, "timeline:\n") || errOut != "" {
		t.Fatalf("a job that is done: exit %d\n%s%s", code, out, errOut)
	}

	if code, _, errOut := run(t, asA, "cancel", ids[2]); code != 0 {
		t.Fatalf("cancel: exit %d %s", code, errOut)
	}
	code, out, errOut := run(t, asA, "show", "--wait", ids[2], "-o", "json")
	if decode(t, out, &v); code != 6 || v.Status != "cancelled" ||
		!strings.Contains(errOut, "ended cancelled") {
		t.Fatalf("a cancelled job: exit %d %s %q", code, out, errOut)
	}

	code, out, errOut = run(t, asA, "show", "--wait", "--timeout", "300ms", ids[3], "-o", "json")
	if decode(t, out, &v); code != 7 || v.Status != "queued" || !strings.Contains(errOut, "not ended within --timeout") {
		t.Fatalf("a job still queued at the timeout: exit %d %s %q", code, out, errOut)
	}

	if code, out, errOut := run(t, asA, "show", "--wait", "nope"); code != 3 || out != "" || !strings.Contains(errOut, "Not Found") {
		t.Fatalf("no such job: exit %d %q %q", code, out, errOut)
	}
	for _, args := range [][]string{{"show", ids[3], "--timeout", "1s"}, {"show", ids[3], "--wait", "--timeout", "-1s"},
		{"retry", ids[3], "--wait"}} {
		if code, out, errOut := run(t, asA, args...); code != 2 || out != "" || errOut == "" {
			t.Fatalf("%q: exit %d %q %q", args, code, out, errOut)
		}
	}
}
