package schedule

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTicks: time zones, DST days, seconds, descriptors and @every, as instants in UTC.
func TestTicks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, spec, tz, from, to string
		want                     []string
	}{
		{"daily 02:30 on Berlin's spring-forward day runs once, at the end of the gap", "30 2 * * *", "Europe/Berlin",
			"2026-03-28T00:00:00Z", "2026-03-31T00:00:00Z", []string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"daily 02:30 on Berlin's fall-back day runs once, at its first occurrence", "30 2 * * *", "Europe/Berlin",
			"2026-10-24T00:00:00Z", "2026-10-27T00:00:00Z", []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
		{"two times in the gap run once each, in order", "30 2,3 * * *", "Europe/Berlin",
			"2026-03-29T00:00:00Z", "2026-03-29T12:00:00Z", []string{"2026-03-29T01:00:00Z", "2026-03-29T01:30:00Z"}},
		{"hourly runs every real hour through a fall-back", "0 * * * *", "Europe/Berlin",
			"2026-10-25T00:00:00Z", "2026-10-25T03:00:00Z", []string{"2026-10-25T01:00:00Z", "2026-10-25T02:00:00Z", "2026-10-25T03:00:00Z"}},
		{"hourly runs every real hour through a spring-forward", "30 * * * *", "Europe/Berlin",
			"2026-03-29T00:00:00Z", "2026-03-29T03:00:00Z", []string{"2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z", "2026-03-29T02:30:00Z"}},
		{"New York spring-forward", "30 2 * * *", "America/New_York",
			"2026-03-07T00:00:00Z", "2026-03-10T00:00:00Z", []string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"New York fall-back", "30 1 * * *", "America/New_York",
			"2026-10-31T00:00:00Z", "2026-11-03T00:00:00Z", []string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"a half-hour zone", "@daily", "Asia/Kolkata",
			"2026-01-01T00:00:00Z", "2026-01-03T00:00:00Z", []string{"2026-01-01T18:30:00Z", "2026-01-02T18:30:00Z"}},
		{"UTC by default, with seconds", "*/20 * * * * *", "",
			"2026-01-01T10:00:05Z", "2026-01-01T10:01:00Z", []string{"2026-01-01T10:00:20Z", "2026-01-01T10:00:40Z", "2026-01-01T10:01:00Z"}},
		{"@every ticks on multiples of its interval since the epoch", "@every 1s", "Europe/Berlin",
			"2026-01-01T10:00:00.4Z", "2026-01-01T10:00:03Z", []string{"2026-01-01T10:00:01Z", "2026-01-01T10:00:02Z", "2026-01-01T10:00:03Z"}},
		{"@every 90s", "@every 90s", "",
			"2026-01-01T00:00:10Z", "2026-01-01T00:04:00Z", []string{"2026-01-01T00:01:30Z", "2026-01-01T00:03:00Z"}},
	} {
		p, err := Spec{Name: "n", Cron: c.spec, Type: "t", Timezone: c.tz}.compile()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		var got []string
		for _, tick := range p.Ticks(mustTime(t, c.from), mustTime(t, c.to), 100) {
			got = append(got, tick.UTC().Format(time.RFC3339))
		}
		if strings.Join(got, " ") != strings.Join(c.want, " ") {
			t.Errorf("%s (%s in %q):\n got %v\nwant %v", c.name, c.spec, c.tz, got, c.want)
		}
	}
}

// TestValidate: each mistake names its field.
func TestValidate(t *testing.T) {
	t.Parallel()
	ok := Spec{Name: "nightly", Cron: "0 3 * * *", Type: "rebuild-cache", Payload: json.RawMessage(`{"a":1}`)}
	for _, spec := range []string{ok.Cron, "0 0 29 2 *", "0 0 31 1-12 *"} { // leap days, and months that have a 31st
		s := ok
		s.Cron = spec
		if err := s.Validate(); err != nil {
			t.Fatalf("valid spec %q: %v", spec, err)
		}
	}
	for _, c := range []struct {
		field string
		edit  func(*Spec)
	}{
		{"name", func(s *Spec) { s.Name = "" }},
		{"name", func(s *Spec) { s.Name = "a b" }},
		{"type", func(s *Spec) { s.Type = "" }},
		{"spec", func(s *Spec) { s.Cron = "" }},
		{"spec", func(s *Spec) { s.Cron = "61 * * * *" }},
		{"spec", func(s *Spec) { s.Cron = "CRON_TZ=Europe/Berlin 0 3 * * *" }},
		{"spec", func(s *Spec) { s.Cron = "@every 500ms" }},
		{"spec", func(s *Spec) { s.Cron = "@every soon" }},
		{"spec", func(s *Spec) { s.Cron = "0 0 30 2 *" }},          // 30 February: never
		{"spec", func(s *Spec) { s.Cron = "*/5 * 31 4,6 *" }},      // 31 April and June, every hour's
		{"spec", func(s *Spec) { s.Cron = "0 0 31 2,4,6,9,11 *" }}, // months without a 31st
		{"timezone", func(s *Spec) { s.Timezone = "Mars/Olympus" }},
		{"timezone", func(s *Spec) { s.Timezone = "Local" }},
		{"overlap", func(s *Spec) { s.Overlap = "sometimes" }},
		{"catchup", func(s *Spec) { s.CatchUp = "some" }},
		{"payload", func(s *Spec) { s.Payload = json.RawMessage(`{`) }},
	} {
		s := ok
		c.edit(&s)
		var fe *FieldError
		err := s.Validate()
		if !errors.As(err, &fe) || fe.Field != c.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: got %v, want a FieldError on %s", s, err, c.field)
		}
	}
}

// TestTickJobID: a tick's job id has the shape of a job id, in its resource's slot, carries the
// tick's time, and is the same for the same schedule and tick only.
func TestTickJobID(t *testing.T) {
	t.Parallel()
	at := mustTime(t, "2026-01-01T10:00:01Z")
	a := jobstore.DerivedJobID("schedule:a", at, "a")
	if !jobstore.ValidJobID(a) || a != jobstore.DerivedJobID("schedule:a", at, "a") {
		t.Fatalf("id %q is not a stable job id", a)
	}
	if tag, _ := jobstore.TagOf(a); tag != jobstore.ResourceTag("schedule:a") {
		t.Fatalf("tag %s is not the resource's", tag)
	}
	if a[17:29] != "019b78fffce8" { // 1767261601000 ms
		t.Fatalf("time part %s, want the tick's ms", a[17:29])
	}
	for _, other := range []string{
		jobstore.DerivedJobID("schedule:a", at.Add(time.Second), "a"), jobstore.DerivedJobID("schedule:a", at, "b"),
	} {
		if other == a {
			t.Fatalf("two ticks share id %s", a)
		}
	}
}
