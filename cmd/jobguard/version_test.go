package main

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// jobguard version names its build three ways: the -X values a release build stamps (make release,
// the Dockerfile: TestImageBinaryRunsAsTheDockerfileSays), the VCS revision go build stamps in a
// git checkout (below), and the module version of a go install (app's TestBuildInfo...).

// TestReleaseBinariesAreStamped runs make release as the release workflow does, for this machine's
// architecture: the binary prints the tag and commit it was given, and SHA256SUMS holds its sum.
func TestReleaseBinariesAreStamped(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	dist := t.TempDir()
	const version, commit = "v0.0.0-releasetest", "feedface"
	cmd := exec.Command("make", "-s", "-C", "../..", "release", "VERSION="+version, "COMMIT="+commit,
		"DIST="+dist, "RELEASE_ARCHES="+runtime.GOARCH, "GO=go")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make release: %v\n%s", err, out)
	}
	name := "jobguard-" + version + "-linux-" + runtime.GOARCH
	bin := filepath.Join(dist, name)
	checkStaticStripped(t, bin)
	out, err := exec.Command(bin, "version").Output()
	if want := "jobguard " + version + " (commit " + commit + ", "; err != nil || !strings.HasPrefix(string(out), want) {
		t.Fatalf("%s version: %v %q, want it to start %q", name, err, out, want)
	}
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(raw)
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if want := hex.EncodeToString(sum[:]) + "  " + name + "\n"; err != nil || string(sums) != want {
		t.Fatalf("SHA256SUMS: %v %q, want %q", err, sums, want)
	}
}

// TestGoBuildNamesItsCommit: a go build in a git checkout, without -X, prints the revision Go
// stamped into the build information (and -dirty for uncommitted files), not "commit unknown".
// It builds in a fresh clone: Go stamps nothing in a git worktree (.git is a file there), and this
// machine's go env sets GOFLAGS=-buildvcs=false, so -buildvcs=true is explicit.
func TestGoBuildNamesItsCommit(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skip("not in a git checkout")
	}
	rev, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	head := strings.TrimSpace(string(rev))
	clone := filepath.Join(t.TempDir(), "clone")
	git := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	git("clone", "-q", "--no-checkout", strings.TrimSpace(string(top)), clone)
	git("-C", clone, "-c", "advice.detachedHead=false", "checkout", "-q", head)
	if err := os.WriteFile(filepath.Join(clone, "uncommitted.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "jobguard")
	// -trimpath and CGO_ENABLED=0 as the other builds of this package's tests, so the compiled
	// packages come from the build cache whatever directory the clone is in.
	build := exec.Command("go", "build", "-buildvcs=true", "-trimpath", "-o", bin, "./cmd/jobguard")
	build.Dir = clone
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		t.Fatal(err)
	}
	// Go 1.24 on also derives the main module's version from the checkout: a pseudo-version naming
	// the revision, +dirty (v0.1.0 itself when HEAD is tagged v0.1.0).
	fields := strings.Fields(string(out))
	if len(fields) < 4 || fields[0] != "jobguard" || fields[3] != head+"-dirty," ||
		fields[1] == "devel" || !strings.HasSuffix(fields[1], "+dirty") {
		t.Fatalf("version of a go build at %s with an uncommitted file: %q", head, out)
	}
}

// TestReleaseNotesReadTheChangelog: the release workflow's text is the tag's section of
// CHANGELOG.md, and a tag without one fails the release.
func TestReleaseNotesReadTheChangelog(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("../../scripts/release-notes.sh", "v0.1.0").Output()
	notes := string(out)
	if err != nil || !strings.Contains(notes, "### Added") || !strings.Contains(notes, "locking/") ||
		strings.Contains(notes, "## [") || strings.Contains(notes, "[0.1.0]:") {
		t.Fatalf("release notes of v0.1.0: %v\n%s", err, notes)
	}
	if err := exec.Command("../../scripts/release-notes.sh", "v0.0.0-nosuch").Run(); err == nil {
		t.Fatal("a tag without a CHANGELOG.md section got release notes")
	}
}
