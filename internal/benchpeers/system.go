package benchpeers

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrSkip marks a system that this machine cannot run (no node, no PostgreSQL): the run goes on
// without it and says why.
var ErrSkip = errors.New("skipped")

// A System is one job queue under test. Each of its phases runs on a fresh datastore of its own
// kind, and its peer process speaks internal/benchpeers/peer's protocol.
type System struct {
	// Name is how the tables and BENCH_SYSTEMS call it.
	Name string
	// Ours marks jobguard's own stacks: the tables give their ratio to every system that is not.
	Ours bool
	// Store is the datastore its phases run on.
	Store StoreKind
	// Prepare builds or installs the system's peer under env.Dir and returns the command that
	// runs it (before the protocol's flags) and what version it is. An error wrapping ErrSkip
	// leaves the system out of the run, with its message.
	Prepare func(ctx context.Context, env Env) (argv []string, version string, err error)
}

// Env is what Prepare may use: the run's configuration and a temporary directory of its own.
type Env struct {
	Config Config
	Dir    string
}

// Systems are the systems make bench-peers knows, in the order of its tables. A system is one
// entry: a Go peer is a main package that calls peer.Main (goPeer builds it), another language
// brings its own Prepare.
func Systems() []System {
	return []System{
		{Name: "asynq", Store: Redis, Prepare: goPeer(".", "./internal/benchpeers/cmd/asynqpeer", "github.com/hibiken/asynq")},
		{Name: "jobguard", Ours: true, Store: Redis, Prepare: goPeer(".", "./internal/benchpeers/cmd/jobguardpeer", "")},
		{Name: "jobguard-lease", Ours: true, Store: Redis, Prepare: goPeer(".", "./internal/benchpeers/cmd/leasepeer", "")},
		{Name: "BullMQ", Store: Redis, Prepare: bullmqPeer},
		{Name: "River", Store: Postgres, Prepare: goPeer("bench/peers", "./river", "github.com/riverqueue/river")},
	}
}

func systemNamed(name string) (System, bool) {
	for _, s := range Systems() {
		if strings.EqualFold(s.Name, name) {
			return s, true
		}
	}
	return System{}, false
}

func systemNames() []string {
	var names []string
	for _, s := range Systems() {
		names = append(names, s.Name)
	}
	return names
}

// goPeer builds the main package pkg of the module in moduleDir (relative to the root) into
// env.Dir; its version is versionOf's in that module, or the checkout's commit when empty.
func goPeer(moduleDir, pkg, versionOf string) func(context.Context, Env) ([]string, string, error) {
	return func(ctx context.Context, env Env) ([]string, string, error) {
		dir := filepath.Join(env.Config.Root, moduleDir)
		bin := filepath.Join(env.Dir, filepath.Base(pkg))
		if out, err := command(ctx, dir, "go", "build", "-o", bin, pkg); err != nil {
			return nil, "", fmt.Errorf("go build %s: %w: %s", pkg, err, out)
		}
		version, err := command(ctx, dir, "git", "rev-parse", "--short", "HEAD")
		if versionOf != "" {
			version, err = command(ctx, dir, "go", "list", "-m", "-f", "{{.Version}}", versionOf)
		}
		if err != nil {
			version = "?"
		}
		return []string{bin}, strings.TrimSpace(version), nil
	}
}

// bullmqPeer installs BullMQ with npm into a directory of its own beside a copy of peer.js.
func bullmqPeer(ctx context.Context, env Env) ([]string, string, error) {
	node, err := exec.LookPath("node")
	if err != nil {
		return nil, "", fmt.Errorf("%w: node is not installed (apt-get install -y nodejs npm)", ErrSkip)
	}
	if _, err := exec.LookPath("npm"); err != nil {
		return nil, "", fmt.Errorf("%w: npm is not installed (apt-get install -y npm)", ErrSkip)
	}
	dir := filepath.Join(env.Dir, "bullmq")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, "", err
	}
	script, err := os.ReadFile(filepath.Join(env.Config.Root, "bench/peers/bullmq/peer.js"))
	if err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "peer.js"), script, 0o644); err != nil {
		return nil, "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"private": true}`+"\n"), 0o644); err != nil {
		return nil, "", err
	}
	if out, err := command(ctx, dir, "npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "bullmq@"+env.Config.BullMQVersion); err != nil {
		return nil, "", fmt.Errorf("%w: npm install bullmq@%s: %v: %s", ErrSkip, env.Config.BullMQVersion, err, out)
	}
	version, err := command(ctx, dir, node, "-p", "require('bullmq/package.json').version")
	if err != nil {
		version = "?"
	}
	nodeVersion, _ := command(ctx, dir, node, "--version")
	return []string{node, filepath.Join(dir, "peer.js")}, strings.TrimSpace(version) + " (node " + strings.TrimSpace(nodeVersion) + ")", nil
}

// command runs name in dir and returns its combined output.
func command(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
