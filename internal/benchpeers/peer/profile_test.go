package peer

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// With BENCH_PROFILE set, a phase leaves one CPU profile named for the peer, mode and work;
// without it, nothing is written.
func TestProfileOfAPhase(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(ProfileDirVar, dir)
	stop := startProfile(Flags{Mode: "work", Work: 5 * time.Millisecond})
	for end := time.Now().Add(30 * time.Millisecond); time.Now().Before(end); {
	}
	stop()
	files, _ := filepath.Glob(filepath.Join(dir, "*-work-5ms-*.pprof"))
	if len(files) != 1 {
		t.Fatalf("profiles written: %v, want one", files)
	}
	if st, err := os.Stat(files[0]); err != nil || st.Size() == 0 {
		t.Fatalf("profile %s: %v, size %d", files[0], err, st.Size())
	}

	t.Setenv(ProfileDirVar, "")
	startProfile(Flags{Mode: "enqueue"})()
	if all, _ := os.ReadDir(dir); len(all) != 1 {
		t.Fatalf("%d files after a phase without %s, want the one before", len(all), ProfileDirVar)
	}
}
