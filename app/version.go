package app

import (
	"runtime"
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
)

// Set at build time: go build -ldflags "-X github.com/jobguard/jobguard/app.version=v1.2.3
// -X github.com/jobguard/jobguard/app.commit=abc123" (the Dockerfile and the Makefile's
// RELEASE_LDFLAGS do). Empty: taken from the module's build information.
var (
	version string
	commit  string
)

// BuildInfo says which build a process runs.
type BuildInfo struct {
	Version   string // the -X version, else the main module's version (go install), else "devel"
	Commit    string // the -X commit, else the VCS revision go build stamped (+"-dirty"), else "unknown"
	GoVersion string // the toolchain that built the binary
}

// Build is the running binary's BuildInfo.
func Build() BuildInfo { return buildInfo(version, commit, debug.ReadBuildInfo) }

// buildInfo prefers the linker's values and falls back on read (debug.ReadBuildInfo).
func buildInfo(ver, rev string, read func() (*debug.BuildInfo, bool)) BuildInfo {
	b := BuildInfo{Version: ver, Commit: rev, GoVersion: runtime.Version()}
	if bi, ok := read(); ok {
		if bi.GoVersion != "" {
			b.GoVersion = bi.GoVersion
		}
		if b.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			b.Version = bi.Main.Version
		}
		if b.Commit == "" {
			modified := false
			for _, s := range bi.Settings {
				switch s.Key {
				case "vcs.revision":
					b.Commit = s.Value
				case "vcs.modified":
					modified = s.Value == "true"
				}
			}
			if b.Commit != "" && modified {
				b.Commit += "-dirty"
			}
		}
	}
	if b.Version == "" {
		b.Version = "devel"
	}
	if b.Commit == "" {
		b.Commit = "unknown"
	}
	return b
}

// String is the line jobguard version prints.
func (b BuildInfo) String() string {
	return "jobguard " + b.Version + " (commit " + b.Commit + ", " + b.GoVersion + ")"
}

// buildInfoCollector is jobguard_build_info{version,commit,goversion} 1, so dashboards can show
// which build each process runs and join it onto other series.
func buildInfoCollector(b BuildInfo) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "jobguard_build_info",
		Help:        "Always 1; the labels say which build the process runs.",
		ConstLabels: prometheus.Labels{"version": b.Version, "commit": b.Commit, "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}
