package redistest

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Dump reads every key of c's database with its value as text (hashes as field=value lines,
// lists and sets one member a line, sorted sets with scores), for tests that look for what must
// not be stored (a plaintext payload).
func Dump(tb testing.TB, c *redis.Client) map[string]string {
	tb.Helper()
	ctx := context.Background()
	out := map[string]string{}
	iter := c.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		var b strings.Builder
		switch typ := c.Type(ctx, key).Val(); typ {
		case "string":
			b.WriteString(c.Get(ctx, key).Val())
		case "hash":
			for f, v := range c.HGetAll(ctx, key).Val() {
				fmt.Fprintf(&b, "%s=%s\n", f, v)
			}
		case "list":
			b.WriteString(strings.Join(c.LRange(ctx, key, 0, -1).Val(), "\n"))
		case "set":
			b.WriteString(strings.Join(c.SMembers(ctx, key).Val(), "\n"))
		case "zset":
			for _, z := range c.ZRangeWithScores(ctx, key, 0, -1).Val() {
				fmt.Fprintf(&b, "%v %v\n", z.Member, z.Score)
			}
		case "stream":
			for _, m := range c.XRange(ctx, key, "-", "+").Val() {
				fmt.Fprintf(&b, "%v\n", m.Values)
			}
		default:
			fmt.Fprintf(&b, "(%s)", typ)
		}
		out[key] = b.String()
	}
	if err := iter.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}
