package schedule

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestDSTThroughTheScheduler: a leader stepping through DST days (its clock moved 5 minutes at a
// time) creates each wall-clock tick's job once: a daily 02:30 on a spring-forward day once, at
// the end of the gap; on a fall-back day once, at its first occurrence; an hourly one every real
// hour; in Berlin, New York and a zone without DST.
func TestDSTThroughTheScheduler(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, spec, tz, from, to string
		want                     []string
	}{
		{"berlin-spring", "30 2 * * *", "Europe/Berlin", "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z",
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"berlin-fall", "30 2 * * *", "Europe/Berlin", "2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z",
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"newyork-spring", "30 2 * * *", "America/New_York", "2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z",
			[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"newyork-fall", "30 1 * * *", "America/New_York", "2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z",
			[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"berlin-hourly-fall", "0 * * * *", "Europe/Berlin", "2026-10-24T23:30:00Z", "2026-10-25T03:00:00Z",
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		{"kolkata-daily", "@daily", "Asia/Kolkata", "2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z",
			[]string{"2026-03-28T18:30:00Z", "2026-03-29T18:30:00Z", "2026-03-30T18:30:00Z"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			from, to := mustTime(t, c.from), mustTime(t, c.to)
			clock := newFakeClock(from)
			b := newBundle(t, Config{Clock: clock, Grace: time.Hour, Poll: time.Hour},
				Spec{Name: c.name, Cron: c.spec, Type: typ, Timezone: c.tz, Overlap: Allow})
			s := b.idle("w")
			ctx, f, p := context.Background(), lockingFence(1, "w"), s.plans[0]
			for now := from; !now.After(to); now = now.Add(5 * time.Minute) {
				clock.Set(now)
				if err := s.step(ctx, f, p, parseState(b.raw(c.name)), now); err != nil {
					t.Fatalf("step at %s: %v", now, err)
				}
			}
			var got []string
			for _, at := range b.jobs(c.name) {
				got = append(got, at.UTC().Format(time.RFC3339))
			}
			if fmt.Sprint(got) != fmt.Sprint(c.want) || s.Stats.Missed.Load() != 0 {
				t.Fatalf("%s in %s: jobs at %v, want %v; missed %d", c.spec, c.tz, got, c.want, s.Stats.Missed.Load())
			}
		})
	}
}
