package chaos

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// createScript stands for a job's creation: a record hash with a TTL, one script call.
var createScript = redis.NewScript(`redis.call('HSET', KEYS[1], 'status', 'pending', 'payload', ARGV[1])
redis.call('PEXPIRE', KEYS[1], 86400000) return 1`)

// BenchmarkWaitCost is what asking a replica to acknowledge a write costs on a master with two
// replicas (loopback): the write alone, the write with WAIT 1 in the same round trip (pipelined),
// the write then WAIT in a second round trip, and the write under min-replicas-to-write 1.
//
//	go test -run '^$' -bench WaitCost -benchtime 2000x ./chaos/
func BenchmarkWaitCost(b *testing.B) {
	rep, err := redistest.StartReplicated(redistest.ReplicaLink{})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	m := redis.NewClient(&redis.Options{Addr: rep.Nodes[0].Addr})
	defer m.Close()
	key := func(i int) []string { return []string{"bench:job:" + strconv.Itoa(i)} }
	b.Run("write", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := createScript.Run(ctx, m, key(i), "x").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("write+WAIT pipelined", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			pipe := m.Pipeline()
			createScript.Run(ctx, pipe, key(i), "x")
			w := pipe.Do(ctx, "WAIT", 1, 100)
			if _, err := pipe.Exec(ctx); err != nil {
				b.Fatal(err)
			}
			if n, _ := w.Int(); n < 1 {
				b.Fatalf("WAIT: %d replicas acknowledged", n)
			}
		}
	})
	b.Run("write then WAIT", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if err := createScript.Run(ctx, m, key(i), "x").Err(); err != nil {
				b.Fatal(err)
			}
			if n, err := m.Do(ctx, "WAIT", 1, 100).Int(); err != nil || n < 1 {
				b.Fatalf("WAIT: %d, %v", n, err)
			}
		}
	})
	b.Run("write min-replicas-to-write 1", func(b *testing.B) {
		if err := m.ConfigSet(ctx, "min-replicas-to-write", "1").Err(); err != nil {
			b.Fatal(err)
		}
		defer m.ConfigSet(ctx, "min-replicas-to-write", "0")
		for i := 0; i < b.N; i++ {
			if err := createScript.Run(ctx, m, key(i), "x").Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
