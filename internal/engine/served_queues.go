package engine

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/encoding/protowire"
)

// asynq lists a queue in asynq:queues once per process (its first enqueue), and its inspector
// refuses a queue that set does not name. After Redis restarts empty, the processes that enqueue
// do not list their queues again, so the inspector sees none while their tasks run: the rescuers
// and the reconciler would find nothing (a dead worker's jobs then waited for asynq's own 30 s
// lease). So they also walk the queues the process serves, reading the tasks of a queue the set
// does not name themselves (read only: asynq's keys are asynq's to write).

// WalkActive calls fn with every active task of the inspector's queues and of served (the
// queues this process's server works on); a queue in both is walked once.
func WalkActive(ctx context.Context, rdb redis.UniversalClient, insp *asynq.Inspector, served []string, fn func(*asynq.TaskInfo)) error {
	listed, err := insp.Queues()
	if err != nil {
		return fmt.Errorf("engine: list queues: %w", err)
	}
	known := map[string]bool{}
	for _, q := range listed {
		known[q] = true
		for page := 1; ; page++ {
			active, err := insp.ListActiveTasks(q, asynq.PageSize(500), asynq.Page(page))
			if errors.Is(err, asynq.ErrQueueNotFound) {
				break // removed since the listing
			}
			if err != nil {
				return fmt.Errorf("engine: list active tasks of %s: %w", q, err)
			}
			for _, t := range active {
				fn(t)
			}
			if len(active) < 500 {
				break
			}
		}
	}
	for _, q := range served {
		if known[q] {
			continue
		}
		known[q] = true
		active, err := unlistedActive(ctx, rdb, q)
		if err != nil {
			return fmt.Errorf("engine: list active tasks of unlisted queue %s: %w", q, err)
		}
		for _, t := range active {
			fn(t)
		}
	}
	return nil
}

// ServedQueues are the names of an asynq server's queues (asynq's default queue when it names
// none), sorted.
func ServedQueues(queues map[string]int) []string {
	if len(queues) == 0 {
		return []string{"default"}
	}
	out := make([]string, 0, len(queues))
	for q := range queues {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// unlistedActive reads the active tasks of a queue asynq:queues does not name: its active list
// (at most the workers' concurrency) and each task's message, in one pipeline (one slot: the
// keys share the queue's hash tag).
func unlistedActive(ctx context.Context, rdb redis.UniversalClient, queue string) ([]*asynq.TaskInfo, error) {
	prefix := "asynq:{" + queue + "}:"
	ids, err := rdb.LRange(ctx, prefix+"active", 0, -1).Result()
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	pipe := rdb.Pipeline()
	msgs := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		msgs[i] = pipe.HGet(ctx, prefix+"t:"+id, "msg")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []*asynq.TaskInfo
	for _, m := range msgs {
		b, err := m.Bytes()
		if err != nil {
			continue // the task ended between the two reads
		}
		info, err := decodeTaskMessage(b)
		if err != nil {
			return nil, err
		}
		info.State = asynq.TaskStateActive
		out = append(out, info)
	}
	return out, nil
}

// taskState is the state of task id of queue in asynq, asynq.ErrTaskNotFound when it has none; a
// queue asynq:queues does not name (Redis restarted empty) is read directly.
func taskState(ctx context.Context, insp *asynq.Inspector, rdb redis.UniversalClient, queue, id string) (asynq.TaskState, error) {
	info, err := insp.GetTaskInfo(queue, id)
	if errors.Is(err, asynq.ErrQueueNotFound) {
		return unlistedTaskState(ctx, rdb, queue, id)
	}
	if err != nil {
		return 0, err
	}
	return info.State, nil
}

// unlistedTaskState is the state of task id of a queue asynq:queues does not name, as the
// inspector's GetTaskInfo would give it; asynq.ErrTaskNotFound when it has no task hash.
func unlistedTaskState(ctx context.Context, rdb redis.UniversalClient, queue, id string) (asynq.TaskState, error) {
	s, err := rdb.HGet(ctx, "asynq:{"+queue+"}:t:"+id, "state").Result()
	if errors.Is(err, redis.Nil) {
		return 0, asynq.ErrTaskNotFound
	}
	if err != nil {
		return 0, err
	}
	states := map[string]asynq.TaskState{
		"active": asynq.TaskStateActive, "pending": asynq.TaskStatePending, "scheduled": asynq.TaskStateScheduled,
		"retry": asynq.TaskStateRetry, "archived": asynq.TaskStateArchived, "completed": asynq.TaskStateCompleted,
		"aggregating": asynq.TaskStateAggregating,
	}
	st, ok := states[s]
	if !ok {
		return 0, fmt.Errorf("engine: task %s of %s has unknown state %q", id, queue, s)
	}
	return st, nil
}

// decodeTaskMessage decodes asynq's TaskMessage (internal/proto/asynq.proto, v0.26), the fields a
// rescuer reads, with protowire: asynq's generated type is internal to it.
func decodeTaskMessage(b []byte) (*asynq.TaskInfo, error) {
	info := &asynq.TaskInfo{Headers: map[string]string{}}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("engine: asynq task message: %w", protowire.ParseError(n))
		}
		b = b[n:]
		// One length check for every field; a field read below is whole, so its own Consume
		// cannot fail.
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("engine: asynq task message field %d: %w", num, protowire.ParseError(n))
		}
		field := b[:n]
		b = b[n:]
		var err error
		switch typ {
		case protowire.BytesType:
			v, _ := protowire.ConsumeBytes(field)
			err = setBytesField(info, num, v)
		case protowire.VarintType:
			v, _ := protowire.ConsumeVarint(field)
			setVarintField(info, num, v)
		}
		if err != nil {
			return nil, err
		}
	}
	if info.ID == "" || info.Type == "" {
		return nil, errors.New("engine: asynq task message without id or type")
	}
	return info, nil
}

