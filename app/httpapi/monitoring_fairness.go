package httpapi

import (
	"context"

	"github.com/jobguard/jobguard/web"
)

// fairPageTop is how many keys the jobs page names per fairly dispatched type, by waiting and by
// running jobs each.
const fairPageTop = 10

// Fairness reads each fairly dispatched type's admission layer for the jobs page: the operator's
// view of GET /fairness/{type}, every key (the monitoring UI is the operators').
func (m monitoringJobs) Fairness(ctx context.Context) ([]web.FairType, error) {
	var out []web.FairType
	for _, typ := range m.stack.FairTypeNames() {
		c, err := m.stack.FairCounts(ctx, typ, fairPageTop)
		if err != nil {
			return nil, err
		}
		f := web.FairType{Type: typ, Capacity: c.Capacity, Admitted: c.Admitted, WaitingKeys: c.WaitingKeys}
		for _, k := range c.TopKeys {
			f.Keys = append(f.Keys, web.FairKey{Key: k.Key, Waiting: k.Backlog, Running: k.Running})
		}
		out = append(out, f)
	}
	return out, nil
}
