package httpapi

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// workflowFeed is what one workflow stream has sent, and so what it sends next: the ends told to
// the workflow (numbered in its hash, jobstore.WfEndSeq) in their order, each with its number as
// the event's id, and the live statuses of the nodes not ended (read from their records), each
// with the number of the last end sent. A stream resumed with Last-Event-ID gets the ends after
// it, and the live nodes no longer as they were created: what it cannot have seen.
type workflowFeed struct {
	mark    int  // the number of the last end sent
	resumed bool // the client sent Last-Event-ID
	sent    map[string]jobstore.Status
}

// newWorkflowFeed starts a feed at from, lastEventID's position (0: a fresh stream).
func newWorkflowFeed(from int64) *workflowFeed {
	f := &workflowFeed{resumed: from > 0, sent: map[string]jobstore.Status{}}
	if from > 0 {
		f.mark = int(min(from-1, int64(engine.MaxWorkflowNodes)))
	}
	return f
}

// next is the events v has that the stream has not sent ("" none).
func (f *workflowFeed) next(v engine.WorkflowView) string {
	var b strings.Builder
	var ends []int
	for i, n := range v.Nodes {
		if n.Ended != "" && n.EndSeq > f.mark {
			ends = append(ends, i)
		}
	}
	sort.Slice(ends, func(x, y int) bool { return v.Nodes[ends[x]].EndSeq < v.Nodes[ends[y]].EndSeq })
	for _, i := range ends {
		n := v.Nodes[i]
		f.mark = n.EndSeq
		f.write(&b, n, n.Ended)
	}
	for i, n := range v.Nodes {
		st := v.NodeStatus[i]
		switch {
		case n.Ended != "" && n.EndSeq > 0:
			continue // sent above, or before the stream resumed
		case n.Ended != "":
			st = n.Ended // told before ends were numbered: a live event, the fresh stream's only
			if f.resumed {
				continue
			}
		case st.Terminal():
			continue // its event comes, with its number, once the workflow is told
		}
		prev, seen := f.sent[n.ID]
		if seen && prev == st {
			continue
		}
		if !seen && f.resumed && st == createdAs(n) {
			continue // as it was created: the stream sent that before it broke
		}
		f.write(&b, n, st)
	}
	return b.String()
}

// createdAs is a node's status at its workflow's creation.
func createdAs(n jobstore.WorkflowNodeState) jobstore.Status {
	if len(n.Parents) > 0 {
		return jobstore.StatusHeld
	}
	return jobstore.StatusQueued
}

func (f *workflowFeed) write(b *strings.Builder, n jobstore.WorkflowNodeState, st jobstore.Status) {
	f.sent[n.ID] = st
	data, _ := json.Marshal(workflowNodeEvent{ID: n.ID, JobID: n.JobID, Status: string(st)})
	fmt.Fprintf(b, "id: %d\nevent: node\ndata: %s\n\n", f.mark, data)
}
