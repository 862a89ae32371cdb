package httpapi

import (
	"encoding/json"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The shipped Prometheus rules and Grafana dashboard (deploy/) query only series jobguard exports.

// promqlNames are the metric names a PromQL expression reads: identifiers that are not functions,
// keywords, label names (inside {} or by/without/on/ignoring (...)) or durations.
func promqlNames(expr string) []string {
	s := regexp.MustCompile(`"(?:[^"\\]|\\.)*"`).ReplaceAllString(expr, `""`)
	s = regexp.MustCompile(`\{[^}]*\}`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\[[^\]]*\]`).ReplaceAllString(s, " ")
	s = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`).ReplaceAllString(s, " ")
	keywords := map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true}
	var names []string
	for _, m := range regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*\s*\(?`).FindAllString(s, -1) {
		if strings.HasSuffix(m, "(") {
			continue // a function or aggregation
		}
		m = strings.TrimSpace(m)
		if !keywords[strings.ToLower(m)] {
			names = append(names, m)
		}
	}
	return names
}

func TestPromqlNames(t *testing.T) {
	t.Parallel()
	got := promqlNames(`histogram_quantile(0.95, sum by (le, route) (rate(jobguard_http_request_duration_seconds_bucket{route=~"$r", x="a{b}"}[$__rate_interval]))) / on (job) group_left up > bool 0.5`)
	if strings.Join(got, ",") != "jobguard_http_request_duration_seconds_bucket,up" {
		t.Fatalf("got %v", got)
	}
}

// shippedQueries are the PromQL expressions of deploy/prometheus/rules.yml and the dashboard.
func shippedQueries(t *testing.T) map[string]string {
	t.Helper()
	q := map[string]string{}
	rules, err := os.ReadFile("../../deploy/prometheus/rules.yml")
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(rules), "\n") {
		if e, ok := strings.CutPrefix(strings.TrimSpace(l), "expr:"); ok {
			q["rules.yml:"+itoa(i+1)] = strings.TrimSpace(e)
		}
	}
	raw, err := os.ReadFile("../../deploy/grafana/dashboards/jobguard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			q["dashboard: "+p.Title+" #"+itoa(i)] = tg.Expr
		}
	}
	for _, v := range dash.Templating.List {
		// label_values(metric, label)
		if m := regexp.MustCompile(`label_values\(([A-Za-z_:][A-Za-z0-9_:]*)`).FindStringSubmatch(v.Definition); m != nil {
			q["dashboard variable "+v.Definition] = m[1]
		}
	}
	return q
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestShippedQueriesUseExportedMetrics(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, nil)
	// A job creates the asynq queue series; a first request the HTTP series.
	if resp, body := post(t, r, "/jobs/rebuild-cache", `{"tenant_id":"t1","resource_id":"deploy"}`); resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	get(t, r.base+"/healthz")
	_, body := get(t, r.base+"/metrics")
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{"up": true} // Prometheus' own series of each target
	for name, f := range families {
		exported[name] = true
		if f.GetType().String() == "HISTOGRAM" {
			for _, s := range []string{"_bucket", "_sum", "_count"} {
				exported[name+s] = true
			}
		}
	}
	queries := shippedQueries(t)
	if len(queries) < 20 {
		t.Fatalf("only %d queries found in deploy/: the parser lost some", len(queries))
	}
	used := map[string]bool{}
	for where, q := range queries {
		names := promqlNames(q)
		if len(names) == 0 {
			t.Errorf("%s: no metric in %q", where, q)
		}
		for _, n := range names {
			used[n] = true
			if !exported[n] {
				t.Errorf("%s queries %s, which jobguard does not export: %s", where, n, q)
			}
		}
	}
	// The dashboard covers what the issue lists.
	for _, want := range []string{"jobguard_asynq_queue_tasks", "jobguard_job_transitions_total", "jobguard_job_run_duration_seconds_bucket",
		"jobguard_retries_total", "jobguard_dead_lettered_total", "jobguard_lease_events_total", "jobguard_stale_writes_rejected_total",
		"jobguard_rescues_total", "jobguard_zombie_handlers", "jobguard_http_requests_total", "jobguard_build_info"} {
		if !used[want] {
			t.Errorf("no shipped query reads %s", want)
		}
	}
	var list []string
	for n := range used {
		list = append(list, n)
	}
	sort.Strings(list)
	t.Logf("%d queries read %d metrics: %v", len(queries), len(list), list)
}

// Prometheus scrapes every jobguard service of compose.yaml on its ADMIN_ADDR port.
func TestPrometheusScrapesTheComposeServices(t *testing.T) {
	t.Parallel()
	prom, err := os.ReadFile("../../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	compose, err := os.ReadFile("../../compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(compose), "ADMIN_ADDR: 0.0.0.0:9090") || !strings.Contains(string(compose), `"--appendonly", "yes"`) {
		t.Fatal("compose.yaml: jobguard's ADMIN_ADDR is not 0.0.0.0:9090, or Redis runs without AOF")
	}
	for _, svc := range []string{"api", "worker-1", "worker-2"} {
		if !strings.Contains(string(compose), "\n  "+svc+":\n") {
			t.Errorf("compose.yaml has no service %s", svc)
		}
		if !strings.Contains(string(prom), `"`+svc+`:9090"`) {
			t.Errorf("prometheus.yml does not scrape %s:9090", svc)
		}
	}
}
