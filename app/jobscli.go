package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/store"
	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/freetext"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
)

// Exit codes of jobguard jobs (README, Operations): a script tells a job that is not there, or
// not in a state the command applies to, from a failure to ask at all.
const (
	exitOK       = 0
	exitError    = 1 // Redis did not answer, or another failure: nothing is known to have changed
	exitUsage    = 2 // bad command line or configuration
	exitNotFound = 3 // no such job (never created, or gone after JOB_RETENTION)
	exitConflict = 4 // the job is not in a state the command applies to (cancel: ended; retry: not failed)
)

const jobsUsage = `usage: jobguard jobs list [--tenant T] [--status S] [--type T] [--limit N] [--cursor C] [--output text|json]
       jobguard jobs get ID [--output text|json]
       jobguard jobs cancel ID [--reason R] [--output text|json]
       jobguard jobs retry ID [--output text|json]
       jobguard jobs reencrypt [--output text|json]`

// jobsCLI is one run of jobguard jobs: the stack on REDIS_URL, and where it writes.
type jobsCLI struct {
	stack          *engine.Stack
	sql            *pgxpool.Pool // with DATABASE_URL: the list continues into the SQL history
	client         *asynq.Client
	stdout, stderr io.Writer
	json           bool
	by             string
}

// fenceSQL gives a cancel the app's SQL fence hook when DATABASE_URL is set, so that a cancelled
// run's later commit to PostgreSQL is refused as it is after POST /jobs/{id}/cancel. Without
// PostgreSQL the cancel still acts on Redis, and says what it could not do.
func (cli *jobsCLI) fenceSQL(ctx context.Context, cfg config.Config) {
	var err error
	if cli.sql, err = store.OpenSQL(ctx, cfg); err != nil {
		fmt.Fprintln(cli.stderr, "jobguard jobs: warning: PostgreSQL unreachable, a running job's SQL fence is not raised:", redact.Error(err))
		return
	}
	if cli.sql == nil {
		return
	}
	hook := store.CancelFenceHook(cli.sql, cfg.Tasks)
	cli.stack.OnCancelRunning(func(ctx context.Context, run engine.CancelledRun) error {
		err := hook(ctx, run)
		if err != nil {
			fmt.Fprintln(cli.stderr, "jobguard jobs: warning: the cancelled run's SQL fence was not raised:", redact.Error(err))
		}
		return err
	})
}

