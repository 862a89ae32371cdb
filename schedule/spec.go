package schedule

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
	_ "time/tzdata" // zones resolve on machines without a zoneinfo database

	"github.com/robfig/cron/v3"
)

// Overlap says what a tick does while the previous tick's job has not ended.
type Overlap string

// The overlap policies.
const (
	// Skip creates no job for the tick (counted as skipped); the default.
	Skip Overlap = "skip"
	// Allow creates the tick's job whatever the previous one is doing.
	Allow Overlap = "allow"
	// Replace cancels the previous tick's job (engine.Stack.Cancel) and creates the tick's.
	Replace Overlap = "replace"
)

// CatchUp says what the ticks a schedule missed while no leader ran become.
type CatchUp string

// The catch-up policies.
const (
	// None drops every missed tick (counted as missed); the default.
	None CatchUp = "none"
	// Latest creates one job, for the latest missed tick; the others count as missed.
	Latest CatchUp = "latest"
	// All creates a job for each missed tick, the latest MaxCatchUp of them; older ones count as missed.
	All CatchUp = "all"
)

// MaxCatchUp bounds how many missed ticks catch-up All creates after an outage.
const MaxCatchUp = 100

// Spec declares a schedule: a job of Type with Payload at every tick of Cron in Timezone. It is
// the element of SCHEDULES (JSON) and of tasks.Task.Schedules.
type Spec struct {
	// Name identifies the schedule: 1-64 characters of [A-Za-z0-9._-]. Its ticks' job ids derive from it.
	Name string `json:"name"`
	// Cron is a cron expression with optional seconds ("*/10 * * * * *", "30 2 * * *"), a
	// descriptor ("@hourly", "@daily") or "@every <duration>" (whole seconds, at least 1s, ticks on
	// multiples of the duration since the Unix epoch).
	Cron string `json:"spec"`
	// Type is the task type the ticks enqueue.
	Type string `json:"type"`
	// Payload is the job's payload (JSON), as POST /jobs/<type> takes it.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Timezone is an IANA zone name ("Europe/Berlin"); default UTC.
	Timezone string `json:"timezone,omitempty"`
	// Overlap is skip (default), allow or replace.
	Overlap Overlap `json:"overlap,omitempty"`
	// CatchUp is none (default), latest or all.
	CatchUp CatchUp `json:"catchup,omitempty"`
}

// FieldError names the field of a Spec that is wrong.
type FieldError struct {
	Field  string
	Detail string
}

func (e *FieldError) Error() string { return "schedule: " + e.Field + ": " + e.Detail }

// ErrInvalid is what every FieldError is (errors.Is).
var ErrInvalid = errors.New("schedule: invalid schedule")

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

var nameRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Validate names the first wrong field (*FieldError). It does not know task types: the caller
// checks Type and Payload against its registry.
func (s Spec) Validate() error {
	_, err := s.compile()
	return err
}

// WithDefaults fills Timezone, Overlap and CatchUp with their defaults.
func (s Spec) WithDefaults() Spec {
	if s.Timezone == "" {
		s.Timezone = "UTC"
	}
	if s.Overlap == "" {
		s.Overlap = Skip
	}
	if s.CatchUp == "" {
		s.CatchUp = None
	}
	return s
}

// plan is a validated schedule: its spec with defaults and the ticks it makes.
type plan struct {
	Spec
	loc   *time.Location
	sched cron.Schedule
	every time.Duration // > 0 for @every
}

