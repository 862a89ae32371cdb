// Package peer is the side of make bench-peers that runs inside each Go peer process (bare asynq,
// jobguard, River): its flags, and the protocol that lets the harness measure the process from
// outside. bench/peers/bullmq/peer.js speaks the same protocol in Node.
//
// The protocol, on the process's standard input and output, one line each:
//
//	peer -> harness  "ready"          connected, nothing taken or sent yet
//	harness -> peer  "go"             the harness has read the CPU clocks: start
//	peer -> harness  "done <json>"    the phase is over (Result); the harness reads the clocks again
//	harness -> peer  "stop"           shut down (a worker finishes what it took) and exit
//
// So the harness's window of wall time and of CPU time (utime+stime of /proc/<pid>/stat, the
// peer's and its datastore's) is the same, and holds neither the process's start nor its shutdown.
package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Flags are every peer's command line, the same for every system.
type Flags struct {
	// URL is the datastore: redis://host:port or postgres://... .
	URL string
	// Mode is "enqueue" (insert N jobs from Concurrency callers) or "work" (run N jobs with
	// Concurrency handlers at once).
	Mode string
	// N is how many jobs the phase inserts or runs.
	N int
	// Concurrency is the callers of an enqueue, the handlers of a worker.
	Concurrency int
	// Work is how long each handler waits (a stand-in for an upstream call); 0: a no-op handler.
	Work time.Duration
	// Rate paces an enqueue at this many inserts a second overall; 0: as fast as it goes.
	Rate float64
}

// ParseFlags reads the command line.
func ParseFlags() Flags {
	var f Flags
	flag.StringVar(&f.URL, "url", "", "datastore URL")
	flag.StringVar(&f.Mode, "mode", "work", "enqueue or work")
	flag.IntVar(&f.N, "n", 1000, "jobs")
	flag.IntVar(&f.Concurrency, "c", 50, "concurrent callers or handlers")
	flag.DurationVar(&f.Work, "work", 0, "each handler's wait")
	flag.Float64Var(&f.Rate, "rate", 0, "inserts per second (0: unpaced)")
	flag.Parse()
	return f
}

// Body is a job's payload in every system: when it was enqueued, so that a worker can tell how
// long it waited.
type Body struct {
	// At is the enqueue's start, Unix nanoseconds.
	At int64 `json:"at"`
}

// NewBody is the payload of a job enqueued now, as JSON.
func NewBody() []byte {
	b, _ := json.Marshal(Body{At: time.Now().UnixNano()})
	return b
}

// Result is what a phase reports in its done line.
type Result struct {
	// Jobs inserted or run.
	Jobs int `json:"jobs"`
	// Errors is how many inserts or runs failed.
	Errors int `json:"errors"`
	// P50Ms and P99Ms: an enqueue's are of one insert call; a worker's of the wait from the
	// enqueue's start to the handler's start.
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
}

// Worker is a system's worker, connected and not yet taking jobs.
type Worker interface {
	// Start begins taking jobs; each job's handler calls run with its payload.
	Start(run func(ctx context.Context, body []byte) error) error
	// Stop finishes the jobs taken and disconnects.
	Stop()
}

// Insert enqueues one job with payload body.
type Insert func(ctx context.Context, body []byte) error

// Main runs the phase f.Mode names with the system's insert or worker and exits: 0 when it
// ran, 1 with a message otherwise.
func Main(f Flags, insert Insert, newWorker func() (Worker, error)) {
	var err error
	switch f.Mode {
	case "enqueue":
		err = Enqueue(f, insert)
	case "work":
		var w Worker
		if w, err = newWorker(); err == nil {
			err = Work(f, w)
		}
	default:
		err = fmt.Errorf("peer: unknown -mode %q", f.Mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// harness is the protocol's other end.
type harness struct{ in *bufio.Scanner }

func newHarness() harness { return harness{in: bufio.NewScanner(os.Stdin)} }

// await reads the harness's next line and checks that it is want.
func (h harness) await(want string) error {
	if !h.in.Scan() {
		return fmt.Errorf("peer: the harness closed stdin before %q", want)
	}
	if got := strings.TrimSpace(h.in.Text()); got != want {
		return fmt.Errorf("peer: the harness said %q, not %q", got, want)
	}
	return nil
}

func say(line string) { fmt.Fprintln(os.Stdout, line) }

func done(r Result) {
	b, _ := json.Marshal(r)
	say("done " + string(b))
}

// Enqueue inserts f.N jobs from f.Concurrency callers (paced at f.Rate when set), timing each call.
func Enqueue(f Flags, insert Insert) error {
	h := newHarness()
	say("ready")
	if err := h.await("go"); err != nil {
		return err
	}
	stopProfile := startProfile(f)
	ctx := context.Background()
	var (
		next    atomic.Int64
		errs    atomic.Int64
		mu      sync.Mutex
		latency = make([]time.Duration, 0, f.N)
		wg      sync.WaitGroup
		start   = time.Now()
	)
	for range max(f.Concurrency, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mine := make([]time.Duration, 0, f.N/max(f.Concurrency, 1)+1)
			for {
				i := next.Add(1) - 1
				if i >= int64(f.N) {
					break
				}
				if f.Rate > 0 { // the i-th insert's turn
					time.Sleep(time.Until(start.Add(time.Duration(float64(i) / f.Rate * float64(time.Second)))))
				}
				t := time.Now()
				if err := insert(ctx, NewBody()); err != nil {
					if errs.Add(1) == 1 {
						fmt.Fprintln(os.Stderr, "peer: insert:", err)
					}
					continue
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			latency = append(latency, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	stopProfile()
	p50, p99 := percentiles(latency)
	done(Result{Jobs: len(latency), Errors: int(errs.Load()), P50Ms: p50, P99Ms: p99})
	return h.await("stop")
}

// Work starts w on go, reports done when f.N jobs ran (each waiting f.Work), and stops w on stop.
// Jobs past the f.N-th (none, when the harness enqueued f.N) run and are not counted.
func Work(f Flags, w Worker) error {
	h := newHarness()
	say("ready")
	if err := h.await("go"); err != nil {
		w.Stop()
		return err
	}
	stopProfile := startProfile(f)
	var (
		ran, recorded, errs atomic.Int64
		waited              = make([]time.Duration, f.N)
		all                 = make(chan struct{})
	)
	run := func(ctx context.Context, body []byte) error {
		var b Body
		err := json.Unmarshal(body, &b)
		wait := time.Duration(time.Now().UnixNano() - b.At)
		if f.Work > 0 {
			time.Sleep(f.Work)
		}
		if err != nil {
			errs.Add(1)
		}
		if i := ran.Add(1); i <= int64(f.N) {
			waited[i-1] = wait
			if recorded.Add(1) == int64(f.N) { // every wait written, not only the N-th taken
				close(all)
			}
		}
		return err
	}
	if err := w.Start(run); err != nil {
		stopProfile()
		return err
	}
	<-all
	stopProfile()
	p50, p99 := percentiles(waited)
	done(Result{Jobs: f.N, Errors: int(errs.Load()), P50Ms: p50, P99Ms: p99})
	err := h.await("stop")
	w.Stop()
	return err
}

// percentiles are the median and 99th percentile of d, in milliseconds.
func percentiles(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) / 1e6 }
	return at(0.5), at(0.99)
}
