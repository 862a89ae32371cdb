package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/app/cli"
	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
)

// The CLI's tests run it against a real server: the whole app (app.New, as cmd/jobguard does) on
// :0 with a real redis-server, the CLI given its URL, as an operator's shell would.

func TestMain(m *testing.M) { redistest.Main(m) }

const (
	tokenA = "token-a-0123456789"
	tokenB = "token-b-0123456789"
)

var twoTenants = map[string]string{"API_TOKENS": tokenA + ":t1," + tokenB + ":t2"}

// server is a running API for one test.
type server struct {
	*app.App
	url string
}

// startAPI runs the api role (no worker: jobs stay queued) with env on a free port until the
// test ends.
func startAPI(t *testing.T, env map[string]string) *server {
	t.Helper()
	full := map[string]string{"HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "2s", "REDIS_URL": redistest.NewDB(t).URL()}
	for k, v := range env {
		full[k] = v
	}
	cfg, err := config.FromLookup(lookupFrom(full), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	a, err := app.New(context.Background(), cfg, app.RoleAPI, zerolog.New(zerolog.NewTestWriter(t)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run returned %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return within 10s of the stop")
		}
	})
	return &server{App: a, url: "http://" + a.Addr()}
}

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// enqueue posts a reserve-stock order for tenant with token ("" none) and returns the job id.
func (s *server) enqueue(t *testing.T, token, tenant, order string) string {
	t.Helper()
	return s.enqueueBody(t, token, `{"tenant_id":"`+tenant+`","order_id":"`+order+`","sku":"s-1","quantity":1}`)
}

// enqueueBody posts body as a reserve-stock request with token ("" none) and returns the job id.
func (s *server) enqueueBody(t *testing.T, token, body string) string {
	t.Helper()
	return s.enqueueType(t, token, "reserve-stock", body)
}

// enqueueType posts body to POST /jobs/{typ} with token ("" none) and returns the job id.
func (s *server) enqueueType(t *testing.T, token, typ, body string) string {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.url+"/jobs/"+typ, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var a struct {
		JobID string `json:"job_id"`
	}
	if err := json.Unmarshal(raw, &a); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, raw)
	}
	return a.JobID
}

// recordKey is the Redis key of job id's record (found, not spelled: the layout is the engine's).
func (s *server) recordKey(t *testing.T, id string) string {
	t.Helper()
	keys, err := s.Redis().Keys(context.Background(), "*job:"+id).Result()
	if err != nil || len(keys) != 1 {
		t.Fatalf("the record of %s: %v %v", id, keys, err)
	}
	return keys[0]
}

// run is jobguard jobs args with env (JOBGUARD_URL, JOBGUARD_TOKEN, ...): exit code, stdout, stderr.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Jobs(context.Background(), args, cli.Env{Lookup: lookupFrom(env), Stdout: &out, Stderr: &errOut, Version: "jobguard test"})
	return code, out.String(), errOut.String()
}

func decode(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, s)
	}
}

// page is jobguard jobs list --output json.
type page struct {
	Jobs []struct {
		JobID  string `json:"job_id"`
		Tenant string `json:"tenant"`
		Status string `json:"status"`
	} `json:"jobs"`
	NextCursor string `json:"next_cursor"`
}

// ids are the page's job ids, sorted: the tests compare sets, as jobs created within one
// millisecond are listed in id order, not creation order.
func (p page) ids() []string {
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.JobID)
	}
	slices.Sort(out)
	return out
}

func (p page) tenantOf(id string) string {
	for _, j := range p.Jobs {
		if j.JobID == id {
			return j.Tenant
		}
	}
	return ""
}

func sorted(ids ...string) []string {
	out := slices.Clone(ids)
	slices.Sort(out)
	return out
}

// view is jobguard jobs show --output json, as far as the tests read it.
type view struct {
	JobID      string `json:"job_id"`
	Tenant     string `json:"tenant"`
	Status     string `json:"status"`
	LastError  string `json:"last_error"`
	Deliveries []struct {
		Current bool `json:"current"`
	} `json:"deliveries"`
	Timeline []struct {
		Event  string `json:"event"`
		Detail string `json:"detail"`
	} `json:"timeline"`
}
