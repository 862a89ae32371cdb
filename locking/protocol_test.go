package locking

import (
	"testing"
)

// A resource's fence counter can be lost (it expired, a failover dropped it) while a record still
// holds one of its tokens. With the record's token as floor, the next token stays above it.
func TestAcquireFloorAfterLostCounter(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		keys := []string{c.LeaseKey("r"), c.FenceKey("r")}
		if err := tp.rdb.Set(bg(), keys[1], 7, 0).Err(); err != nil {
			t.Fatal(err)
		}
		tp.rdb.Del(bg(), keys[1]) // the counter is lost; a record holds token 7
		res, err := acquireScript.Run(bg(), tp.rdb, keys, "owner-1", 5000, 0, 7).Int64Slice()
		if err != nil || len(res) != 2 || res[0] != 1 || res[1] != 8 {
			t.Fatalf("acquire with floor 7 after the counter was lost: %v %v; want [1 8]", res, err)
		}
		if n, _ := tp.rdb.Get(bg(), keys[1]).Int64(); n != 8 {
			t.Fatalf("fence counter %d, want 8", n)
		}
	})
}