func (s Spec) compile() (*plan, error) {
	s = s.WithDefaults()
	if !nameRe.MatchString(s.Name) {
		return nil, &FieldError{"name", "must be 1-64 characters of [A-Za-z0-9._-]"}
	}
	if s.Type == "" {
		return nil, &FieldError{"type", "is required"}
	}
	spec := strings.TrimSpace(s.Cron)
	if spec == "" {
		return nil, &FieldError{"spec", "is required"}
	}
	if strings.HasPrefix(spec, "TZ=") || strings.HasPrefix(spec, "CRON_TZ=") {
		return nil, &FieldError{"spec", "must not carry a zone: use the timezone field"}
	}
	p := &plan{Spec: s}
	if d, ok := strings.CutPrefix(spec, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err != nil || every < time.Second || every%time.Second != 0 {
			return nil, &FieldError{"spec", "@every needs a duration of whole seconds, at least 1s"}
		}
		p.every = every
	} else {
		sched, err := parser.Parse(spec)
		if err != nil {
			return nil, &FieldError{"spec", err.Error()}
		}
		p.sched = sched
	}
	loc, err := time.LoadLocation(s.Timezone)
	if err != nil || s.Timezone == "Local" {
		return nil, &FieldError{"timezone", fmt.Sprintf("unknown time zone %q (want an IANA name such as Europe/Berlin)", s.Timezone)}
	}
	p.loc = loc
	// A day no month has (30 February, 31 April) parses but never comes; robfig/cron's Next
	// answers the zero time for it. Any tick a cron spec has comes within eight years of any date
	// (leap days), so one looked for from a fixed date decides, the same on every run.
	if p.Next(neverRef).IsZero() {
		return nil, &FieldError{"spec", "never fires: no date matches it (a day its months do not have, such as 30 February)"}
	}
	switch s.Overlap {
	case Skip, Allow, Replace:
	default:
		return nil, &FieldError{"overlap", fmt.Sprintf("%q is not skip, allow or replace", s.Overlap)}
	}
	switch s.CatchUp {
	case None, Latest, All:
	default:
		return nil, &FieldError{"catchup", fmt.Sprintf("%q is not none, latest or all", s.CatchUp)}
	}
	if len(s.Payload) > 0 && !json.Valid(s.Payload) {
		return nil, &FieldError{"payload", "is not valid JSON"}
	}
	return p, nil
}

// Next returns the schedule's first tick after t. @every ticks are multiples of the interval
// since the Unix epoch. A cron expression whose hour field is "*" ticks at every real instant that
// matches in the schedule's zone (an hourly job runs every real hour, DST or not). One with fixed
// hours ticks by wall clock, once per wall-clock time: a time a spring-forward skips ticks at the
// end of the gap, a time a fall-back repeats ticks at its first occurrence only (a 02:30 daily job
// runs once on both days). robfig/cron alone would skip the first and run the second twice.
func (p *plan) Next(t time.Time) time.Time {
	if p.every > 0 {
		n := t.UnixNano() / int64(p.every)
		return time.Unix(0, (n+1)*int64(p.every)).In(p.loc)
	}
	if s, ok := p.sched.(*cron.SpecSchedule); !ok || s.Hour&starBit != 0 {
		return p.sched.Next(t.In(p.loc))
	}
	// Walk the wall-clock ticks (in a zone without DST) from a little before t's wall time, and
	// map each to its instant; the mapping never goes backwards, so the first one after t is next.
	local := t.In(p.loc)
	wall := time.Date(local.Year(), local.Month(), local.Day(), local.Hour(), local.Minute(), local.Second(), 0, time.UTC)
	for c := p.sched.Next(wall.Add(-3 * time.Hour)); !c.IsZero(); c = p.sched.Next(c) {
		if at := instant(c, p.loc); at.After(t) {
			return at
		}
	}
	return time.Time{}
}

// neverRef is the date a spec's first tick is looked for from to tell one that never fires: a
// leap year's first day, so a 29 February tick is found within robfig/cron's five-year search.
var neverRef = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// starBit is robfig/cron's mark of a field written as "*".
const starBit = 1 << 63

// instant is the first instant whose wall time in loc is wall (a UTC time standing for a wall
// time), or the end of the gap when a spring-forward skips that wall time.
func instant(wall time.Time, loc *time.Location) time.Time {
	var best, latest time.Time
	for _, probe := range []time.Duration{-26 * time.Hour, 0, 26 * time.Hour} {
		_, off := wall.Add(probe).In(loc).Zone()
		at := wall.Add(-time.Duration(off) * time.Second).In(loc)
		if sameWall(at, wall) && (best.IsZero() || at.Before(best)) {
			best = at
		}
		if at.After(latest) {
			latest = at
		}
	}
	if !best.IsZero() {
		return best
	}
	// In a gap: the latest candidate lies after the transition, which starts its zone.
	start, _ := latest.ZoneBounds()
	if start.IsZero() || start.Before(wall.Add(-27*time.Hour)) {
		return latest
	}
	return start.In(loc)
}

func sameWall(at, wall time.Time) bool {
	y, mo, d := at.Date()
	h, mi, s := at.Clock()
	wy, wmo, wd := wall.Date()
	wh, wmi, ws := wall.Clock()
	return y == wy && mo == wmo && d == wd && h == wh && mi == wmi && s == ws
}

// Ticks returns the ticks in (from, to], at most limit of them (the first ones).
func (p *plan) Ticks(from, to time.Time, limit int) []time.Time {
	var out []time.Time
	for t := p.Next(from); !t.IsZero() && !t.After(to) && len(out) < limit; t = p.Next(t) {
		out = append(out, t)
	}
	return out
}
