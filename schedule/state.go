package schedule

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// Fields of a schedule's state hash, "<prefix>:{<tag of schedule:<name>>}:schedule".
const (
	fieldCursor  = "cursor"   // unix ms of the last tick dealt with (job, skip, miss or pause)
	fieldLastAt  = "last_at"  // unix ms of the last tick that has a job
	fieldLastJob = "last_job" // that job's id
	fieldPaused  = "paused"   // "1" while paused
)

// leaderResource is the lease the leader holds.
const leaderResource = "scheduler"

// ErrUnknown: no schedule has that name.
var ErrUnknown = errors.New("schedule: unknown schedule")

type state struct {
	cursor, lastAt time.Time
	lastJob        string
	paused         bool
}

// stateKey is the key of a schedule's state hash, in the slot of the resource schedule:<name>.
func (s *Scheduler) stateKey(name string) string {
	return s.locks.Key(jobstore.ResourceTag("schedule:"+name), "schedule")
}

func parseState(f map[string]string) state {
	ms := func(k string) time.Time {
		n, err := strconv.ParseInt(f[k], 10, 64)
		if err != nil || n <= 0 {
			return time.Time{}
		}
		return time.UnixMilli(n)
	}
	return state{cursor: ms(fieldCursor), lastAt: ms(fieldLastAt), lastJob: f[fieldLastJob], paused: f[fieldPaused] == "1"}
}

// states reads every schedule's state in one pipeline.
func (s *Scheduler) states(ctx context.Context) ([]state, error) {
	names := make([]string, len(s.plans))
	for i, p := range s.plans {
		names[i] = p.Name
	}
	return s.statesOf(ctx, names)
}

// statesOf reads the state of each named schedule in one pipeline.
func (s *Scheduler) statesOf(ctx context.Context, names []string) ([]state, error) {
	if len(names) == 0 {
		return nil, nil
	}
	pipe := s.locks.Redis().Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(names))
	for i, name := range names {
		cmds[i] = pipe.HGetAll(ctx, s.stateKey(name))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("schedule: read state: %w", err)
	}
	out := make([]state, len(cmds))
	for i, c := range cmds {
		out[i] = parseState(c.Val())
	}
	return out, nil
}

// known reports whether name is a schedule of this process's or one a running scheduler
// publishes.
func (s *Scheduler) known(ctx context.Context, name string) (bool, error) {
	if _, ok := s.plan(name); ok {
		return true, nil
	}
	pubs, err := s.published(ctx)
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(pubs, func(p publishedSpec) bool { return p.Name == name }), nil
}

func (s *Scheduler) plan(name string) (*plan, bool) {
	for _, p := range s.plans {
		if p.Name == name {
			return p, true
		}
	}
	return nil, false
}

// SetPaused pauses or resumes a schedule. A paused schedule's ticks create no job (counted as
// paused); resuming does not catch them up.
func (s *Scheduler) SetPaused(ctx context.Context, name string, paused bool) error {
	if ok, err := s.known(ctx, name); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	v := "0"
	if paused {
		v = "1"
	}
	if err := s.locks.Redis().HSet(ctx, s.stateKey(name), fieldPaused, v).Err(); err != nil {
		return fmt.Errorf("schedule: pause %q: %w", name, err)
	}
	return nil
}

// Status is what GET /schedules shows of one schedule.
type Status struct {
	Spec
	// NextTick is the next tick after now; nil (omitted) when none comes within robfig/cron's
	// five-year search (29 February seen from 2097), never the zero time.
	NextTick *time.Time `json:"next_tick,omitempty"`
	// LastTick is the last tick that has a job, LastJobID that job and LastJobStatus its status
	// ("" when its record expired).
	LastTick      *time.Time `json:"last_tick,omitempty"`
	LastJobID     string     `json:"last_job_id,omitempty" openapi:"ref=JobID"`
	LastJobStatus string     `json:"last_job_status,omitempty" openapi:"ref=JobStatus"`
	Paused        bool       `json:"paused"`
}

// Overview is every schedule's status and the current leader.
type Overview struct {
	// Leader is the worker id of the leader, "" when none holds the lease.
	Leader    string   `json:"leader"`
	Schedules []Status `json:"schedules"`
}

