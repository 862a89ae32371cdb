package cli

import (
	"context"
	"fmt"
	"net/http"
)

// act posts a job's action (suffix: /cancel, /retry, /skip) with body (nil: none), decodes the
// answer into out and prints it: as it came with --output json, else say's line.
func (cmd *command) act(ctx context.Context, c *client, suffix string, body, out any, say func()) error {
	raw, err := c.call(ctx, http.MethodPost, jobPath(cmd.id, suffix), nil, body, out)
	if err != nil {
		return err
	}
	if cmd.output == "json" {
		return writeRaw(cmd.stdout, raw)
	}
	say()
	return nil
}

// cancel is jobguard jobs cancel ID [--reason R]: POST /jobs/{id}/cancel. The API checks the
// reason (one line of printable text, at most 200 bytes); its 400 is exit 2.
func (cmd *command) cancel(ctx context.Context, c *client) error {
	var body any // no body without a reason, as the API allows
	if cmd.reason != "" {
		body = map[string]string{"reason": cmd.reason}
	}
	var a cancelAnswer
	return cmd.act(ctx, c, "/cancel", body, &a, func() {
		fmt.Fprintf(cmd.stdout, "cancelled %s (was %s", shown(a.JobID), shown(a.Was))
		switch {
		case a.Was == "processing":
			fmt.Fprintln(cmd.stdout, "; its run is fenced out and its handler's context cancelled)")
		case a.DeliveryDeleted:
			fmt.Fprintln(cmd.stdout, "; its pending delivery was deleted)")
		default:
			fmt.Fprintln(cmd.stdout, "; its delivery will be acknowledged without running)")
		}
	})
}

// retry is jobguard jobs retry ID: POST /jobs/{id}/retry, for a failed job (409 otherwise: exit 4).
func (cmd *command) retry(ctx context.Context, c *client) error {
	var a jobAnswer
	return cmd.act(ctx, c, "/retry", nil, &a, func() {
		fmt.Fprintf(cmd.stdout, "retrying %s: queued again with its attempts reset\n", shown(a.JobID))
	})
}

// skip is jobguard jobs skip ID: POST /jobs/{id}/skip, for a job that failed for good in a fair
// sequence that blocks on failure (docs/FAIRNESS.md): it stays failed and its key's next job is
// admitted. 409 job_not_blocking otherwise: exit 4.
func (cmd *command) skip(ctx context.Context, c *client) error {
	var a jobAnswer
	return cmd.act(ctx, c, "/skip", nil, &a, func() {
		fmt.Fprintf(cmd.stdout, "skipped %s: it stays failed, and its sequence's next job may run\n", shown(a.JobID))
	})
}