// setBytesField sets info's field numbered num (a string, bytes or map field) to v.
func setBytesField(info *asynq.TaskInfo, num protowire.Number, v []byte) error {
	switch num {
	case 1:
		info.Type = string(v)
	case 2:
		info.Payload = append([]byte(nil), v...)
	case 3:
		info.ID = string(v)
	case 4:
		info.Queue = string(v)
	case 7:
		info.LastErr = string(v)
	case 14:
		info.Group = string(v)
	case 15:
		k, val, err := decodeMapEntry(v)
		if err != nil {
			return err
		}
		info.Headers[k] = val
	}
	return nil
}

// setVarintField sets info's field numbered num (an integer field) to v.
func setVarintField(info *asynq.TaskInfo, num protowire.Number, v uint64) {
	switch num {
	case 5:
		info.MaxRetry = int(int32(v))
	case 6:
		info.Retried = int(int32(v))
	case 8:
		info.Timeout = time.Duration(int64(v)) * time.Second
	case 9:
		info.Deadline = unixOrZero(int64(v))
	case 11:
		info.LastFailedAt = unixOrZero(int64(v))
	case 12:
		info.Retention = time.Duration(int64(v)) * time.Second
	case 13:
		info.CompletedAt = unixOrZero(int64(v))
	}
}

// decodeMapEntry decodes one entry of a map<string, string> field (key = 1, value = 2).
func decodeMapEntry(b []byte) (string, string, error) {
	var k, v string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return "", "", errors.New("engine: asynq task message: bad header entry")
		}
		b = b[n:]
		s, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", "", errors.New("engine: asynq task message: bad header entry")
		}
		b = b[n:]
		if num == 1 {
			k = string(s)
		} else if num == 2 {
			v = string(s)
		}
	}
	return k, v, nil
}

func unixOrZero(s int64) time.Time {
	if s == 0 {
		return time.Time{}
	}
	return time.Unix(s, 0)
}
