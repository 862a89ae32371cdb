package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
	"github.com/jobguard/jobguard/schedule"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/registry"
)

// TestSchedulesConfig: a bad SCHEDULES entry stops start-up naming the entry and the field; a
// good one is read with its defaults.
func TestSchedulesConfig(t *testing.T) {
	t.Parallel()
	good := `{"name":"hot","spec":"@every 1m","type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":"hot"}}`
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"SCHEDULES": "[" + good + "]"}), registry.All())
	if err != nil || len(cfg.Schedules) != 1 || cfg.Schedules[0].Name != "hot" || cfg.Schedules[0].Cron != "@every 1m" {
		t.Fatalf("good SCHEDULES: %+v, %v", cfg.Schedules, err)
	}
	for _, c := range []struct{ value, want string }{
		{`{"name":"x"}`, "must be a JSON array"},
		{`[` + good + `,{"name":"b","spec":"@every 1m","type":"rebuild-cache","Payload":{}}]`, `entry 2: Payload: unknown field`},
		{`[` + good + `,{"name":"b","spec":"61 * * * *","type":"rebuild-cache"}]`, `entry 2 ("b"): schedule: spec:`},
		{`[{"name":"b","spec":"@daily","type":"rebuild-cache","timezone":"Mars/Base"}]`, `entry 1 ("b"): schedule: timezone:`},
		{`[{"name":"feb30","spec":"0 0 30 2 *","type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":"r"}}]`, `entry 1 ("feb30"): schedule: spec: never fires`},
		{`[{"name":"b","spec":"@daily","type":"send-fax"}]`, `entry 1 ("b"): schedule: type: "send-fax" is not a task type`},
		{`[{"name":"b","spec":"@daily","type":"rebuild-cache","payload":{"tenant_id":"t 1","resource_id":"r"}}]`, `entry 1 ("b"): schedule: payload.tenant_id:`},
		{`[{"name":"b","spec":"@daily","type":"rebuild-cache","payload":{"tenant":"t1"}}]`, `entry 1 ("b"): schedule: payload: unknown field tenant`},
		{`[{"name":"b","spec":"@daily","type":"rebuild-cache","overlap":"queue"}]`, `entry 1 ("b"): schedule: overlap: "queue" is not skip, allow or replace`},
		{`[{"name":"b","spec":"@daily","type":"rebuild-cache","catchup":"some"}]`, `entry 1 ("b"): schedule: catchup:`},
		{`[` + good + `,` + good + `]`, `entry 2 ("hot"): schedule: name: is another schedule's too`},
	} {
		_, err := config.FromLookup(lookupFrom(map[string]string{"SCHEDULES": c.value}), registry.All())
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != "SCHEDULES" || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SCHEDULES=%s:\n got %v\nwant SCHEDULES ... %s", c.value, err, c.want)
		}
	}
	for _, c := range []map[string]string{
		{"OPERATOR_TOKENS": "short"},
		{"OPERATOR_TOKENS": "operator-token-0001,operator-token-0001"},
		{"OPERATOR_TOKENS": "operator-token-0001", "API_TOKENS": "operator-token-0001:t1"},
	} {
		_, err := config.FromLookup(lookupFrom(c), registry.All())
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Var != "OPERATOR_TOKENS" || strings.Contains(err.Error(), "operator-token-0001") {
			t.Errorf("%v: got %v, want an OPERATOR_TOKENS error that does not repeat the token", c, err)
		}
	}
}

