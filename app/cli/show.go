package cli

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
)

// show is jobguard jobs show ID (or get): GET /jobs/{id}, field by field, then its timeline.
// With --wait it is showWait.
func (cmd *command) show(ctx context.Context, c *client) error {
	if cmd.wait {
		return cmd.showWait(ctx, c)
	}
	var v jobView
	raw, err := c.call(ctx, http.MethodGet, jobPath(cmd.id, ""), nil, nil, &v)
	if err != nil {
		return err
	}
	return cmd.printView(v, raw)
}

// printView prints a job view: raw as it came with --output json, else field by field and then
// its timeline.
func (cmd *command) printView(v jobView, raw []byte) error {
	if cmd.output == "json" {
		return writeRaw(cmd.stdout, raw)
	}
	tw := tabwriter.NewWriter(cmd.stdout, 2, 8, 2, ' ', 0)
	row := func(k, val string) {
		if val != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, shown(val))
		}
	}
	row("job", v.JobID)
	row("type", v.Type+" (queue "+v.Queue+")")
	row("tenant", dash(v.Tenant))
	row("resource", v.Resource)
	row("status", v.Status)
	row("attempt", fmt.Sprintf("%d of %d", v.Attempt, v.MaxAttempts))
	if v.Progress > 0 || v.ProgressNote != "" {
		row("progress", strings.TrimSpace(fmt.Sprintf("%d%% %s", v.Progress, v.ProgressNote)))
	}
	row("tags", strings.Join(v.Tags, " "))
	row("created", when(v.CreatedAt))
	row("started", when(v.StartedAt))
	row("updated", when(v.UpdatedAt))
	row("finished", when(v.FinishedAt))
	row("start by", when(v.StartBy))
	row("worker", v.WorkerID)
	row("fencing token", fmt.Sprint(v.Fencing))
	row("lease", v.Lease.String())
	row("last error", v.LastError)
	row("result", v.Result)
	for _, d := range v.Deliveries {
		row("delivery", d.String())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(cmd.stdout, "timeline:")
	tw = tabwriter.NewWriter(cmd.stdout, 2, 8, 2, ' ', 0)
	for _, e := range v.Timeline {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", time.UnixMilli(e.At).UTC().Format(time.RFC3339Nano), shown(e.Event), shown(e.Delivery), shown(e.Detail))
	}
	return tw.Flush()
}
