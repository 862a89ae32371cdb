package app

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/tasks/registry"
)

func TestBuildInfoPrefersTheLinkerThenTheModule(t *testing.T) {
	t.Parallel()
	stamped := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "v1.4.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	devel := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Version: "(devel)"}}, true
	}
	// go install github.com/jobguard/jobguard/cmd/jobguard@v0.1.0: the module's version, no VCS.
	installed := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "github.com/jobguard/jobguard", Version: "v0.1.0"}}, true
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name, ver, rev string
		read           func() (*debug.BuildInfo, bool)
		want           BuildInfo
	}{
		{"linker wins", "v2.0.0", "feed", stamped, BuildInfo{"v2.0.0", "feed", "go1.99"}},
		{"module and vcs", "", "", stamped, BuildInfo{"v1.4.0", "abc123-dirty", "go1.99"}},
		{"go install", "", "", installed, BuildInfo{"v0.1.0", "unknown", "go1.99"}},
		{"devel build", "", "", devel, BuildInfo{"devel", "unknown", "go1.99"}},
		{"no build info", "", "", none, BuildInfo{"devel", "unknown", runtime.Version()}},
	} {
		if got := buildInfo(tc.ver, tc.rev, tc.read); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func runMain(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := Main(context.Background(), args, lookupFrom(env), &out, &errOut, registry.All())
	return code, out.String(), errOut.String()
}

func TestVersionSubcommand(t *testing.T) {
	t.Parallel()
	for _, arg := range []string{"version", "--version", "-v"} {
		code, out, _ := runMain(t, nil, arg)
		if code != 0 || out != Build().String()+"\n" || !strings.Contains(out, runtime.Version()) {
			t.Errorf("%s: exit %d, %q", arg, code, out)
		}
	}
}

func TestUnknownSubcommandIsAUsageError(t *testing.T) {
	t.Parallel()
	code, out, stderr := runMain(t, nil, "scheduler")
	if code != 2 || out != "" || !strings.Contains(stderr, usageLine) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}