// runJobs is jobguard jobs: operators on the host list, read, cancel and retry jobs straight on
// REDIS_URL, with no API token. Exit codes are the exit* constants.
func runJobs(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, list []tasks.Task) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stderr, jobsUsage)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	verb := args[0]
	fs := flag.NewFlagSet("jobguard jobs "+verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	output := fs.String("output", "text", "text or json")
	fs.StringVar(output, "o", "text", "text or json")
	var q engine.ListQuery
	var status, reason string
	switch verb {
	case "list":
		fs.StringVar(&q.Tenant, "tenant", "", "only this tenant's jobs (default: every tenant's)")
		fs.StringVar(&status, "status", "", "only jobs in this status")
		fs.StringVar(&q.Type, "type", "", "only jobs of this task type")
		fs.IntVar(&q.Limit, "limit", 50, "page size, 1-200")
		fs.StringVar(&q.Cursor, "cursor", "", "the next cursor a previous page printed")
	case "cancel":
		fs.StringVar(&reason, "reason", "", "why, kept on the timeline and in last_error (one line, at most 200 bytes)")
	case "get", "retry", "reencrypt":
	default:
		return usage(stderr, fmt.Sprintf("unknown command %q", verb))
	}
	id, err := parseInterspersed(fs, args[1:], verb != "list" && verb != "reencrypt")
	if err != nil {
		return usage(stderr, err.Error())
	}
	if *output != "text" && *output != "json" {
		return usage(stderr, fmt.Sprintf("--output must be text or json, not %q", *output))
	}
	if status != "" {
		if !slices.Contains(jobstore.Statuses, jobstore.Status(status)) {
			return usage(stderr, fmt.Sprintf("--status must be one of %s", statusList()))
		}
		q.Status = jobstore.Status(status)
	}
	if verb == "list" && (q.Limit < 1 || q.Limit > 200) {
		return usage(stderr, "--limit must be from 1 to 200")
	}
	if err := checkReason(reason); err != nil {
		return usage(stderr, "--reason "+err.Error())
	}

	cfg, err := config.FromLookup(lookup, list)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard jobs:", err)
		return exitUsage
	}
	if cfg.Embedded() {
		fmt.Fprintln(stderr, "jobguard jobs: REDIS_URL is not set: the command acts on the Redis of a running deployment")
		return exitUsage
	}
	if verb == "reencrypt" && cfg.EncryptionKeys == nil {
		fmt.Fprintln(stderr, "jobguard jobs: reencrypt needs the key ring: ENCRYPTION_KEYS or ENCRYPTION_KEYS_FILE")
		return exitUsage
	}
	if verb != "reencrypt" { // a pass over every job takes as long as it takes; Ctrl-C stops it
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, max(cfg.RequestTimeout, 10*time.Second))
		defer cancel()
	}
	cli, closeAll, err := openJobsCLI(ctx, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard jobs:", redact.Error(err))
		return exitError
	}
	defer closeAll()
	cli.json = *output == "json"
	cli.by = "operator (jobguard jobs)"
	if u, ok := lookup("USER"); ok && u != "" {
		cli.by = "operator " + u + " (jobguard jobs)"
	}
	if verb == "list" || verb == "reencrypt" {
		// With DATABASE_URL the list continues into the SQL history, and reencrypt rewrites the
		// copies there too; the other commands act on Redis alone, so they do not need
		// PostgreSQL to answer.
		if cli.sql, err = store.OpenSQL(ctx, cfg); err != nil {
			fmt.Fprintln(stderr, "jobguard jobs:", redact.Error(err))
			return exitError
		}
		if cli.sql != nil {
			defer cli.sql.Close()
		}
	}
	if verb == "cancel" {
		cli.fenceSQL(ctx, cfg)
		if cli.sql != nil {
			defer cli.sql.Close()
		}
	}
	switch verb {
	case "list":
		err = cli.list(ctx, q)
	case "get":
		err = cli.get(ctx, id)
	case "cancel":
		err = cli.cancel(ctx, id, reason)
	case "retry":
		err = cli.retry(ctx, id)
	case "reencrypt":
		err = cli.reencrypt(ctx)
	}
	return cli.exit(verb, err)
}

