package engine

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// loneFairTrips counts the round trips that reach a type's admission keys without any job's
// record: a done (or pump) of its own, not one riding in a finish's or a create's pipeline.
type loneFairTrips struct {
	testsupport.PipelinesOnly
	n atomic.Int64
}

func (h *loneFairTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var fair, record bool
		for _, c := range cmds {
			args := fmt.Sprint(c.Args())
			fair = fair || strings.Contains(args, "fair:admitted")
			record = record || strings.Contains(args, ":job:")
		}
		if fair && !record {
			h.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// A fair job that ends frees its admission in its finish's round trip: a backlog of one key
// after another drains, one at a time, without a done of its own per job (one each before).
func TestAFairJobsEndFreesItsAdmissionInItsFinish(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	lone := &loneFairTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: db.Server.Addr, DB: db.N})
	rdb.AddHook(lone)
	t.Cleanup(func() { _ = rdb.Close() })
	tc := TaskConfig{Type: "ends", Fair: &Fair{Capacity: 1}}
	s := New(rdb, Config{Concurrency: 1, LeaseTTL: 5 * time.Second})
	const jobs = 8
	var before int64
	drainOneKeyEach(t, db, s, tc, jobs, asynq.Config{LogLevel: asynq.ErrorLevel}, func() { before = lone.n.Load() })
	if n := lone.n.Load() - before; n != 0 {
		t.Fatalf("%d round trips of the admission layer's own while %d jobs ended, want none: each end frees in its finish's", n, jobs)
	}
	if c, err := s.FairCounts(bg, tc.Type, 0); err != nil || c.Admitted != 0 || c.WaitingKeys != 0 {
		t.Fatalf("after the drain: %+v (%v), want nothing admitted or waiting", c, err)
	}
}

// The done rides in the finish only where the finish counts once it is written: not in durable
// mode, whose finish counts once the replicas have it (a WAIT after the pipeline), lest a
// sequence's next job be admitted on a finish a failover may lose; nor for an end that blocks its
// sequence, nor for one that is not an end.
func TestTheFinishCarriesTheDoneOnlyWhereItMay(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	seq := TaskConfig{Type: "seq", Fair: &Fair{Sequence: true, BlockOnFailure: true}}
	for _, c := range []struct {
		name   string
		cfg    Config
		tc     TaskConfig
		status jobstore.Status
		want   bool
	}{
		{"done", Config{}, seq, jobstore.StatusDone, true},
		{"done, durable", Config{DurableReplicas: 1}, seq, jobstore.StatusDone, false},
		{"failed, blocking its sequence", Config{}, seq, jobstore.StatusFailed, false},
		{"retrying", Config{}, seq, jobstore.StatusRetrying, false},
		{"not fair", Config{}, TaskConfig{Type: "plain"}, jobstore.StatusDone, false},
	} {
		s := New(db.Client, c.cfg)
		s.Register(c.tc, func(ctx context.Context, j *Job) error { return nil })
		if got := s.fairDoneWithFinish(&Job{tc: c.tc}, c.status) != nil; got != c.want {
			t.Errorf("%s: done in the finish %v, want %v", c.name, got, c.want)
		}
		s.Close()
	}
}
