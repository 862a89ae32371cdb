package jobstore

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/locking"
)

// BenchmarkScriptInstructions counts the instructions redis-server executes per call of each of
// the run's scripts (create, start, finish on the happy path; a limit's take and release), under
// valgrind's callgrind: a count, not a time, so it is the same on a loaded machine and on an idle
// one, and a change to a script shows its cost exactly. A PING and a script that only returns 1
// are the scale. It needs valgrind (skipped without it) and takes about 30 s; it asserts nothing.
func BenchmarkScriptInstructions(b *testing.B) {
	if _, err := exec.LookPath("valgrind"); err != nil {
		b.Skip("valgrind is not installed")
	}
	cg := startCallgrindRedis(b)
	rdb := redis.NewClient(&redis.Options{Addr: cg.addr, ReadTimeout: time.Minute})
	defer rdb.Close()
	s := New(rdb, locking.New(rdb), Config{WorkerID: "worker-1"})
	const n = 300
	ids := make([]string, n)
	ks := make([]Keys, n)
	for i := range ids {
		ids[i] = NewJobID(fmt.Sprintf("r%d", i), time.Now())
		ks[i], _ = s.Keys(ids[i], "")
	}
	owner := func(i int) string { return fmt.Sprintf("worker-1:%032d", i) }
	ret := redis.NewScript("return 1")
	for _, sc := range append([]*redis.Script{ret}, allScripts...) {
		if err := sc.Load(bg, rdb).Err(); err != nil {
			b.Fatal(err)
		}
	}
	lk := s.LimitKeys("noop", "t1")
	running := "" // the job the capacity of one holds
	phases := []struct {
		name string
		call func(i int) error
	}{
		{"PING", func(int) error { return rdb.Ping(bg).Err() }},
		{"a script that returns 1", func(int) error { return ret.Run(bg, rdb, nil).Err() }},
		{"create", func(i int) error {
			st, _, err := s.Create(bg, ks[i], NewJob{ID: ids[i], Type: "noop", Queue: "default", Tenant: "t1", Resource: fmt.Sprintf("r%d", i),
				MaxAttempts: 5, Now: time.Now(), ClaimTTL: time.Minute, MarkerTTL: time.Minute})
			return want(err, st, Created)
		}},
		{"confirm", func(i int) error {
			pipe := rdb.Pipeline()
			c := s.QueueConfirm(bg, pipe, ks[i], ids[i], 0, 0)
			_, _ = pipe.Exec(bg)
			st, err := c.Result()
			return want(err, st, Confirmed)
		}},
		{"start", func(i int) error {
			st, err := s.Start(bg, ks[i], StartArgs{Delivery: DeliveryID(ids[i], 1), Owner: owner(i), LeaseTTL: 30 * time.Second, Now: time.Now()})
			return want(err, st.State, Run)
		}},
		{"finish, done", func(i int) error {
			f, err := s.Finish(bg, ks[i], FinishArgs{Delivery: DeliveryID(ids[i], 1), Token: 1, Owner: owner(i), Now: time.Now(),
				Outcome: Outcome{Status: StatusDone}})
			return want(err, f.State, Finished)
		}},
		{"limit take, a key never full", func(i int) error {
			tk, err := s.TakeLimit(bg, lk, LimitArgs{Owner: owner(i), SlotTTL: 30 * time.Second, Concurrency: 1000})
			return want(err, tk.State, Taken)
		}},
		{"limit release", func(i int) error { return s.ReleaseLimit(bg, LimitRelease{Keys: lk, Owner: owner(i)}) }},
		// The admission layer (fair.go), a key per job: a wait admitted at once, its done (frees,
		// nothing waiting); then, behind a capacity of one, a wait that queues, and a done that
		// frees one and admits the next (the steady state under load).
		{"fair wait, admitted", func(i int) error { return fairWaitIs(s, "fa", ids[i], fairWide, 1) }},
		{"fair done, nothing waiting", func(i int) error {
			_, err := fairDoneIs(s, "fa", ids[i], fairWide, 0)
			return err
		}},
		{"fair wait, queued", func(i int) error {
			if i == 0 {
				if err := fairWaitIs(s, "fq", "blocker", fairNarrow, 1); err != nil {
					return err
				}
			}
			return fairWaitIs(s, "fq", ids[i], fairNarrow, 0)
		}},
		{"fair done, admits the next", func(i int) error {
			if i == 0 {
				running = "blocker"
			}
			next, err := fairDoneIs(s, "fq", running, fairNarrow, 1)
			running = next
			return err
		}},
	}
	fmt.Printf("\nRedis instructions per call (callgrind, %d calls each, Redis %s)\n| call | instructions |\n|---|---|\n", n, cg.version)
	for _, p := range phases {
		total := cg.count(b, p.name, func() {
			for i := 0; i < n; i++ {
				if err := p.call(i); err != nil {
					b.Fatalf("%s %d: %v", p.name, i, err)
				}
			}
		})
		fmt.Printf("| %s | %.0f |\n", p.name, total/n)
		b.ReportMetric(total/n, strings.NewReplacer(" ", "-", ",", "").Replace(p.name)+"-instr/call")
	}
}

