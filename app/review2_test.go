package app

import (
	"net/url"
	"testing"

	"github.com/jobguard/jobguard/internal/pgtest"
	"github.com/jobguard/jobguard/internal/redistest"
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
