package cli

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"text/tabwriter"
)

// list is jobguard jobs list: one page of GET /jobs, newest first, and the cursor of the next.
func (cmd *command) list(ctx context.Context, c *client) error {
	q := url.Values{}
	for name, vs := range cmd.search {
		q[name] = vs
	}
	for name, v := range map[string]string{"tenant": cmd.tenant, "status": cmd.status, "type": cmd.typ, "cursor": cmd.cursor} {
		if v != "" {
			q.Set(name, v)
		}
	}
	q.Set("limit", fmt.Sprint(cmd.limit))
	var p listPage
	raw, err := c.call(ctx, http.MethodGet, "/jobs", q, nil, &p)
	if err != nil {
		return err
	}
	if cmd.output == "json" {
		return writeRaw(cmd.stdout, raw)
	}
	tw := tabwriter.NewWriter(cmd.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB ID\tTENANT\tTYPE\tSTATUS\tATTEMPT\tCREATED\tUPDATED")
	for _, j := range p.Jobs {
		tenant := j.Tenant
		if tenant == "" {
			tenant = cmd.tenant // a server that does not say has listed the tenant asked for
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", shown(j.JobID), shown(dash(tenant)), shown(j.Type), shown(j.Status),
			j.Attempt, when(j.CreatedAt), when(j.UpdatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if p.NextCursor != "" {
		fmt.Fprintf(cmd.stdout, "more: --cursor %s\n", shown(p.NextCursor))
	}
	return nil
}
