package app

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
)

// GET /jobs's search text reaches PostgreSQL with DATABASE_URL: a NUL or invalid UTF-8 in error=
// (or type=) must be refused as 400 naming the parameter, not a 500 from the database.
func TestReview2SearchTextWithNULOrBadUTF8Is400(t *testing.T) {
	t.Parallel()
	env := map[string]string{"DATABASE_URL": pgtest.NewDB(t), "DATABASE_MIGRATE": "true", "REDIS_URL": redistest.NewDB(t).URL()}
	for k, v := range twoTenants {
		env[k] = v
	}
	r := startApp(t, RoleAll, env)
	for _, c := range []struct{ param, value string }{
		{"error", "a\x00b"}, {"error", "\xff\xfe"}, {"type", "a\x00b"}, {"type", "\xff"},
	} {
		resp, body := get(t, r.base+"/jobs?"+c.param+"="+url.QueryEscape(c.value), bearer(tokenA)...)
		if resp.StatusCode != 400 {
			t.Errorf("%s=%q: %d %s, want 400", c.param, c.value, resp.StatusCode, body)
			continue
		}
		if p := decodeProblem(t, resp, body); p.Field != c.param {
			t.Errorf("%s=%q: field %q", c.param, c.value, p.Field)
		}
	}
}

// A schedule of an ENCRYPT_TYPES type: its payload is the payload of every job it enqueues, kept
// encrypted in the job records; the copy the scheduler publishes in Redis for GET /schedules on
// other processes must not hold it in plaintext.
func TestReview2PublishedScheduleOfAnEncryptedTypeHoldsNoPlaintextPayload(t *testing.T) {
	t.Parallel()
	url := redistest.NewDB(t).URL()
	worker := startApp(t, RoleWorker, map[string]string{"REDIS_URL": url, "LEASE_TTL": "2s",
		"ENCRYPT_TYPES": "reserve-stock", "ENCRYPTION_KEYS": "a:" + newKey(t),
		"SCHEDULES": `[{"name":"nightly","spec":"@every 1h","type":"reserve-stock","payload":{"tenant_id":"t1","order_id":"o1","sku":"secret-sku-77","quantity":7}}]`})
	var keys []string
	testsupport.Eventually(t, 5*time.Second, "a published schedule", func() bool {
		keys = worker.rdb.Keys(context.Background(), "*schedules}:published:*").Val()
		return len(keys) > 0
	})
	for _, k := range keys {
		if v := worker.rdb.Get(context.Background(), k).Val(); strings.Contains(v, "secret-sku-77") {
			t.Errorf("published %s holds the encrypted type's payload in plaintext: %s", k, v)
		}
	}
}
