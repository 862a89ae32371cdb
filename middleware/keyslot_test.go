package middleware

import (
	"context"
	"fmt"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// keySlot agrees with the cluster's CLUSTER KEYSLOT, hash tags included.
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
		if got := keySlot(k); int64(got) != want {
			t.Fatalf("keySlot(%q) = %d, Redis says %d", k, got, want)
		}
	}
}
