package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// sse is one server-sent event as a client sees it.
type sse struct {
	ID, Event, Data string
}

// openEvents starts GET path as a stream; the caller reads it with readEvents.
func openEvents(t *testing.T, ctx context.Context, r *running, path string, header ...string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readEvents sends each event of the stream on the channel, and closes it when the stream ends.
func readEvents(resp *http.Response) <-chan sse {
	out := make(chan sse, 256)
	go func() {
		defer close(out)
		sc := bufio.NewScanner(resp.Body)
		var e sse
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if e != (sse{}) {
					out <- e
				}
				e = sse{}
			case strings.HasPrefix(line, ":"):
				out <- sse{Event: "comment", Data: line}
			case strings.HasPrefix(line, "id: "):
				e.ID = line[4:]
			case strings.HasPrefix(line, "event: "):
				e.Event = line[7:]
			case strings.HasPrefix(line, "data: "):
				e.Data = line[6:]
			}
		}
	}()
	return out
}

// collect reads events until the stream closes, failing the test after within.
func collect(t *testing.T, ch <-chan sse, within time.Duration) []sse {
	t.Helper()
	var all []sse
	deadline := time.After(within)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				return all
			}
			all = append(all, e)
		case <-deadline:
			t.Fatalf("the stream did not end within %s; so far %+v", within, all)
		}
	}
}

