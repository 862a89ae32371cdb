package middleware

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/keyslot"
)

// master is one master of the cluster's slot map: the slot ranges it serves.
type master struct {
	id     string
	ranges [][2]int
}

func (m master) owns(slot int) bool {
	for _, r := range m.ranges {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// slotMap lists the cluster's masters in the order of their lowest slot (CLUSTER SLOTS); a
// single Redis, or a failover client, is one master that serves every slot.
func slotMap(ctx context.Context, rdb redis.UniversalClient) ([]master, error) {
	if _, cluster := rdb.(*redis.ClusterClient); !cluster {
		return []master{{id: "single", ranges: [][2]int{{0, keyslot.Slots - 1}}}}, nil
	}
	slots, err := rdb.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("read the cluster's slot map: %w", err)
	}
	var masters []master
	for _, s := range slots {
		if len(s.Nodes) == 0 {
			continue
		}
		id := s.Nodes[0].ID
		if id == "" {
			id = s.Nodes[0].Addr
		}
		i := slices.IndexFunc(masters, func(m master) bool { return m.id == id })
		if i < 0 {
			masters = append(masters, master{id: id})
			i = len(masters) - 1
		}
		masters[i].ranges = append(masters[i].ranges, [2]int{s.Start, s.End})
	}
	if len(masters) == 0 {
		return nil, fmt.Errorf("the cluster serves no slot")
	}
	low := func(m master) int { return slices.MinFunc(m.ranges, func(a, b [2]int) int { return a[0] - b[0] })[0] }
	slices.SortFunc(masters, func(a, b master) int { return low(a) - low(b) })
	return masters, nil
}

// pickShards chooses n more shard names for queue after those recorded: the first is queue
// itself when nothing is recorded; each other goes to the master that holds the fewest shards so
// far (the lowest slots first on a tie), named "<queue>~<k>" with the smallest k that lands there
// and is not taken. Deterministic for one slot map, so processes that race pick the same names.
func pickShards(queue string, recorded []string, n int, masters []master) []string {
	taken := map[string]bool{}
	load := make([]int, len(masters))
	place := func(name string) {
		taken[name] = true
		slot := keyslot.Of("asynq:{" + name + "}:pending")
		for i, m := range masters {
			if m.owns(slot) {
				load[i]++
				return
			}
		}
	}
	for _, name := range recorded {
		place(name)
	}
	var out []string
	if len(recorded) == 0 && n > 0 {
		place(queue)
		out = append(out, queue)
	}
	k := 0
	for len(out) < n {
		target := 0
		for i := range masters {
			if load[i] < load[target] {
				target = i
			}
		}
		for ; ; k++ {
			name := queue + "~" + strconv.Itoa(k)
			if !taken[name] && masters[target].owns(keyslot.Of("asynq:{"+name+"}:pending")) {
				place(name)
				out = append(out, name)
				break
			}
			if k > 1<<20 {
				return out // a master with slots too few to hit: the record keeps what was found
			}
		}
		k = 0
	}
	return out
}
