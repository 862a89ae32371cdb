package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Durable mode: a write that makes a promise (the enqueue's confirmation before its 202, a run's
// fence increment before its handler runs, a job's final status, an applied record) is followed by
// Redis's WAIT numreplicas timeout in the same pipeline, so its round trip ends when that many
// replicas hold it. WAIT counts the replicas that acknowledged the replication offset of the
// connection's last write, which covers every write the master ran before it, from any client; so
// it must be on the connection that wrote (a pipeline, one per node on a cluster), and one WAIT
// at the end of a batch covers every call in it.

// ErrNotDurable: the write ran on the master but fewer replicas than Durability.Replicas
// acknowledged it within Durability.Timeout. It may still replicate, or be lost if the master
// fails now; nothing that depends on it was acknowledged.
var ErrNotDurable = errors.New("jobstore: write not acknowledged by enough replicas")

// Durability is durable mode's setting; the zero value is off.
type Durability struct {
	// Replicas is how many replicas must hold a promise's write (0: off, the default).
	Replicas int
	// Timeout is how long WAIT waits for them (default 1s); a caller's earlier deadline shortens it.
	Timeout time.Duration
}

// DefaultDurableTimeout is Durability.Timeout's default.
const DefaultDurableTimeout = time.Second

// On reports whether writes wait for replicas.
func (d Durability) On() bool { return d.Replicas > 0 }

// waitMS is WAIT's timeout in ms: the setting's, shortened to ctx's deadline less a margin for the
// reply, at least 1 ms (WAIT's 0 would block for ever).
func (d Durability) waitMS(ctx context.Context) int64 {
	t := d.Timeout
	if t <= 0 {
		t = DefaultDurableTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		t = min(t, time.Until(dl)-20*time.Millisecond)
	}
	return max(t.Milliseconds(), 1)
}

// queueWait adds WAIT to pipe.
func (d Durability) queueWait(ctx context.Context, pipe redis.Pipeliner) *redis.IntCmd {
	cmd := redis.NewIntCmd(ctx, "wait", d.Replicas, d.waitMS(ctx))
	_ = pipe.Process(ctx, cmd)
	return cmd
}

// check reads a WAIT's answer: nil when enough replicas acknowledged.
func (d Durability) check(cmd *redis.IntCmd) error {
	n, err := cmd.Result()
	switch {
	case err != nil:
		return fmt.Errorf("%w: WAIT: %w", ErrNotDurable, err)
	case n < int64(d.Replicas):
		return fmt.Errorf("%w: %d of %d within %s", ErrNotDurable, n, d.Replicas, d.timeoutText())
	}
	return nil
}

func (d Durability) timeoutText() string {
	if d.Timeout <= 0 {
		return DefaultDurableTimeout.String()
	}
	return d.Timeout.String()
}

// Exec sends what queue adds to a pipeline and, when d is on, WAIT after it: one round trip (one
// per node on a cluster, each node's WAIT after its own commands, the nodes at once). The
// commands keep their own answers; the error says whether the replicas acknowledged them
// (ErrNotDurable when not), nil when d is off.
func (d Durability) Exec(ctx context.Context, rdb redis.UniversalClient, queue func(redis.Pipeliner)) error {
	cc, cluster := rdb.(*redis.ClusterClient)
	if !d.On() || !cluster {
		pipe := rdb.Pipeline()
		queue(pipe)
		if pipe.Len() == 0 {
			return nil
		}
		var wait *redis.IntCmd
		if d.On() {
			wait = d.queueWait(ctx, pipe)
		}
		_, _ = pipe.Exec(ctx)
		if wait == nil {
			return nil
		}
		return d.check(wait)
	}
	// A cluster client's pipeline picks a random node for a keyless WAIT; so the commands are
	// grouped by the master of their first key and each node gets its own pipeline.
	rec := rdb.Pipeline()
	queue(rec)
	groups := map[*redis.Client][]redis.Cmder{}
	for _, cmd := range rec.Cmds() {
		node, err := cc.MasterForKey(ctx, firstKey(cmd))
		if err != nil {
			cmd.SetErr(err)
			continue
		}
		groups[node] = append(groups[node], cmd)
	}
	rec.Discard()
	var wg sync.WaitGroup
	errs := make(chan error, len(groups))
	for node, cmds := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pipe := node.Pipeline()
			for _, c := range cmds {
				_ = pipe.Process(ctx, c)
			}
			wait := d.queueWait(ctx, pipe)
			_, _ = pipe.Exec(ctx)
			errs <- d.check(wait)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// firstKey is the first key a command names: after the key count of EVAL and EVALSHA, else its
// first argument (every command jobguard pipelines names a key there).
func firstKey(cmd redis.Cmder) string {
	args := cmd.Args()
	i := 1
	switch cmd.Name() {
	case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall":
		i = 3
	}
	if i >= len(args) {
		return ""
	}
	switch k := args[i].(type) {
	case string:
		return k
	case []byte:
		return string(k)
	case int64:
		return strconv.FormatInt(k, 10)
	}
	return fmt.Sprint(args[i])
}