var fairWide, fairNarrow = FairPolicy{Capacity: 1000, Batch: 64}, FairPolicy{Capacity: 1, Batch: 64}

// fairWaitIs puts job id of type typ in its own key's list, and wants admitted jobs admitted.
func fairWaitIs(s *Store, typ, id string, p FairPolicy, admitted int) error {
	got, err := s.FairWait(bg, FairShard{Type: typ}, "key-"+id, id, "", 1, p, false)
	return want(err, len(got), admitted)
}

// fairDoneIs frees job id of type typ, wants admitted jobs admitted, and returns the first one's id.
func fairDoneIs(s *Store, typ, id string, p FairPolicy, admitted int) (string, error) {
	freed, got, err := s.FairDone(bg, FairShard{Type: typ}, []string{id}, p)
	if err == nil && freed != 1 {
		return "", fmt.Errorf("freed %d, want 1", freed)
	}
	if err := want(err, len(got), admitted); err != nil || admitted == 0 {
		return "", err
	}
	return got[0].JobID, nil
}

func want[T comparable](err error, got, want T) error {
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("got %v, want %v", got, want)
	}
	return nil
}

// callgrindRedis is a redis-server run under callgrind, whose counts are zeroed and dumped around
// each phase (callgrind_control).
type callgrindRedis struct {
	addr, dir, pid, version string
}

func startCallgrindRedis(b *testing.B) *callgrindRedis {
	port, err := redistest.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	cmd := exec.Command("valgrind", "--tool=callgrind", "--callgrind-out-file="+filepath.Join(dir, "cg.%p"),
		"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := &callgrindRedis{addr: "127.0.0.1:" + strconv.Itoa(port), dir: dir, pid: strconv.Itoa(cmd.Process.Pid)}
	rdb := redis.NewClient(&redis.Options{Addr: c.addr})
	defer rdb.Close()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(bg, time.Second)
		info, err := rdb.Info(ctx, "server").Result()
		cancel()
		if err == nil {
			for _, line := range strings.Split(info, "\r\n") {
				if v, ok := strings.CutPrefix(line, "redis_version:"); ok {
					c.version = v
				}
			}
			return c
		}
		if time.Now().After(deadline) {
			b.Fatalf("redis-server under callgrind did not answer: %v", err)
		}
	}
}

// count runs f between a zeroing and a dump of the counts and returns the instructions it cost.
func (c *callgrindRedis) count(b *testing.B, name string, f func()) float64 {
	if out, err := exec.Command("callgrind_control", "-z", c.pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control -z: %v %s", err, out)
	}
	f()
	if out, err := exec.Command("callgrind_control", "-d", name, c.pid).CombinedOutput(); err != nil {
		b.Fatalf("callgrind_control -d: %v %s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		files, _ := filepath.Glob(filepath.Join(c.dir, "cg.*"))
		for _, file := range files {
			body, err := os.ReadFile(file)
			if err != nil || !strings.Contains(string(body), "\ndesc: Trigger: dump "+name+"\n") {
				continue
			}
			for _, line := range strings.Split(string(body), "\n") {
				if v, ok := strings.CutPrefix(line, "summary: "); ok {
					_ = os.Remove(file)
					n, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
					return n
				}
			}
		}
	}
	b.Fatalf("no callgrind dump for %s", name)
	return 0
}
