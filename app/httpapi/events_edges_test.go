package httpapi

import (
	"context"
	"testing"
	"time"
)

// Last-Event-ID is parsed strictly: anything but the decimal id of an event a stream can send
// (0 up to 2^63-2, so that the next position fits) is 400 problem+json naming the header. An id
// past the job's last event resumes after its last event: an ended job's stream is then only
// `event: end` (a browser that reconnected with it would otherwise reconnect for ever), and a
// waiting job's stream shows the events pushed from then on. Found by an adversarial probe:
// 9223372036854775807 overflowed and replayed the whole timeline; 100000000000000000 gave an
// empty stream without an end.
func TestEventsLastEventIDEdges(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the jobs stay queued
	ended := enqueueJob(t, r, bearer(tokenA)...)
	if resp, body := post(t, r, "/jobs/"+ended+"/cancel", "", bearer(tokenA)...); resp.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	for _, past := range []string{"100000000000000000", "9007199254740993", "9223372036854775806", "5"} {
		all := collect(t, readEvents(openEvents(t, context.Background(), r, "/jobs/"+ended+"/events",
			append(bearer(tokenA), "Last-Event-ID", past)...)), 5*time.Second)
		if len(all) != 1 || all[0].Event != "end" || all[0].Data != `{"status":"cancelled"}` {
			t.Fatalf("Last-Event-ID %s of an ended job: %+v, want only the end", past, all)
		}
	}

	for _, bad := range []string{"9223372036854775807", "9223372036854775808", "99999999999999999999999", "-1", "+1", "1.5", "1e3", "0x10", "1 2"} {
		resp, body := get(t, r.base+"/jobs/"+ended+"/events", append(bearer(tokenA), "Last-Event-ID", bad)...)
		if p := decodeProblem(t, resp, body); p.Status != 400 || p.Field != "Last-Event-ID" {
			t.Fatalf("Last-Event-ID %q: %+v", bad, p)
		}
	}
	waiting := enqueueJob(t, r, bearer(tokenA)...)
	ch := readEvents(openEvents(t, context.Background(), r, "/jobs/"+waiting+"/events",
		append(bearer(tokenA), "Last-Event-ID", "100000000000000000")...))
	waitFeedRead(t, r, waiting) // nothing to send: the stream waits past the job's last event
	if resp, body := post(t, r, "/jobs/"+waiting+"/cancel", "", bearer(tokenA)...); resp.StatusCode != 200 {
		t.Fatalf("cancel: %d %s", resp.StatusCode, body)
	}
	all := collect(t, ch, 5*time.Second)
	if len(all) != 2 || all[1].Event != "end" {
		t.Fatalf("a waiting job resumed past its end: %+v, want its cancel and the end", all)
	}
	checkTimeline(t, all[:1], 1)
}

// waitFeedRead waits until the feed of job id has read the job once.
func waitFeedRead(t *testing.T, r *running, id string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		r.API().feeds.mu.Lock()
		f := r.API().feeds.byJob[id]
		r.API().feeds.mu.Unlock()
		if f != nil {
			f.mu.Lock()
			read := f.read
			f.mu.Unlock()
			if read {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the feed of %s has not read it within 5s", id)
		}
	}
}