// Overview reads every schedule's state, its last job's status and the leader: this process's
// schedules, then those that running schedulers publish (see published.go) and it lacks, so an
// API process that runs none shows what the workers run.
func (s *Scheduler) Overview(ctx context.Context) (Overview, error) {
	now := s.cfg.Clock.Now()
	var specs []Spec
	var next []time.Time
	for _, p := range s.plans {
		specs, next = append(specs, p.Spec), append(next, p.Next(now).UTC())
	}
	pubs, err := s.published(ctx)
	if err != nil {
		return Overview{}, err
	}
	for _, p := range pubs {
		if _, ok := s.plan(p.Name); ok {
			continue
		}
		t := p.NextTick
		if pl, err := p.Spec.compile(); err == nil {
			t = pl.Next(now).UTC() // its publisher's is up to LeaseTTL/3 old
		}
		specs, next = append(specs, p.Spec), append(next, t)
	}
	names := make([]string, len(specs))
	for i, sp := range specs {
		names[i] = sp.Name
	}
	sts, err := s.statesOf(ctx, names)
	if err != nil {
		return Overview{}, err
	}
	info, err := s.locks.Inspect(ctx, leaderResource)
	if err != nil {
		return Overview{}, fmt.Errorf("schedule: %w", err)
	}
	// The owner is "<worker id>:<random>"; the random part is the lease's and stays private.
	ov := Overview{Schedules: []Status{}}
	if i := strings.LastIndexByte(info.Owner, ':'); i > 0 {
		ov.Leader = info.Owner[:i]
	}
	for i, sp := range specs {
		st := Status{Spec: sp, LastJobID: sts[i].lastJob, Paused: sts[i].paused}
		if !next[i].IsZero() {
			t := next[i].UTC()
			st.NextTick = &t
		}
		if !sts[i].lastAt.IsZero() {
			at := sts[i].lastAt.UTC()
			st.LastTick = &at
		}
		if st.LastJobID != "" {
			v, err := s.stack.Get(ctx, st.LastJobID)
			switch {
			case err == nil:
				st.LastJobStatus = string(v.Record.Status)
			case !errors.Is(err, engine.ErrJobNotFound):
				return Overview{}, fmt.Errorf("schedule: %w", err)
			}
		}
		ov.Schedules = append(ov.Schedules, st)
	}
	return ov, nil
}

// recentJobs is how many of a schedule's latest tick jobs Jobs lists.
const recentJobs = 100

// jobsKey is the sorted set of a schedule's latest tick jobs (score: the tick, unix ms), in the
// slot of its state.
func (s *Scheduler) jobsKey(name string) string {
	return s.locks.Key(jobstore.ResourceTag("schedule:"+name), "schedule:jobs")
}

// remember adds a tick's job to the schedule's latest jobs, best effort (the state's last_job is
// what the scheduler itself reads).
func (s *Scheduler) remember(ctx context.Context, name, id string, tick time.Time) {
	key := s.jobsKey(name)
	pipe := s.locks.Redis().Pipeline()
	pipe.ZAdd(ctx, key, redis.Z{Score: float64(tick.UnixMilli()), Member: id})
	pipe.ZRemRangeByRank(ctx, key, 0, -recentJobs-1)
	_, _ = pipe.Exec(ctx)
}

// TickJob is one of a schedule's latest tick jobs.
type TickJob struct {
	Tick  time.Time `json:"tick"`
	JobID string    `json:"job_id" openapi:"ref=JobID"`
	// Status is the job's status, "" once its record expired.
	Status string `json:"status"`
}

// Jobs lists the latest (up to 100) jobs of schedule name's ticks, newest first, with their
// status, in two round trips.
func (s *Scheduler) Jobs(ctx context.Context, name string) ([]TickJob, error) {
	if ok, err := s.known(ctx, name); err != nil {
		return nil, err
	} else if !ok {
		return nil, fmt.Errorf("%w: %q", ErrUnknown, name)
	}
	zs, err := s.locks.Redis().ZRevRangeWithScores(ctx, s.jobsKey(name), 0, recentJobs-1).Result()
	if err != nil {
		return nil, fmt.Errorf("schedule: jobs of %q: %w", name, err)
	}
	out := make([]TickJob, 0, len(zs))
	pipe := s.locks.Redis().Pipeline()
	var cmds []*redis.StringCmd
	for _, z := range zs {
		id, _ := z.Member.(string)
		keys, err := s.stack.Store().Keys(id, "")
		if err != nil {
			continue
		}
		out = append(out, TickJob{Tick: time.UnixMilli(int64(z.Score)).UTC(), JobID: id})
		cmds = append(cmds, pipe.HGet(ctx, keys.Record, jobstore.FieldStatus))
	}
	if len(cmds) > 0 {
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			return nil, fmt.Errorf("schedule: jobs of %q: %w", name, err)
		}
	}
	for i, c := range cmds {
		out[i].Status = c.Val()
	}
	return out, nil
}
