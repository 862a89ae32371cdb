// Package deploy holds the checks of what deploy/ and compose.yaml ship; it has no code of its own.
// The Compose stack cannot run where jobguard is developed (no Docker daemon), so these tests read
// it: valid by the Compose Specification's schema, and the invariants a deployment relies on.
package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v4"
)

const (
	composeFile = "../compose.yaml"
	schemaFile  = "compose-spec/compose-spec.json" // the Compose Specification's schema, vendored (see its README)
	dashboard   = "grafana/dashboards/jobguard.json"
	datasources = "grafana/provisioning/datasources/prometheus.yml"
)

// composeSchema is the compiled Compose Specification schema.
func composeSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	raw, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource("compose-spec.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("compose-spec.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// asJSON decodes YAML (anchors and merge keys resolved) into the values JSON decoding gives, which
// the schema validator takes.
func asJSON(t *testing.T, y []byte) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal(y, &v); err != nil {
		t.Fatal(err)
	}
	j, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	out, err := jsonschema.UnmarshalJSON(bytes.NewReader(j))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestComposeMatchesTheSpec is make compose-check's validation where docker compose is missing.
func TestComposeMatchesTheSpec(t *testing.T) {
	t.Parallel()
	s := composeSchema(t)
	raw, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(asJSON(t, raw)); err != nil {
		t.Fatalf("compose.yaml does not match the Compose Specification: %v", err)
	}
	// The schema refuses what compose refuses: a misspelt key, a wrong condition.
	for _, bad := range []string{
		"services:\n  a:\n    image: x:1.0.0\n    helthcheck:\n      test: [\"CMD\", \"true\"]\n",
		"services:\n  a:\n    image: x:1.0.0\n    depends_on:\n      b:\n        condition: service_done\n  b:\n    image: x:1.0.0\n",
	} {
		if s.Validate(asJSON(t, []byte(bad))) == nil {
			t.Errorf("the schema accepts %q", bad)
		}
	}
}

// compose is the part of compose.yaml the invariants read, anchors resolved.
type compose struct {
	Services map[string]struct {
		Image       string         `yaml:"image"`
		Build       any            `yaml:"build"`
		Command     []string       `yaml:"command"`
		Restart     string         `yaml:"restart"`
		Environment map[string]any `yaml:"environment"`
		Healthcheck *struct {
			Test    []string `yaml:"test"`
			Disable bool     `yaml:"disable"`
		} `yaml:"healthcheck"`
		DependsOn any `yaml:"depends_on"` // a list of names, or a map of name to {condition}
	} `yaml:"services"`
}

// conditions is a depends_on's service -> condition (the list form's is service_started).
func conditions(dependsOn any) map[string]string {
	out := map[string]string{}
	switch d := dependsOn.(type) {
	case []any:
		for _, name := range d {
			out[fmt.Sprint(name)] = "service_started"
		}
	case map[string]any:
		for name, v := range d {
			c, _ := v.(map[string]any)["condition"].(string)
			if c == "" {
				c = "service_started"
			}
			out[name] = c
		}
	}
	return out
}

func readCompose(t *testing.T) (compose, string) {
	t.Helper()
	raw, err := os.ReadFile(composeFile)
	if err != nil {
		t.Fatal(err)
	}
	var c compose
	if err := yaml.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if len(c.Services) == 0 {
		t.Fatal("compose.yaml has no services")
	}
	return c, string(raw)
}

// pinned: an exact version (1.2.3, v1.2.3, with a suffix such as -alpine; PostgreSQL's have two
// parts, 17.6) and its digest: the tag says what the image is, the digest which one it is.
var (
	pinned         = regexp.MustCompile(`^[a-z0-9./_-]+:v?[0-9]+\.[0-9]+\.[0-9]+(-[a-z0-9.]+)?@sha256:[0-9a-f]{64}$`)
	pinnedPostgres = regexp.MustCompile(`^postgres:[0-9]+\.[0-9]+(-[a-z0-9.]+)?@sha256:[0-9a-f]{64}$`)
)

func TestComposeInvariants(t *testing.T) {
	t.Parallel()
	c, raw := readCompose(t)
	oneShots := map[string]bool{} // services others wait on to exit 0
	for _, s := range c.Services {
		for dep, cond := range conditions(s.DependsOn) {
			if cond == "service_completed_successfully" {
				oneShots[dep] = true
			}
		}
	}
	for name, s := range c.Services {
		// A healthcheck on every service; a one-shot (restart "no", waited for by its exit) has
		// nothing to probe and disables the image's.
		switch hc := s.Healthcheck; {
		case hc == nil:
			t.Errorf("%s has no healthcheck", name)
		case hc.Disable:
			if !oneShots[name] || s.Restart != "no" {
				t.Errorf("%s disables its healthcheck but is no one-shot that others wait for", name)
			}
		case len(hc.Test) < 2 || (hc.Test[0] != "CMD" && hc.Test[0] != "CMD-SHELL"):
			t.Errorf("%s: healthcheck test %q is not CMD or CMD-SHELL", name, hc.Test)
		}
		// Images pinned: a digest or an exact version; the image built here is exempt.
		if s.Build == nil {
			if !(pinned.MatchString(s.Image) || pinnedPostgres.MatchString(s.Image)) || !strings.ContainsAny(s.Image, ":@") {
				t.Errorf("%s: image %q is not pinned to an exact version and its digest", name, s.Image)
			}
		}
		// A service that uses PostgreSQL starts once the schema is migrated.
		if url, ok := s.Environment["DATABASE_URL"].(string); ok && url != "" && !slices.Equal(s.Command, []string{"migrate"}) {
			if conditions(s.DependsOn)["migrate"] != "service_completed_successfully" {
				t.Errorf("%s uses DATABASE_URL but does not wait for migrate to complete", name)
			}
		}
	}
	if m, ok := c.Services["migrate"]; !ok || !slices.Equal(m.Command, []string{"migrate"}) || m.Restart != "no" ||
		conditions(m.DependsOn)["postgres"] != "service_healthy" {
		t.Error("compose.yaml lacks the one-shot migrate service (jobguard migrate, restart no, after postgres is healthy)")
	}
	for _, svc := range []string{"api", "worker-1", "worker-2"} {
		if conditions(c.Services[svc].DependsOn)["migrate"] != "service_completed_successfully" {
			t.Errorf("%s does not wait for migrate", svc)
		}
	}
	// No default password: a secret's variable has no default (${X:-value}); it is required (${X:?...}).
	secret := regexp.MustCompile(`(?i)password|secret|token|key`)
	for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:?[-?])?([^}]*)\}`).FindAllStringSubmatch(raw, -1) {
		if secret.MatchString(m[1]) && strings.HasSuffix(m[2], "-") && m[3] != "" {
			t.Errorf("compose.yaml gives %s a default (%s)", m[1], m[0])
		}
	}
	required := regexp.MustCompile(`^\$\{[A-Za-z_][A-Za-z0-9_]*:\?`)
	for name, s := range c.Services {
		for k, v := range s.Environment {
			if val, _ := v.(string); strings.Contains(strings.ToUpper(k), "PASSWORD") && !required.MatchString(val) {
				t.Errorf("%s: %s is %q, not required from the environment (${VAR:?...})", name, k, val)
			}
		}
	}
}

// TestComposeDashboardImportsAnywhere: the dashboard names its data source through the
// DS_PROMETHEUS variable (declared in templating, and in __inputs for Grafana's import), never by
// a uid of one Grafana; the provisioned data source is the default Prometheus the variable picks.
func TestComposeDashboardImportsAnywhere(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(dashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Inputs []struct {
			Name, Type, PluginID string
		} `json:"__inputs"`
		Templating struct {
			List []struct {
				Name, Type string
				Query      any
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	if len(d.Inputs) != 1 || d.Inputs[0].Name != "DS_PROMETHEUS" || d.Inputs[0].Type != "datasource" || d.Inputs[0].PluginID != "prometheus" {
		t.Errorf("__inputs is not one Prometheus data source DS_PROMETHEUS: %+v", d.Inputs)
	}
	if l := d.Templating.List; len(l) == 0 || l[0].Name != "DS_PROMETHEUS" || l[0].Type != "datasource" || l[0].Query != "prometheus" {
		t.Errorf("templating's first variable is not the Prometheus data source DS_PROMETHEUS: %+v", l)
	}
	// Every datasource reference in panels, targets and variables.
	var tree any
	if err := json.Unmarshal(raw, &tree); err != nil {
		t.Fatal(err)
	}
	refs := 0
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if k == "datasource" {
					refs++
					ds, _ := x.(map[string]any)
					if ds == nil || ds["uid"] != "${DS_PROMETHEUS}" {
						t.Errorf("%s.datasource is %v, not {uid: ${DS_PROMETHEUS}}", path, x)
					}
					continue
				}
				walk(path+"."+k, x)
			}
		case []any:
			for i, x := range v {
				walk(path+"["+strconv.Itoa(i)+"]", x)
			}
		}
	}
	walk("dashboard", tree)
	if refs < 20 {
		t.Errorf("only %d datasource references found: the walk lost some", refs)
	}

	var prov struct {
		Datasources []struct {
			Type      string `yaml:"type"`
			IsDefault bool   `yaml:"isDefault"`
		} `yaml:"datasources"`
	}
	pr, err := os.ReadFile(datasources)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(pr, &prov); err != nil {
		t.Fatal(err)
	}
	if len(prov.Datasources) != 1 || prov.Datasources[0].Type != "prometheus" || !prov.Datasources[0].IsDefault {
		t.Errorf("the provisioned data source is not the one default Prometheus the variable picks: %+v", prov.Datasources)
	}
}
