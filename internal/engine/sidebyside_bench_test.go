package engine

import (
	"fmt"
	"io"
	"maps"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/benchfig"
)

// cost is what one chunk of tasks cost one side, per task: Redis round trips, CPU of the Go
// process and of redis-server (getrusage and INFO cpu deltas over the drain, so CPU time rather
// than wall time: a loaded machine slows both sides but charges each only its own work), the Go
// heap allocations, and the Redis calls by command (INFO commandstats, reset before the chunk).
type cost struct {
	perSecond, roundTrips, goCPU, redisCPU, allocs float64
	calls, usec                                    map[string]float64 // per task, by command
	scripts                                        map[string]float64 // µs per task, by script (SLOWLOG)
}

// meter takes the CPU and command readings around a drain.
type meter struct {
	rdb             *redis.Client
	goCPU, redisCPU float64
	mallocs         uint64
	start           time.Time
}

// startMeter resets Redis's command statistics and reads both CPU clocks.
func startMeter(rdb *redis.Client) (*meter, error) {
	// SLOWLOG at threshold 0 records every top-level command with its own duration, which is what
	// tells one script from another (INFO commandstats lumps every EVALSHA together).
	for k, v := range map[string]string{"slowlog-log-slower-than": "0", "slowlog-max-len": "200000"} {
		if err := rdb.ConfigSet(bg, k, v).Err(); err != nil {
			return nil, err
		}
	}
	if err := rdb.SlowLogReset(bg).Err(); err != nil {
		return nil, err
	}
	if err := rdb.ConfigResetStat(bg).Err(); err != nil {
		return nil, err
	}
	r, err := redisCPU(rdb)
	if err != nil {
		return nil, err
	}
	return &meter{rdb: rdb, goCPU: processCPU(), redisCPU: r, mallocs: mallocs(), start: time.Now()}, nil
}

// stop turns the readings into the cost per task of n tasks.
func (m *meter) stop(n int, trips int64) (cost, error) {
	elapsed := time.Since(m.start)
	goCPU := processCPU() - m.goCPU
	allocs := mallocs() - m.mallocs
	r, err := redisCPU(m.rdb)
	if err != nil {
		return cost{}, err
	}
	calls, usec, err := commandStats(m.rdb)
	if err != nil {
		return cost{}, err
	}
	scripts, err := scriptTimes(m.rdb)
	if err != nil {
		return cost{}, err
	}
	perTask := func(v map[string]float64) map[string]float64 {
		for k := range v {
			v[k] /= float64(n)
		}
		return v
	}
	return cost{perSecond: float64(n) / elapsed.Seconds(), roundTrips: float64(trips) / float64(n),
		goCPU: goCPU * 1e6 / float64(n), allocs: float64(allocs) / float64(n), redisCPU: (r - m.redisCPU) * 1e6 / float64(n),
		calls: perTask(calls), usec: perTask(usec), scripts: perTask(scripts)}, nil
}

var (
	taskIDPart = regexp.MustCompile(`:t:[^:]+`)
	hashTag    = regexp.MustCompile(`\{[^}]*\}`)
	jobIDPart  = regexp.MustCompile(`job:[^:]+`)
)

// scriptTimes sums SLOWLOG's durations of the scripts run since the reset, in µs, by script: its
// SHA's first 7 digits and the shape of its first key (ids and hash tags elided), which names
// whose script it is (asynq's on asynq:{queue}:..., jobguard's on jobguard:{…}:job:…).
func scriptTimes(rdb *redis.Client) (map[string]float64, error) {
	entries, err := rdb.SlowLogGet(bg, -1).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	for _, e := range entries {
		if len(e.Args) < 4 || !strings.EqualFold(e.Args[0], "evalsha") {
			continue
		}
		key := e.Args[3]
		if strings.HasPrefix(key, "asynq:") {
			key = taskIDPart.ReplaceAllString(key, ":t:…")
		} else {
			key = jobIDPart.ReplaceAllString(hashTag.ReplaceAllString(key, "{…}"), "job:…")
		}
		out[e.Args[1][:7]+" "+key] += float64(e.Duration.Microseconds())
	}
	return out, nil
}

// processCPU is the user and system CPU seconds this process has used.
func processCPU() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// mallocs is how many heap objects this process has allocated.
func mallocs() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.Mallocs
}

// redisCPU is redis-server's used_cpu_user + used_cpu_sys, in seconds.
func redisCPU(rdb *redis.Client) (float64, error) {
	info, err := rdb.Info(bg, "cpu").Result()
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total, nil
}

