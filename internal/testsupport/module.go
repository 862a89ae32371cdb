package testsupport

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NewModule writes, in a temporary directory, the go.mod of a module named path, and a go.work
// that uses it and the jobguard repository at root, with root's go.sum so no download is needed;
// it returns the directory. The module imports jobguard as a separate application's would
// (internal packages refused), and jobguard's packages build as in root's own build: with a
// replace directive they were compiled again under -trimpath's other file names (24 s of CPU for
// the docs' snippets and the adoption test from a cache that holds make test's build, 2026-12-06).
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
	WriteFile(t, filepath.Join(dir, "go.mod"), "module "+path+"\n\n"+goVersion+"\n")
	WriteFile(t, filepath.Join(dir, "go.sum"), readFile(t, filepath.Join(root, "go.sum")))
	WriteFile(t, filepath.Join(dir, "go.work"), goVersion+"\n\nuse (\n\t.\n\t"+root+"\n)\n")
	return dir
}

// GoIn runs the go command with args in the module at dir, in NewModule's workspace, and returns
// its combined output. It builds with make test's
// flags (-race -trimpath, the Makefile's SHARED_BUILD_FLAGS), so the dependencies come from the
// tests' own build: a plain build compiled all of them again (the docs' snippets took 125 s of a
// cold make test).
func GoIn(dir string, args ...string) ([]byte, error) {
	cmd := exec.Command("go", append(args[:1:1], append([]string{"-race", "-trimpath"}, args[1:]...)...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
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
