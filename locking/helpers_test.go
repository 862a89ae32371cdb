package locking

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// topology is one Redis the suite runs against.
type topology struct {
	name   string
	rdb    redis.UniversalClient
	prefix string
}

// eachTopology runs f on a fresh standalone database and on the package's 3-master cluster.
func eachTopology(t *testing.T, f func(t *testing.T, tp topology)) {
	t.Run("standalone", func(t *testing.T) {
		db := redistest.NewDB(t)
		f(t, topology{"standalone", db.Client, "t"})
	})
	t.Run("cluster", func(t *testing.T) {
		cl := redistest.NewCluster(t)
		f(t, topology{"cluster", cl.Client, cl.Prefix})
	})
}

func (tp topology) client(opts ...Option) *Client {
	return New(tp.rdb, append([]Option{WithPrefix(tp.prefix)}, opts...)...)
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testsupport.Eventually(t, d, what, cond)
}

func bg() context.Context { return context.Background() }
