package keyslot

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Of agrees with the cluster's CLUSTER KEYSLOT, hash tags included.
func TestKeySlotMatchesRedis(t *testing.T) {
	t.Parallel()
	db := redistest.NewCluster(t)
	keys := []string{"plain", "a{b}c", "{}x", "{x", "x}{y}", "{{y}}"}
	for i := range 200 {
		keys = append(keys, fmt.Sprintf("asynq:{orders~%d}:pending", i))
	}
	for _, k := range keys {
		want, err := db.Client.ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got := Of(k); int64(got) != want {
			t.Fatalf("Of(%q) = %d, Redis says %d", k, got, want)
		}
	}
}

// Spread's names fall in their slot range, so n names spread over n equal ranges.
func TestSpreadLandsInItsRange(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 3, 16} {
		for i := range n {
			tag := Spread("expiry", i, n)
			if s := Of("{" + tag + "}"); s < i*Slots/n || s >= (i+1)*Slots/n {
				t.Fatalf("Spread(expiry, %d, %d) = %q in slot %d, outside its range", i, n, tag, s)
			}
		}
	}
}
