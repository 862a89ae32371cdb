package httpapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/jobguard/jobguard/tasks/rebuildcache"
	"github.com/jobguard/jobguard/tasks/reservestock"
)

// A process that has seen no traffic already exports every known series at zero, so the first
// event is an increase from 0 that increase() and rate() see, not a series appearing at 1.
func TestLabelledSeriesExistAtZeroBeforeTraffic(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAll, nil)
	body := string(scrape(t, r))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	// sample finds the series with exactly these labels.
	sample := func(name string, labels map[string]string) (float64, bool) {
		fam, ok := families[name]
		if !ok {
			return 0, false
		}
	next:
		for _, m := range fam.Metric {
			if len(m.Label) != len(labels) {
				continue
			}
			for _, l := range m.Label {
				if labels[l.GetName()] != l.GetValue() {
					continue next
				}
			}
			// Nil-safe getters: the one that is set gives the value; histograms by their count.
			return m.GetCounter().GetValue() + m.GetGauge().GetValue() + float64(m.GetHistogram().GetSampleCount()), true
		}
		return 0, false
	}
	want := func(name string, labels map[string]string) {
		t.Helper()
		if v, ok := sample(name, labels); !ok || v != 0 {
			t.Errorf("%s %v: present %v, value %v; want present at 0", name, labels, ok, v)
		}
	}
	for _, typ := range []string{rebuildcache.TypeRebuildCache, reservestock.TypeReserveStock} {
		ty := map[string]string{"type": typ}
		with := func(k, v string) map[string]string { return map[string]string{"type": typ, k: v} }
		for _, name := range []string{"jobguard_stale_writes_rejected_total", "jobguard_invalid_transitions_total",
			"jobguard_stale_deliveries_total", "jobguard_dead_lettered_total", "jobguard_idempotent_skips_total",
			"jobguard_job_queue_wait_seconds"} {
			want(name, ty)
		}
		for _, s := range []string{"queued", "processing", "retrying", "done", "failed", "revoked"} {
			want("jobguard_job_transitions_total", with("status", s))
		}
		for _, o := range []string{"done", "retry", "failed", "revoked", "bounced"} {
			want("jobguard_job_run_duration_seconds", with("outcome", o))
		}
		for _, e := range []string{"acquired", "not_acquired", "lost", "renew_failed"} {
			want("jobguard_lease_events_total", with("event", e))
		}
		for _, c := range []string{"transient", "rate_limited"} {
			want("jobguard_retries_total", with("class", c))
		}
		for _, reason := range []string{"no_slot", "lease_not_acquired", "rate_limited", "lease_lost", "shutdown", "debounce"} {
			want("jobguard_bounces_total", with("reason", reason))
		}
		for _, o := range []string{"rescued", "failed"} {
			want("jobguard_rescues_total", with("outcome", o))
		}
		want("jobguard_dedup_hits_total", map[string]string{"type": typ, "policy": "until_started", "result": "deduplicated"})
		want("jobguard_dedup_hits_total", map[string]string{"type": typ, "policy": "replace", "result": "replaced"})
	}
	for _, res := range []string{"new", "replayed", "conflict", "mismatch"} {
		want("jobguard_http_idempotency_total", map[string]string{"result": res})
	}
	// Every jobguard counter family is there, and nothing has moved yet.
	for name, fam := range families {
		if !strings.HasPrefix(name, "jobguard_") || fam.GetType().String() != "COUNTER" || name == "jobguard_http_requests_total" {
			continue
		}
		for _, m := range fam.Metric {
			if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("%s %v = %v before any traffic", name, m.Label, v)
			}
		}
	}
	if path, err := exec.LookPath("promtool"); err == nil {
		cmd := exec.Command(path, "check", "metrics")
		cmd.Stdin = strings.NewReader(body)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool check metrics: %v\n%s", err, out)
		}
	}
}

// countIdem counts only results idemResults creates at zero.
func TestIdempotencyResultsAreKnown(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "api.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "countIdem" {
			continue
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			as, ok := n.(*ast.AssignStmt)
			if !ok || len(as.Lhs) != 1 || types.ExprString(as.Lhs[0]) != "result" {
				return true
			}
			_, ok = as.Rhs[0].(*ast.BasicLit)
			v, err := strconv.Unquote(types.ExprString(as.Rhs[0]))
			if !ok || err != nil || !slices.Contains(idemResults, v) {
				t.Errorf("%s: result %s is not one of idemResults", fset.Position(as.Pos()), types.ExprString(as.Rhs[0]))
			}
			seen++
			return true
		})
	}
	if seen != len(idemResults) {
		t.Errorf("countIdem assigns %d results, idemResults has %d", seen, len(idemResults))
	}
}