func enqueueJob(t *testing.T, r *running, header ...string) string {
	t.Helper()
	resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"w"}`, header...)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	return a.JobID
}

// checkTimeline asserts that events are timeline entries with ids from first on, in order, and
// returns their event names.
func checkTimeline(t *testing.T, events []sse, first int) []string {
	t.Helper()
	var names []string
	for i, e := range events {
		if e.Event != "" || e.ID != strconv.Itoa(first+i) {
			t.Fatalf("event %d: %+v, want id %d", i, e, first+i)
		}
		var ev jobstore.Event
		if err := json.Unmarshal([]byte(e.Data), &ev); err != nil || ev.Event == "" {
			t.Fatalf("event %d data %q: %v", i, e.Data, err)
		}
		names = append(names, ev.Event)
	}
	return names
}

// The stream of a job from enqueue to done: its timeline in order, then `event: end` with the
// status, then the stream closes; the same names as the job view's timeline. Resuming after the
// end with Last-Event-ID gets only the unseen tail and the end, at once.
func TestEventsStreamAJobToItsEnd(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, twoTenants)
	id := enqueueJob(t, r, bearer(tokenA)...)
	resp := openEvents(t, context.Background(), r, "/jobs/"+id+"/events", bearer(tokenA)...)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	all := collect(t, readEvents(resp), 20*time.Second)
	if len(all) < 2 {
		t.Fatalf("stream: %+v", all)
	}
	if last := all[len(all)-1]; last.Event != "end" || last.Data != `{"status":"done"}` {
		t.Fatalf("last event %+v, want end with status done", last)
	}
	names := checkTimeline(t, all[:len(all)-1], 0)
	var v jobView
	if code := getJSON(t, r, "/jobs/"+id, &v, bearer(tokenA)...); code != 200 || v.Status != "done" {
		t.Fatalf("view: %d %+v", code, v)
	}
	var want []string
	for _, e := range v.Timeline {
		want = append(want, e.Event)
	}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("streamed %v, the view's timeline is %v", names, want)
	}

	t0 := time.Now()
	resumed := collect(t, readEvents(openEvents(t, context.Background(), r, "/jobs/"+id+"/events",
		append(bearer(tokenA), "Last-Event-ID", "1")...)), 5*time.Second)
	if d := time.Since(t0); d > 2*time.Second {
		t.Fatalf("the stream of an ended job took %s to end", d)
	}
	if len(resumed) != len(all)-2 || resumed[len(resumed)-1].Event != "end" {
		t.Fatalf("resumed after id 1: %+v, want the %d events after it and the end", resumed, len(all)-3)
	}
	if got := checkTimeline(t, resumed[:len(resumed)-1], 2); strings.Join(got, ",") != strings.Join(want[2:], ",") {
		t.Fatalf("resumed %v, want %v", got, want[2:])
	}
}

// Another tenant's job is 404 problem+json before any stream starts; so is a bad Last-Event-ID
// (400). A job still queued is streamed and resumed past what was seen.
func TestEventsTenantAndResume(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the job stays queued
	id := enqueueJob(t, r, bearer(tokenA)...)
	resp, body := get(t, r.base+"/jobs/"+id+"/events", bearer(tokenB)...)
	if resp.StatusCode != 404 {
		t.Fatalf("another tenant: %d %s", resp.StatusCode, body)
	}
	decodeProblem(t, resp, body)
	resp, body = get(t, r.base+"/jobs/"+id+"/events", append(bearer(tokenA), "Last-Event-ID", "x")...)
	if resp.StatusCode != 400 {
		t.Fatalf("bad Last-Event-ID: %d %s", resp.StatusCode, body)
	}
	decodeProblem(t, resp, body)

	ctx, cancel := context.WithCancel(context.Background())
	ch := readEvents(openEvents(t, ctx, r, "/jobs/"+id+"/events", bearer(tokenA)...))
	first := <-ch
	cancel() // the client leaves; the stream ends on its next write
	if first.ID != "0" {
		t.Fatalf("first event %+v", first)
	}
	// Cancel the job: the stream resumed after id 0 shows what came after and ends cancelled.
	if resp, body := post(t, r, "/jobs/"+id+"/cancel", "", bearer(tokenA)...); resp.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	rest := collect(t, readEvents(openEvents(t, context.Background(), r, "/jobs/"+id+"/events",
		append(bearer(tokenA), "Last-Event-ID", "0")...)), 5*time.Second)
	if len(rest) < 2 || rest[len(rest)-1].Data != `{"status":"cancelled"}` {
		t.Fatalf("resumed: %+v", rest)
	}
	checkTimeline(t, rest[:len(rest)-1], 1)
}

// The app stops promptly with a stream open: the stream ends (no end event: the job has not ended)
// and Run returns well within the HTTP shutdown timeout.
func TestEventsStreamEndsOnShutdown(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants)
	id := enqueueJob(t, r, bearer(tokenA)...)
	ch := readEvents(openEvents(t, context.Background(), r, "/jobs/"+id+"/events", bearer(tokenA)...))
	if first := <-ch; first.ID != "0" {
		t.Fatalf("first event %+v", first)
	}
	t0 := time.Now()
	r.shutdown(t)
	if d := time.Since(t0); d > 3*time.Second {
		t.Fatalf("Run returned %s after the stop with a stream open", d)
	}
	for _, e := range collect(t, ch, 3*time.Second) {
		if e.Event == "end" {
			t.Fatalf("an end event on shutdown: %+v", e)
		}
	}
}

// Event ids stay the same when the timeline's cap trims it: resuming after id n of a job with
// more events than the cap gets the event pushed after n, with id n+1, not a shifted one.
func TestEventsIDsSurviveTheTimelineCap(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the job stays queued
	id := enqueueJob(t, r, bearer(tokenA)...)
	store := r.API().deps.Stack.Store()
	k, err := store.Keys(id, "")
	if err != nil {
		t.Fatal(err)
	}
	pipe := r.Redis().Pipeline()
	for i := range 105 { // the enqueued event is id 0; these are ids 1..105, past the cap of 100
		store.QueueEvents(context.Background(), pipe, k, time.Now(), jobstore.Event{Event: "bounced", Detail: "e" + strconv.Itoa(i+1)})
	}
	if _, err := pipe.Exec(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch := readEvents(openEvents(t, ctx, r, "/jobs/"+id+"/events", append(bearer(tokenA), "Last-Event-ID", "102")...))
	for want := 103; want <= 105; want++ {
		select {
		case e := <-ch:
			var ev jobstore.Event
			_ = json.Unmarshal([]byte(e.Data), &ev)
			if e.ID != strconv.Itoa(want) || ev.Detail != "e"+strconv.Itoa(want) {
				t.Fatalf("after Last-Event-ID 102: event %+v (detail %q), want id %d with detail e%d", e, ev.Detail, want, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no event with id %d within 10s of resuming after 102", want)
		}
	}
}