// parseInterspersed parses fs's flags before and after the one positional argument (the job id)
// when withID, and refuses any other argument.
func parseInterspersed(fs *flag.FlagSet, args []string, withID bool) (string, error) {
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	id := ""
	if withID {
		if fs.NArg() == 0 {
			return "", errors.New("a job id is required")
		}
		id = fs.Arg(0)
		if err := fs.Parse(fs.Args()[1:]); err != nil {
			return "", err
		}
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return id, nil
}

func usage(stderr io.Writer, why string) int {
	fmt.Fprintln(stderr, "jobguard jobs:", why)
	fmt.Fprintln(stderr, jobsUsage)
	return exitUsage
}

func statusList() string {
	names := make([]string, len(jobstore.Statuses))
	for i, s := range jobstore.Statuses {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// openJobsCLI connects to cfg's Redis as the app does, with a stack that knows the task types'
// configurations (a retry needs their queues) but runs no handler.
func openJobsCLI(ctx context.Context, cfg config.Config, stdout, stderr io.Writer) (*jobsCLI, func(), error) {
	nop := zerolog.Nop()
	rdb, _, err := store.OpenRedis(ctx, cfg, nop)
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	guard := middleware.New(rdb, middleware.Config{Prefix: cfg.KeyPrefix, LeaseTTL: cfg.LeaseTTL, Retention: cfg.JobRetention,
		WorkerID: fmt.Sprintf("cli-%s-%d", host, os.Getpid()), Logger: &nop, Keys: cfg.EncryptionKeys})
	closeAll := func() { _ = guard.Close(); _ = rdb.Close() }
	stack := guardstack.Of(guard)
	if err := stack.SyncClock(ctx); err != nil {
		closeAll()
		return nil, nil, err
	}
	for _, t := range cfg.Tasks {
		guard.ProtectJob(t.Type, t.Config) // its queue and attempts, for a retry; it serves nothing
	}
	client := asynq.NewClientFromRedisClient(rdb)
	closeAll = func() { _ = client.Close(); _ = guard.Close(); _ = rdb.Close() }
	return &jobsCLI{stack: stack, client: client, stdout: stdout, stderr: stderr}, closeAll, nil
}

// exit prints err (if any) on stderr as one line and returns its exit code.
func (c *jobsCLI) exit(verb string, err error) int {
	if err == nil {
		return exitOK
	}
	code := exitError
	switch {
	case errors.Is(err, engine.ErrJobNotFound):
		code = exitNotFound
	case errors.Is(err, engine.ErrEnded), errors.Is(err, engine.ErrNotFailed), errors.Is(err, engine.ErrUnrunnable):
		code = exitConflict
	case errors.Is(err, engine.ErrBadCursor):
		code = exitUsage
	}
	fmt.Fprintf(c.stderr, "jobguard jobs %s: %v\n", verb, redact.Error(err))
	return code
}

func (c *jobsCLI) writeJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// cliListed is a job of jobguard jobs list --output json: the API's list entry and its tenant.
type cliListed struct {
	listedJob
	Tenant string `json:"tenant"`
}

func (c *jobsCLI) list(ctx context.Context, q engine.ListQuery) error {
	p, err := listPage(ctx, c.sql, c.stack, q)
	if err != nil {
		return err
	}
	if c.json {
		out := struct {
			Jobs       []cliListed `json:"jobs"`
			NextCursor string      `json:"next_cursor,omitempty"`
		}{Jobs: make([]cliListed, 0, len(p.Jobs)), NextCursor: p.Next}
		for _, j := range p.Jobs {
			out.Jobs = append(out.Jobs, cliListed{Tenant: j.Tenant, listedJob: listedJob{JobID: j.JobID, Type: j.Type, Queue: j.Queue,
				Status: string(j.Status), Attempt: j.Attempt, CreatedAt: stamp(j.CreatedAt), UpdatedAt: stamp(j.UpdatedAt), FinishedAt: stamp(j.FinishedAt)}})
		}
		return c.writeJSON(out)
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tTENANT\tTYPE\tSTATUS\tATTEMPT\tCREATED\tUPDATED")
	for _, j := range p.Jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", freetext.Quote(j.JobID), freetext.Quote(dash(j.Tenant)), freetext.Quote(j.Type), freetext.Quote(string(j.Status)), j.Attempt, when(j.CreatedAt), when(j.UpdatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.Next != "" {
		fmt.Fprintf(c.stdout, "more: --cursor %s\n", p.Next)
	}
	return nil
}

func (c *jobsCLI) get(ctx context.Context, id string) error {
	if !engine.ValidJobID(id) {
		return fmt.Errorf("%w: %q is not a job id", engine.ErrJobNotFound, id)
	}
	v, err := c.stack.Get(ctx, id)
	if err == nil {
		v, err = c.stack.Open(v)
	}
	if err != nil {
		return err
	}
	view := newJobView(v)
	if c.json {
		return c.writeJSON(view)
	}
	tw := tabwriter.NewWriter(c.stdout, 2, 8, 2, ' ', 0)
	// Every value is stored text, some of it a tenant's or a handler's: printed quoted when it holds
	// a character a terminal would obey.
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, freetext.Quote(v))
		}
	}
	r := v.Record
	row("job", r.JobID)
	row("type", r.Type+" (queue "+r.Queue+")")
	row("tenant", dash(r.Tenant))
	row("resource", r.Resource)
	row("status", string(r.Status))
	row("attempt", fmt.Sprintf("%d of %d", r.Attempt, r.MaxAttempts))
	if r.Progress > 0 || r.ProgressNote != "" {
		row("progress", strings.TrimSpace(fmt.Sprintf("%d%% %s", r.Progress, r.ProgressNote)))
	}
	row("created", when(r.CreatedAt))
	row("started", when(r.StartedAt))
	row("updated", when(r.UpdatedAt))
	row("finished", when(r.FinishedAt))
	row("worker", r.WorkerID)
	row("fencing token", fmt.Sprint(r.FencingToken))
	if v.Lease.Owner != "" {
		row("lease", fmt.Sprintf("%s, %s left, fence %d", v.Lease.Owner, v.Lease.Remaining.Round(time.Millisecond), v.Lease.Fence))
	} else {
		row("lease", fmt.Sprintf("none (fence %d)", v.Lease.Fence))
	}
	row("last error", r.LastError)
	row("result", r.Result)
	for _, d := range view.Deliveries {
		cur := ""
		if d.Current {
			cur = " (current)"
		}
		row("delivery", d.TaskID+" in "+d.Queue+cur)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(c.stdout, "timeline:")
	tw = tabwriter.NewWriter(c.stdout, 2, 8, 2, ' ', 0)
	for _, e := range v.Timeline {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", time.UnixMilli(e.At).UTC().Format(time.RFC3339Nano), freetext.Quote(e.Event), freetext.Quote(e.Delivery), freetext.Quote(e.Detail))
	}
	return tw.Flush()
}

func (c *jobsCLI) cancel(ctx context.Context, id, reason string) error {
	if !engine.ValidJobID(id) {
		return fmt.Errorf("%w: %q is not a job id", engine.ErrJobNotFound, id)
	}
	res, err := c.stack.Cancel(ctx, id, engine.CancelRequest{By: c.by, Why: reason})
	if err != nil {
		return err
	}
	if c.json {
		return c.writeJSON(cancelAnswer{JobID: id, Status: "cancelled", Was: string(res.From), DeliveryDeleted: res.DeliveryDeleted})
	}
	fmt.Fprintf(c.stdout, "cancelled %s (was %s", id, res.From)
	switch {
	case res.From == jobstore.StatusProcessing:
		fmt.Fprintf(c.stdout, "; its run is fenced out at token %d and its handler's context cancelled)\n", res.Fence)
	case res.DeliveryDeleted:
		fmt.Fprintln(c.stdout, "; its pending delivery was deleted)")
	default:
		fmt.Fprintln(c.stdout, "; its delivery will be acknowledged without running)")
	}
	return nil
}

func (c *jobsCLI) retry(ctx context.Context, id string) error {
	if !engine.ValidJobID(id) {
		return fmt.Errorf("%w: %q is not a job id", engine.ErrJobNotFound, id)
	}
	if err := c.stack.Replay(ctx, c.client, id); err != nil {
		return err
	}
	if c.json {
		return c.writeJSON(jobAnswer{JobID: id, Status: "queued"})
	}
	fmt.Fprintf(c.stdout, "retrying %s: queued again with its attempts reset\n", id)
	return nil
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// reencryptReport is what jobguard jobs reencrypt prints (--output json), per store.
type reencryptReport struct {
	Store string `json:"store"` // redis or sql
	// Jobs read; fields Rewritten with the current key; Changed by a writer meanwhile (theirs
	// kept); Failed: jobs whose data needs a key the ring lacks.
	Jobs      int      `json:"jobs"`
	Rewritten int      `json:"rewritten"`
	Changed   int      `json:"changed"`
	Failed    []string `json:"failed"`
	Key       string   `json:"current_key"`
}

// reencrypt moves every job's encrypted data, in Redis and in the SQL history (with
// DATABASE_URL), onto the current key of ENCRYPTION_KEYS; run it again after an interruption.
// Once it exits 0 on every store, the older keys can be removed from the ring.
func (c *jobsCLI) reencrypt(ctx context.Context) error {
	key := c.stack.Keys().Current()
	report := func(store string, st engine.ReencryptStats) reencryptReport {
		return reencryptReport{Store: store, Jobs: st.Jobs, Rewritten: st.Rewritten, Changed: st.Changed, Failed: st.Failed, Key: key}
	}
	var reports []reencryptReport
	st, err := c.stack.Reencrypt(ctx, nil)
	reports = append(reports, report("redis", st))
	if (err == nil || errors.Is(err, engine.ErrReencryptIncomplete)) && c.sql != nil {
		sst, serr := history.Reencrypt(ctx, c.sql, c.stack, nil)
		reports = append(reports, report("sql", sst))
		if err == nil {
			err = serr
		}
	}
	if c.json {
		if werr := c.writeJSON(reports); werr != nil {
			return werr
		}
		return err
	}
	for _, r := range reports {
		fmt.Fprintf(c.stdout, "%s: %d jobs read, %d fields moved to key %q, %d changed meanwhile, %d need a key the ring lacks\n",
			r.Store, r.Jobs, r.Rewritten, r.Key, r.Changed, len(r.Failed))
		for i, id := range r.Failed {
			if i == 20 {
				fmt.Fprintf(c.stdout, "  ... and %d more\n", len(r.Failed)-20)
				break
			}
			fmt.Fprintf(c.stdout, "  %s\n", id)
		}
	}
	return err
}
