package engine

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/faultproxy"
	"github.com/jobguard/jobguard/internal/redistest"
)

// cutOffable is a proxy in front of db's server, closed when the test ends, and the options of a
// client of db through it that fails at once when the proxy cuts it off (no retries, 200 ms dials):
// a worker the test can cut off from Redis.
func cutOffable(t *testing.T, db redistest.DB) (*faultproxy.Proxy, *redis.Options) {
	t.Helper()
	px, err := faultproxy.New(db.Server.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(px.Close)
	return px, &redis.Options{Addr: px.Addr(), DB: db.N, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, DialerRetries: 1}
}
