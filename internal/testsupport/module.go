package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NewModule writes, in a temporary directory, the go.mod of a module named path that requires
// the jobguard repository at root through a replace directive, as a separate application's
// would, with root's go.sum so no download is needed; it returns the directory.
func NewModule(t testing.TB, root, path string) string {
	t.Helper()
	goMod := readFile(t, filepath.Join(root, "go.mod"))
	goVersion := ""
	for _, line := range strings.Split(goMod, "\n") {
		if strings.HasPrefix(line, "go ") {
			goVersion = line
		}
	}
	dir := t.TempDir()
	WriteFile(t, filepath.Join(dir, "go.mod"), "module "+path+"\n\n"+goVersion+
		"\n\nrequire github.com/jobguard/jobguard v0.0.0\n\nreplace github.com/jobguard/jobguard => "+root+"\n")
	WriteFile(t, filepath.Join(dir, "go.sum"), readFile(t, filepath.Join(root, "go.sum")))
	return dir
}

// GoIn runs the go command with args in the module at dir, resolving what the module needs from
// its go.mod and go.sum (-mod=mod), and returns its combined output. It builds with make test's
// flags (-race -trimpath, the Makefile's SHARED_BUILD_FLAGS), so the dependencies come from the
// tests' own build: a plain build compiled all of them again (the docs' snippets took 125 s of a
// cold make test).
func GoIn(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", append(args[:1:1], append([]string{"-mod=mod", "-race", "-trimpath"}, args[1:]...)...)...)
	cmd.Dir = dir
	return cmd.CombinedOutput()
}

// WriteFile writes content to path, creating its directory, or fails the test.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
