package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/store"
	"github.com/jobguard/jobguard/history"
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/guardstack"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
)

// jobguard jobs reencrypt is the one jobs command that does not go through the HTTP API
// (app/cli): it needs the key ring and rewrites every stored copy, in Redis and in the SQL
// history, which is a maintenance pass on the host, not a request a tenant's API serves.

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

// runReencrypt is jobguard jobs reencrypt: it moves every job's encrypted data, in Redis and in
// the SQL history (with DATABASE_URL), onto the current key of ENCRYPTION_KEYS; run it again after
// an interruption. Once it exits 0 on every store, the older keys can be removed from the ring.
// Exit 0 done, 1 failed (or jobs need a key the ring lacks), 2 usage or configuration.
func runReencrypt(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, list []tasks.Task) int {
	fs := flag.NewFlagSet("jobguard jobs reencrypt", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	output := fs.String("output", "text", "text or json")
	fs.StringVar(output, "o", "text", "text or json")
	const usage = "usage: jobguard jobs reencrypt [--output text|json]"
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, usage)
		return 0
	}
	if err != nil || fs.NArg() > 0 || (*output != "text" && *output != "json") {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cfg, err := config.FromLookup(lookup, list)
	if err != nil {
		fmt.Fprintln(stderr, "jobguard jobs:", err)
		return 2
	}
	if cfg.Embedded() {
		fmt.Fprintln(stderr, "jobguard jobs reencrypt: REDIS_URL is not set: the command rewrites the Redis of a running deployment")
		return 2
	}
	if cfg.EncryptionKeys == nil {
		fmt.Fprintln(stderr, "jobguard jobs: reencrypt needs the key ring: ENCRYPTION_KEYS or ENCRYPTION_KEYS_FILE")
		return 2
	}
	reports, err := reencryptStores(ctx, cfg) // a pass over every job takes as long as it takes; Ctrl-C stops it
	switch {
	case reports == nil: // nothing reached
	case *output == "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(reports); werr != nil && err == nil {
			err = werr
		}
	default:
		printReencrypt(stdout, reports)
	}
	if err != nil {
		fmt.Fprintln(stderr, "jobguard jobs reencrypt:", redact.Error(err))
		return 1
	}
	return 0
}

// reencryptStores opens cfg's Redis (and PostgreSQL, with DATABASE_URL) with a stack that runs no
// handler, and rewrites both; a report per store it reached.
func reencryptStores(ctx context.Context, cfg config.Config) ([]reencryptReport, error) {
	nop := zerolog.Nop()
	rdb, _, err := store.OpenRedis(ctx, cfg, nop)
	if err != nil {
		return nil, err
	}
	defer rdb.Close()
	host, _ := os.Hostname()
	guard := middleware.New(rdb, middleware.Config{Prefix: cfg.KeyPrefix, LeaseTTL: cfg.LeaseTTL, Retention: cfg.JobRetention,
		WorkerID: fmt.Sprintf("cli-%s-%d", host, os.Getpid()), Logger: &nop, Keys: cfg.EncryptionKeys})
	defer guard.Close()
	stack := guardstack.Of(guard)
	if err := stack.SyncClock(ctx); err != nil {
		return nil, err
	}
	db, err := store.OpenSQL(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if db != nil {
		defer db.Close()
	}
	key := stack.Keys().Current()
	report := func(store string, st engine.ReencryptStats) reencryptReport {
		return reencryptReport{Store: store, Jobs: st.Jobs, Rewritten: st.Rewritten, Changed: st.Changed, Failed: st.Failed, Key: key}
	}
	st, err := stack.Reencrypt(ctx, nil)
	reports := []reencryptReport{report("redis", st)}
	if (err == nil || errors.Is(err, engine.ErrReencryptIncomplete)) && db != nil {
		sst, serr := history.Reencrypt(ctx, db, stack, nil)
		reports = append(reports, report("sql", sst))
		if err == nil {
			err = serr
		}
	}
	return reports, err
}

func printReencrypt(w io.Writer, reports []reencryptReport) {
	for _, r := range reports {
		fmt.Fprintf(w, "%s: %d jobs read, %d fields moved to key %q, %d changed meanwhile, %d need a key the ring lacks\n",
			r.Store, r.Jobs, r.Rewritten, r.Key, r.Changed, len(r.Failed))
		for i, id := range r.Failed {
			if i == 20 {
				fmt.Fprintf(w, "  ... and %d more\n", len(r.Failed)-20)
				break
			}
			fmt.Fprintf(w, "  %s\n", id)
		}
	}
}
