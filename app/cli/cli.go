// Package cli is jobguard's operator command line: jobguard jobs (list, show, cancel, retry, skip) and
// jobguard healthcheck. Each command is a client of a running jobguard over net/http, like any
// other client: it imports neither the HTTP API's package nor the engine, and decodes the API's
// JSON (the contract) into views of its own. So it needs no Redis address and no configuration
// of the server's: a URL (--url, JOBGUARD_URL, else the local instance's) and, when the API has
// API_TOKENS, a token (--token, JOBGUARD_TOKEN).
package cli

import "io"

// Exit codes of jobguard jobs (README, docs/OPERATIONS.md): a script tells a job that is not
// there, or not in a state the command applies to, from a failure to ask at all.
const (
	ExitOK       = 0
	ExitError    = 1 // no answer, a refusal (401, 403, 429, 503), or another failure: nothing is known to have changed
	ExitUsage    = 2 // bad command line, or a request the API refused as malformed (400)
	ExitNotFound = 3 // no such job (never created, another tenant's, or gone after JOB_RETENTION)
	ExitConflict = 4 // the job is not in a state the command applies to (cancel: ended; retry: not failed; skip: blocks nothing)

	// show --wait's outcomes; it exits 0 when the job ended done.
	ExitFailed         = 5 // the job ended failed
	ExitEndedOtherwise = 6 // the job ended cancelled, expired, revoked or skipped
	ExitTimedOut       = 7 // --timeout was over before the job ended (the view printed is its last)
)

// Env is what a command reads and where it writes: the process's environment (lookup, as
// os.LookupEnv), its output streams, and the version line jobguard version prints.
type Env struct {
	Lookup         func(string) (string, bool)
	Stdout, Stderr io.Writer
	Version        string
}

// get is the value of the environment variable name, "" when unset.
func (e Env) get(name string) string {
	if e.Lookup == nil {
		return ""
	}
	v, _ := e.Lookup(name)
	return v
}
