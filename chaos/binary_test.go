package chaos

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// buildJobguard builds cmd/jobguard into the test's temporary directory and returns its path: the
// suites run the real binary, as a deployment does.
func buildJobguard(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "jobguard")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/jobguard").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}