// TestSchedulesEndToEnd: a schedule configured by SCHEDULES creates rebuild-cache jobs in a
// running app; GET /schedules shows it with its leader and last job to operators only, and
// pause and resume work.
func TestSchedulesEndToEnd(t *testing.T) {
	t.Parallel()
	const tenant, operator = "Bearer tenant-token-000001", "Bearer operator-token-0001"
	r := startApp(t, RoleAll, map[string]string{
		"SCHEDULES":       `[{"name":"hot-cache","spec":"@every 1s","type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":"hot"}}]`,
		"API_TOKENS":      "tenant-token-000001:t1",
		"OPERATOR_TOKENS": "operator-token-0001",
		"LEASE_TTL":       "2s",
	})
	type overview struct {
		Leader    string `json:"leader"`
		Schedules []struct {
			Name          string     `json:"name"`
			NextTick      time.Time  `json:"next_tick"`
			LastTick      *time.Time `json:"last_tick"`
			LastJobID     string     `json:"last_job_id"`
			LastJobStatus string     `json:"last_job_status"`
			Paused        bool       `json:"paused"`
		} `json:"schedules"`
	}
	var ov overview
	testsupport.Eventually(t, 8*time.Second, "a tick's job in GET /schedules", func() bool {
		resp, body := get(t, r.base+"/schedules", "Authorization", operator)
		ov = overview{}
		return resp.StatusCode == http.StatusOK && decodeInto(body, &ov) && len(ov.Schedules) == 1 && ov.Schedules[0].LastJobID != ""
	})
	s := ov.Schedules[0]
	if ov.Leader == "" || s.Name != "hot-cache" || s.LastTick == nil || s.LastJobStatus == "" || s.NextTick.IsZero() {
		t.Fatalf("overview: %+v", ov)
	}
	// The tick's job is an ordinary job of the tenant.
	if resp, body := get(t, r.base+"/jobs/"+s.LastJobID, "Authorization", tenant); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"rebuild-cache"`) {
		t.Fatalf("GET the tick's job: %d %s", resp.StatusCode, body)
	}

	if resp, body := get(t, r.base+"/schedules/hot-cache/jobs", "Authorization", operator); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"job_id":"`+s.LastJobID+`"`) {
		t.Fatalf("GET the schedule's jobs: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/schedules/hot-cache/jobs", "Authorization", tenant); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a tenant token on the schedule's jobs: %d %s, want 403", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/schedules", "Authorization", tenant); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a tenant token: %d %s, want 403", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/schedules"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: %d %s, want 401", resp.StatusCode, body)
	}
	resp, body := do(t, http.MethodPost, r.base+"/schedules/nope/pause", "", "Authorization", operator)
	if p := decodeProblem(t, resp, body); p.Status != http.StatusNotFound || p.Field != "name" {
		t.Fatalf("pause an unknown schedule: %+v", p)
	}
	if resp, body := do(t, http.MethodPost, r.base+"/schedules/hot-cache/pause", "", "Authorization", operator); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"paused":true`) {
		t.Fatalf("pause: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/schedules", "Authorization", operator); !decodeInto(body, &ov) || resp.StatusCode != http.StatusOK || !ov.Schedules[0].Paused {
		t.Fatalf("after the pause: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, http.MethodPost, r.base+"/schedules/hot-cache/resume", "", "Authorization", operator); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"paused":false`) {
		t.Fatalf("resume: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, r.base+"/metrics", "Authorization", tenant); resp.StatusCode != http.StatusOK ||
		!strings.Contains(body, `jobguard_schedule_ticks_total{outcome="enqueued",schedule="hot-cache"}`) ||
		!strings.Contains(body, `jobguard_schedule_ticks_total{outcome="missed",schedule="hot-cache"} 0`) ||
		!strings.Contains(body, "jobguard_schedule_leader_changes_total 1") {
		t.Fatalf("metrics lack the schedule's series: %d", resp.StatusCode)
	}
}

func decodeInto(body string, v any) bool { return json.Unmarshal([]byte(body), v) == nil }

// TestScheduleDeclaredInCode: a task type's own schedule (tasks.Task.Schedules, type left empty)
// runs its handler in a running app; a bad one names the task and the field.
func TestScheduleDeclaredInCode(t *testing.T) {
	t.Parallel()
	note := noteTask()
	note.Schedules = []schedule.Spec{{Name: "note-tick", Cron: "@every 1s", Payload: []byte(`{"tenant_id":"t1","text":"tick"}`), Overlap: schedule.Allow}}
	r := startTasks(t, nil, []tasks.Task{note})
	testsupport.Eventually(t, 8*time.Second, "the scheduled note", func() bool {
		resp, body := get(t, r.base+"/notes/t1")
		return resp.StatusCode == http.StatusOK && strings.Contains(body, "note:tick")
	})

	bad := noteTask()
	bad.Schedules = []schedule.Spec{{Name: "note-bad", Cron: "@every 1s", Payload: []byte(`{"tenant_id":"t 1"}`)}}
	_, err := config.FromLookup(lookupFrom(nil), []tasks.Task{bad})
	var ce *config.Error
	if !errors.As(err, &ce) || !strings.Contains(err.Error(), `task note's schedule "note-bad" (in code): schedule: payload.tenant_id:`) {
		t.Fatalf("bad schedule in code: %v", err)
	}
}

// GET /schedules, a schedule's jobs, pause and the UI's schedules page on an API process that
// runs no schedule list what the workers run: each worker publishes its schedules in Redis
// (expiring unless refreshed) while it runs, and takes them back when it stops. Found by an
// adversarial probe: an api process listed [] while the workers ran schedules.
func TestSchedulesListedOnAnAPIProcess(t *testing.T) {
	t.Parallel()
	const operator = "Bearer operator-token-0001"
	url := redistest.NewDB(t).URL()
	worker := startApp(t, RoleWorker, map[string]string{"REDIS_URL": url, "LEASE_TTL": "2s",
		"SCHEDULES": `[{"name":"hot-cache","spec":"@every 1s","type":"rebuild-cache","payload":{"tenant_id":"t1","resource_id":"hot"}}]`})
	api := startApp(t, RoleAPI, map[string]string{"REDIS_URL": url, "OPERATOR_TOKENS": "operator-token-0001", "API_TOKENS": "tenant-token-000001:t1"})
	type overview struct {
		Leader    string `json:"leader"`
		Schedules []struct {
			Name      string    `json:"name"`
			Spec      string    `json:"spec"`
			NextTick  time.Time `json:"next_tick"`
			LastJobID string    `json:"last_job_id"`
		} `json:"schedules"`
	}
	var ov overview
	testsupport.Eventually(t, 8*time.Second, "the worker's schedule with a tick's job in the api's GET /schedules", func() bool {
		resp, body := get(t, api.base+"/schedules", "Authorization", operator)
		ov = overview{}
		return resp.StatusCode == http.StatusOK && decodeInto(body, &ov) && len(ov.Schedules) == 1 && ov.Schedules[0].LastJobID != ""
	})
	if s := ov.Schedules[0]; ov.Leader == "" || s.Name != "hot-cache" || s.Spec != "@every 1s" || s.NextTick.IsZero() {
		t.Fatalf("overview: %+v", ov)
	}
	if resp, body := get(t, api.base+"/schedules/hot-cache/jobs", "Authorization", operator); resp.StatusCode != http.StatusOK || !strings.Contains(body, ov.Schedules[0].LastJobID) {
		t.Fatalf("the schedule's jobs on the api: %d %s", resp.StatusCode, body)
	}
	if resp, body := do(t, http.MethodPost, api.base+"/schedules/hot-cache/pause", "", "Authorization", operator); resp.StatusCode != http.StatusOK {
		t.Fatalf("pause on the api: %d %s", resp.StatusCode, body)
	}
	if resp, body := get(t, api.base+"/monitoring/schedules"); resp.StatusCode != http.StatusOK || !strings.Contains(body, "hot-cache") {
		t.Fatalf("the api's schedules page: %d %.300s", resp.StatusCode, body)
	}
	published := func() []string {
		keys, err := api.Redis().Keys(context.Background(), "*schedules}:publish*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if ttl := api.Redis().PTTL(context.Background(), k).Val(); ttl <= 0 || ttl > 2*time.Second {
				t.Fatalf("published key %s has TTL %s, want at most LEASE_TTL", k, ttl)
			}
		}
		return keys
	}
	if keys := published(); len(keys) == 0 {
		t.Fatal("no published keys while the worker runs")
	}
	worker.shutdown(t)
	if keys := published(); len(keys) != 0 {
		t.Fatalf("published keys left after the worker stopped: %v", keys)
	}
	resp, body := get(t, api.base+"/schedules", "Authorization", operator)
	if ov = (overview{}); resp.StatusCode != http.StatusOK || !decodeInto(body, &ov) || len(ov.Schedules) != 0 {
		t.Fatalf("after the worker stopped: %d %s", resp.StatusCode, body)
	}
}
