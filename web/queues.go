package web

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"
)

// A logical queue sharded over a Redis Cluster (middleware.Guard.ShardQueue) is several asynq
// queues: the queue itself and its shards "<queue>~<k>". asynqmon lists each as a queue of its
// own; {root}/logical-queues shows each logical queue once, its shards' counts summed, and its
// shards below it (a <details>: expandable without a script), each linking to asynqmon's page.

// queueGroup is one logical queue: its shards' counts summed.
type queueGroup struct {
	Name string
	// Shards are the asynq queues of the logical queue, the queue itself first, then by k.
	Shards []queueRow
	Total  queueRow
}

// queueRow is one asynq queue's counts (or a group's sums: Paused counts its paused shards).
type queueRow struct {
	Name, Link                                              string
	Size, Pending, Active, Scheduled, Retry, Archived, Done int
	Processed, Failed                                       int
	Latency                                                 time.Duration
	Paused                                                  int
}

// logicalQueue is the logical queue of asynq queue q: q without a shard suffix "~<k>".
func logicalQueue(q string) string {
	base, k, ok := strings.Cut(q, "~")
	if !ok || base == "" || k == "" || strings.Contains(k, "~") {
		return q
	}
	if _, err := strconv.Atoi(k); err != nil {
		return q
	}
	return base
}

// shardNumber orders a logical queue's shards: the queue itself (-1), then by k.
func shardNumber(q string) int {
	_, k, ok := strings.Cut(q, "~")
	if !ok {
		return -1
	}
	n, _ := strconv.Atoi(k)
	return n
}

// groupQueues groups asynq queues' infos by logical queue, by name.
func groupQueues(root string, infos []*asynq.QueueInfo) []queueGroup {
	byName := map[string]*queueGroup{}
	for _, in := range infos {
		name := logicalQueue(in.Queue)
		g := byName[name]
		if g == nil {
			g = &queueGroup{Name: name, Total: queueRow{Name: name}}
			byName[name] = g
		}
		row := queueRow{Name: in.Queue, Link: root + "/queues/" + url.PathEscape(in.Queue), Size: in.Size, Pending: in.Pending,
			Active: in.Active, Scheduled: in.Scheduled, Retry: in.Retry, Archived: in.Archived, Done: in.Completed,
			Processed: in.Processed, Failed: in.Failed, Latency: in.Latency}
		if in.Paused {
			row.Paused = 1
		}
		g.Shards = append(g.Shards, row)
		t := &g.Total
		t.Size, t.Pending, t.Active, t.Scheduled = t.Size+row.Size, t.Pending+row.Pending, t.Active+row.Active, t.Scheduled+row.Scheduled
		t.Retry, t.Archived, t.Done = t.Retry+row.Retry, t.Archived+row.Archived, t.Done+row.Done
		t.Processed, t.Failed, t.Paused = t.Processed+row.Processed, t.Failed+row.Failed, t.Paused+row.Paused
		t.Latency = max(t.Latency, row.Latency)
	}
	groups := make([]queueGroup, 0, len(byName))
	for _, g := range byName {
		slices.SortFunc(g.Shards, func(a, b queueRow) int { return cmp.Compare(shardNumber(a.Name), shardNumber(b.Name)) })
		groups = append(groups, *g)
	}
	slices.SortFunc(groups, func(a, b queueGroup) int { return strings.Compare(a.Name, b.Name) })
	return groups
}

// logicalQueues is {root}/logical-queues. A queue removed between the list and its read is left
// out, as asynqmon does.
func (p *pages) logicalQueues(ctx context.Context, c *fiber.Ctx) error {
	names, err := p.insp.Queues()
	if err != nil {
		return err
	}
	infos := make([]*asynq.QueueInfo, 0, len(names))
	for _, q := range names {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		in, err := p.insp.GetQueueInfo(q)
		if errors.Is(err, asynq.ErrQueueNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		infos = append(infos, in)
	}
	return render(c, fiber.StatusOK, "queues.html", map[string]any{"Root": p.root, "Groups": groupQueues(p.root, infos)})
}
