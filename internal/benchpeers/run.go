package benchpeers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jobguard/jobguard/internal/benchfig"
	"github.com/jobguard/jobguard/internal/benchpeers/peer"
)

// figures are one system's measures in one round, by measure key (measures).
type figures map[string]float64

// prepared is a system whose peer is built and whose datastore is at hand.
type prepared struct {
	System
	argv    []string
	version string
}

// runner runs the phases of one run.
type runner struct {
	cfg Config
	pg  *pgServer
}

// Run prepares every configured system (building or installing its peer, skipping with a message
// those this machine cannot run), runs cfg.Rounds rounds of every phase, the systems of a phase in
// an order that rotates by one each round, and writes the tables to w; progress goes to log.
func Run(ctx context.Context, cfg Config, w, log io.Writer) error {
	dir, err := os.MkdirTemp("", "benchpeers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r := &runner{cfg: cfg}
	var (
		systems  []prepared
		versions []string
	)
	for _, name := range cfg.Systems {
		s, _ := systemNamed(name)
		if s.Store == Postgres && r.pg == nil {
			pg, version, err := startPostgres(ctx)
			if err != nil {
				if errors.Is(err, ErrSkip) {
					fmt.Fprintf(log, "%s: %v\n", s.Name, err)
					continue
				}
				return err
			}
			r.pg = pg
			defer pg.Close()
			versions = append(versions, version)
		}
		fmt.Fprintf(log, "%s: preparing\n", s.Name)
		argv, version, err := s.Prepare(ctx, Env{Config: cfg, Dir: dir})
		if errors.Is(err, ErrSkip) {
			fmt.Fprintf(log, "%s: %v\n", s.Name, err)
			continue
		}
		if err != nil {
			return fmt.Errorf("benchpeers: %s: %w", s.Name, err)
		}
		systems = append(systems, prepared{System: s, argv: argv, version: version})
		versions = append(versions, s.Name+" "+version)
	}
	if len(systems) == 0 {
		return errors.New("benchpeers: no system can run here")
	}
	if v, err := command(ctx, ".", "redis-server", "--version"); err == nil {
		versions = append(versions, v)
	}

	results := make(map[string][]figures, len(systems))
	for round := range cfg.Rounds {
		for _, ph := range r.phases() {
			for i := range systems {
				s := systems[(i+round)%len(systems)]
				start := time.Now()
				f, err := ph.run(ctx, s)
				if err != nil {
					return fmt.Errorf("benchpeers: round %d, %s, %s: %w", round+1, ph.name, s.Name, err)
				}
				if len(results[s.Name]) <= round {
					results[s.Name] = append(results[s.Name], figures{})
				}
				for k, v := range f {
					results[s.Name][round][k] = v
				}
				fmt.Fprintf(log, "round %d/%d %-22s %-9s %8s %-9s (%s)\n", round+1, cfg.Rounds, ph.name, s.Name,
					benchfig.Format(f[ph.headline]), ph.unit, time.Since(start).Round(time.Millisecond))
			}
		}
	}
	report(w, cfg, systems, versions, results)
	return nil
}

// phase is one measurement each system runs once a round; the progress line shows its figure
// headline, in unit.
type phase struct {
	name, headline, unit string
	run                  func(context.Context, prepared) (figures, error)
}

func (r *runner) phases() []phase {
	ps := []phase{
		{"enqueue", "enqueue", "inserts/s", r.enqueue},
		{"drain, no-op handler", "noop", "jobs/s", func(ctx context.Context, s prepared) (figures, error) { return r.drain(ctx, s, 0, "noop") }},
		{"drain, 5 ms handler", "io5", "jobs/s", func(ctx context.Context, s prepared) (figures, error) {
			return r.drain(ctx, s, 5*time.Millisecond, "io5")
		}},
	}
	if !r.cfg.skipLatency {
		ps = append(ps, phase{"latency", "latency.p50", "ms p50", r.latency})
	}
	return ps
}

// open starts the phase's fresh datastore.
func (r *runner) open(ctx context.Context, kind StoreKind) (store, error) {
	if kind == Postgres {
		return r.pg.newDB(ctx)
	}
	return startRedis(ctx)
}

// clocks are the CPU clocks of a peer and its datastore, and the wall clock, at one instant.
type clocks struct {
	peer, store float64
	at          time.Time
}

func readClocks(p *peerProc, st store) (clocks, error) {
	pc, err := processCPU(p.pid())
	if err != nil {
		return clocks{}, err
	}
	sc, err := st.CPU()
	if err != nil {
		return clocks{}, err
	}
	return clocks{peer: pc, store: sc, at: time.Now()}, nil
}

// measured runs one peer's phase from go to done between two readings of the clocks.
func measured(p *peerProc, st store, want int, within time.Duration) (peer.Result, clocks, clocks, error) {
	before, err := readClocks(p, st)
	if err != nil {
		return peer.Result{}, before, before, err
	}
	if err := p.send("go"); err != nil {
		return peer.Result{}, before, before, err
	}
	res, err := p.result(want, within)
	if err != nil {
		return res, before, before, err
	}
	after, err := readClocks(p, st)
	return res, before, after, err
}

// within is how long a phase of n jobs may take before the harness gives up on it.
func within(n int) time.Duration { return max(2*time.Minute, time.Duration(n)*10*time.Millisecond) }

// enqueue times cfg.Inserts single inserts from cfg.Concurrency callers.
func (r *runner) enqueue(ctx context.Context, s prepared) (figures, error) {
	st, err := r.open(ctx, s.Store)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	n := r.cfg.Inserts
	p, err := startPeer(s.Name, s.argv, peer.Flags{URL: st.URL(), Mode: "enqueue", N: n, Concurrency: r.cfg.Concurrency})
	if err != nil {
		return nil, err
	}
	defer p.kill()
	res, before, after, err := measured(p, st, n, within(n))
	if err != nil {
		return nil, err
	}
	return figures{
		"enqueue":          float64(n) / after.at.Sub(before.at).Seconds(),
		"enqueue.p50":      res.P50Ms,
		"enqueue.p99":      res.P99Ms,
		"enqueue.producer": (after.peer - before.peer) * 1e6 / float64(n),
		"enqueue.store":    (after.store - before.store) * 1e6 / float64(n),
	}, p.stop()
}

// produce enqueues n jobs on st with the system's own producer, unmeasured, from cfg.Concurrency
// callers at rate jobs a second (0: as fast as they can).
func (r *runner) produce(s prepared, st store, n int, rate float64) error {
	p, err := startPeer(s.Name, s.argv, peer.Flags{URL: st.URL(), Mode: "enqueue", N: n, Concurrency: r.cfg.Concurrency, Rate: rate})
	if err != nil {
		return err
	}
	defer p.kill()
	if err := p.send("go"); err != nil {
		return err
	}
	if _, err := p.result(n, within(n)); err != nil {
		return err
	}
	return p.stop()
}

// drain enqueues cfg.Jobs jobs, then times one worker process of cfg.Concurrency handlers
// (each waiting work) running them all; key names its figures. After the worker has shut down,
// the datastore's growth per job is what a finished job keeps.
func (r *runner) drain(ctx context.Context, s prepared, work time.Duration, key string) (figures, error) {
	st, err := r.open(ctx, s.Store)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	n := r.cfg.Jobs
	// The datastore's size before any job, once the producer made it what it is (River's
	// migrations create its tables).
	if err := r.produce(s, st, 0, 0); err != nil {
		return nil, err
	}
	empty, err := st.DataBytes(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.produce(s, st, n, 0); err != nil {
		return nil, err
	}
	p, err := startPeer(s.Name, s.argv, peer.Flags{URL: st.URL(), Mode: "work", N: n, Concurrency: r.cfg.Concurrency, Work: work})
	if err != nil {
		return nil, err
	}
	defer p.kill()
	_, before, after, err := measured(p, st, n, within(n))
	if err != nil {
		return nil, err
	}
	if err := p.stop(); err != nil {
		return nil, err
	}
	kept, err := st.DataBytes(ctx)
	if err != nil {
		return nil, err
	}
	return figures{
		key:             float64(n) / after.at.Sub(before.at).Seconds(),
		key + ".worker": (after.peer - before.peer) * 1e6 / float64(n),
		key + ".store":  (after.store - before.store) * 1e6 / float64(n),
		key + ".bytes":  float64(kept-empty) / float64(n),
	}, nil
}

// latency runs a worker (no-op handler) while cfg.LatencyJobs jobs are enqueued at
// cfg.LatencyRate a second, and takes the worker's wait of each job from its enqueue to its
// handler's start.
func (r *runner) latency(ctx context.Context, s prepared) (figures, error) {
	st, err := r.open(ctx, s.Store)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	n := r.cfg.LatencyJobs
	w, err := startPeer(s.Name, s.argv, peer.Flags{URL: st.URL(), Mode: "work", N: n, Concurrency: r.cfg.Concurrency})
	if err != nil {
		return nil, err
	}
	defer w.kill()
	if err := w.send("go"); err != nil {
		return nil, err
	}
	if err := r.produce(s, st, n, float64(r.cfg.LatencyRate)); err != nil {
		return nil, err
	}
	res, err := w.result(n, within(n))
	if err != nil {
		return nil, err
	}
	return figures{"latency.p50": res.P50Ms, "latency.p99": res.P99Ms}, w.stop()
}
