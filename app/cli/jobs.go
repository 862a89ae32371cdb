package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// JobsUsage is jobguard jobs' usage, printed by jobguard jobs -h and after a wrong command line.
const JobsUsage = `usage: jobguard jobs list [--tenant T] [--status S] [--type T] [--limit N] [--cursor C] [search] [flags]
       jobguard jobs show ID [--wait [--timeout D]] [flags]   (get is the same)
       jobguard jobs cancel ID [--reason R] [flags]
       jobguard jobs retry ID [flags]
       jobguard jobs skip ID [flags]                (a failed job blocking its fair sequence: let the next run)
       jobguard jobs reencrypt [--output text|json] (acts on REDIS_URL itself, not through the API)
flags: --url URL    the API (JOBGUARD_URL; default http://127.0.0.1 on HTTP_ADDR's port, 8080)
       --token T    one of the API's API_TOKENS, sent as a bearer token (JOBGUARD_TOKEN)
       --output F   text or json (-o); json is the API's answer as it came
       (these three may also come before the verb)
search: --tag T (repeat for several; --tags-match all for all of them), --error TEXT (in last_error),
       --created-after, --created-before (RFC 3339)
show --wait: block until the job ends (long-polls of GET /jobs/{id}?wait=), print its last view;
       --timeout D (e.g. 10m) stops waiting after D (default: no limit)
list: a token lists its tenant's jobs; an open API (no API_TOKENS) every tenant's, or --tenant's.
      No token reads across tenants (OPERATOR_TOKENS are refused): docs/OPERATIONS.md, Across tenants.
exit: 0 ok, 1 error or no answer, 2 usage, 3 no such job, 4 not in a state the command applies to
      (cancel: ended; retry: not failed; skip: blocks nothing);
      show --wait: 0 done, 5 failed, 6 ended otherwise (cancelled, expired, revoked, skipped),
      7 --timeout over first`

// command is one run of jobguard jobs VERB: its flags' values.
type command struct {
	verb, id    string
	url, token  string
	output      string
	tenant      string
	status, typ string
	limit       int
	cursor      string
	search      url.Values // tag, tags_match, error, created_after, created_before: as the API takes them
	reason      string
	wait        bool          // show --wait
	timeout     time.Duration // show --wait --timeout; 0: no limit
	stdout      io.Writer
}

// Jobs runs jobguard jobs with args (the arguments after "jobs") and returns the exit code. Every
// request goes to the HTTP API; errors are one line on stderr.
func Jobs(ctx context.Context, args []string, env Env) int {
	if len(args) == 0 {
		fmt.Fprintln(env.Stderr, JobsUsage)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprintln(env.Stdout, JobsUsage)
		return ExitOK
	case "-v", "--version", "version":
		fmt.Fprintln(env.Stdout, env.Version)
		return ExitOK
	}
	cmd, err := parse(verbFirst(args), env)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(env.Stdout, JobsUsage)
		return ExitOK
	}
	if err != nil {
		fmt.Fprintln(env.Stderr, "jobguard jobs:", err)
		fmt.Fprintln(env.Stderr, JobsUsage)
		return ExitUsage
	}
	t, err := resolveTarget(env, cmd.url, cmd.token)
	if err != nil {
		fmt.Fprintln(env.Stderr, "jobguard jobs:", err)
		return ExitUsage
	}
	c := newClient(t)
	switch cmd.verb {
	case "list":
		err = cmd.list(ctx, c)
	case "show", "get":
		err = cmd.show(ctx, c)
	case "cancel":
		err = cmd.cancel(ctx, c)
	case "retry":
		err = cmd.retry(ctx, c)
	case "skip":
		err = cmd.skip(ctx, c)
	}
	if err != nil {
		fmt.Fprintf(env.Stderr, "jobguard jobs %s: %v\n", cmd.verb, err)
	}
	return exitCode(err)
}

// parse reads args (the verb, then its flags and, but for list, one job id anywhere among them).
func parse(args []string, env Env) (*command, error) {
	cmd := &command{verb: args[0], stdout: env.Stdout}
	fs := flag.NewFlagSet("jobguard jobs "+cmd.verb, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&cmd.url, "url", "", "the API's base URL")
	fs.StringVar(&cmd.token, "token", "", "bearer token")
	fs.StringVar(&cmd.output, "output", "text", "text or json")
	fs.StringVar(&cmd.output, "o", "text", "text or json")
	withID := true
	switch cmd.verb {
	case "list":
		withID = false
		fs.StringVar(&cmd.tenant, "tenant", "", "only this tenant's jobs")
		fs.StringVar(&cmd.status, "status", "", "only jobs in this status")
		fs.StringVar(&cmd.typ, "type", "", "only jobs of this task type")
		fs.IntVar(&cmd.limit, "limit", 50, "page size, 1-200")
		fs.StringVar(&cmd.cursor, "cursor", "", "the next cursor a previous page printed")
		cmd.search = url.Values{}
		for flagName, param := range map[string]string{"tag": "tag", "tags-match": "tags_match", "error": "error",
			"created-after": "created_after", "created-before": "created_before"} {
			fs.Func(flagName, "passed to GET /jobs as "+param, func(v string) error {
				if param == "tag" {
					cmd.search.Add(param, v)
				} else {
					cmd.search.Set(param, v)
				}
				return nil
			})
		}
	case "cancel":
		fs.StringVar(&cmd.reason, "reason", "", "why, kept on the timeline and in last_error")
	case "show", "get":
		fs.BoolVar(&cmd.wait, "wait", false, "block until the job ends")
		fs.DurationVar(&cmd.timeout, "timeout", 0, "with --wait, stop waiting after this long")
	case "retry", "skip":
	default:
		return nil, fmt.Errorf("unknown command %q", cmd.verb)
	}
	id, err := parseInterspersed(fs, args[1:], withID)
	if err != nil {
		return nil, err
	}
	cmd.id = id
	if cmd.output != "text" && cmd.output != "json" {
		return nil, fmt.Errorf("--output must be text or json, not %q", cmd.output)
	}
	if cmd.timeout < 0 || (cmd.timeout > 0 && !cmd.wait) {
		return nil, errors.New("--timeout must be a positive duration, given with --wait")
	}
	if cmd.verb == "list" && (cmd.limit < 1 || cmd.limit > 200) {
		return nil, errors.New("--limit must be from 1 to 200, not " + strconv.Itoa(cmd.limit))
	}
	return cmd, nil
}

// sharedFlags are the flags every verb takes, which may also come before it (jobguard jobs --url U
// list), as they would in an alias.
var sharedFlags = map[string]bool{"url": true, "token": true, "output": true, "o": true}

// verbFirst moves the shared flags given before the verb to after it; anything else before the
// verb is left where it is, for parse to refuse.
func verbFirst(args []string) []string {
	var lead []string
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		name, _, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
		if !sharedFlags[name] {
			break
		}
		n := 2
		if hasValue {
			n = 1
		}
		if i+n > len(args) {
			break
		}
		lead = append(lead, args[i:i+n]...)
		i += n
	}
	if len(lead) == 0 || i == len(args) {
		return args
	}
	return append(append([]string{args[i]}, lead...), args[i+1:]...)
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