// commandStats reads INFO commandstats: calls and µs by command since the last reset. The
// commands that come with any connection (info, config, ping, client, hello, select) are left out.
func commandStats(rdb *redis.Client) (calls, usec map[string]float64, err error) {
	info, err := rdb.Info(bg, "commandstats").Result()
	if err != nil {
		return nil, nil, err
	}
	calls, usec = map[string]float64{}, map[string]float64{}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		switch strings.SplitN(name, "|", 2)[0] {
		case "info", "config", "ping", "client", "hello", "select":
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			k, v, _ := strings.Cut(kv, "=")
			f, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				calls[name] += f
			case "usec":
				usec[name] += f
			}
		}
	}
	return calls, usec, nil
}

// sides holds the chunks of two sides measured in alternation: index 0 and 1.
type sides [2][]cost

// table prints both sides' medians with their spread (min-max over the chunks), the ratio of the
// medians, tasks per second per core (one second of CPU, Go and Redis together, divided by the CPU
// per task), and the Redis calls and µs per task of each command either side used.
func (s sides) table(w io.Writer, title string, names [2]string) {
	fmt.Fprintf(w, "\n%s: %d chunks each side, interleaved\n", title, len(s[0]))
	fmt.Fprintf(w, "| per task | %s median (min-max) | %s median (min-max) | ratio |\n|---|---|---|---|\n", names[0], names[1])
	row := func(what string, f func(cost) float64) {
		a, b := pick(s[0], f), pick(s[1], f)
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", what, benchfig.Summary(a), benchfig.Summary(b), benchfig.Ratio(a, b))
	}
	row("tasks/s", func(c cost) float64 { return c.perSecond })
	row("tasks/s per core (Go + Redis CPU)", func(c cost) float64 { return 1e6 / (c.goCPU + c.redisCPU) })
	row("Redis round trips", func(c cost) float64 { return c.roundTrips })
	row("Go CPU µs", func(c cost) float64 { return c.goCPU })
	row("Redis CPU µs", func(c cost) float64 { return c.redisCPU })
	row("Go heap allocations", func(c cost) float64 { return c.allocs })
	cmds := map[string]bool{}
	for _, side := range s {
		for _, c := range side {
			for k := range c.calls {
				cmds[k] = true
			}
		}
	}
	// Commands that either side sends, or runs in its scripts, at least once per 20 tasks.
	for _, k := range slices.Sorted(maps.Keys(cmds)) {
		if max(benchfig.Median(pick(s[0], func(c cost) float64 { return c.calls[k] })), benchfig.Median(pick(s[1], func(c cost) float64 { return c.calls[k] }))) < 0.05 {
			continue
		}
		row("Redis "+k+" calls", func(c cost) float64 { return c.calls[k] })
		row("Redis "+k+" µs", func(c cost) float64 { return c.usec[k] })
	}
	scripts := map[string]bool{}
	for _, side := range s {
		for _, c := range side {
			for k, v := range c.scripts {
				if v >= 0.5 {
					scripts[k] = true
				}
			}
		}
	}
	for _, k := range slices.Sorted(maps.Keys(scripts)) {
		row("script "+k+" µs", func(c cost) float64 { return c.scripts[k] })
	}
}

// summary adds the headline rows of the case to make bench's summary table (benchfig.AddRow).
func (s sides) summary(benchmark string) {
	for _, r := range []struct {
		what string
		f    func(cost) float64
	}{
		{"tasks/s", func(c cost) float64 { return c.perSecond }},
		{"tasks/s per core (Go + Redis CPU)", func(c cost) float64 { return 1e6 / (c.goCPU + c.redisCPU) }},
		{"Redis round trips per task", func(c cost) float64 { return c.roundTrips }},
		{"Go CPU µs per task", func(c cost) float64 { return c.goCPU }},
		{"Redis CPU µs per task", func(c cost) float64 { return c.redisCPU }},
	} {
		a, b := pick(s[0], r.f), pick(s[1], r.f)
		benchfig.AddRow(benchfig.Row{Benchmark: benchmark, Measure: r.what, Baseline: benchfig.Summary(a), Jobguard: benchfig.Summary(b), Ratio: benchfig.Ratio(a, b)})
	}
}

func pick(cs []cost, f func(cost) float64) []float64 {
	out := make([]float64, len(cs))
	for i, c := range cs {
		out[i] = f(c)
	}
	return out
}
