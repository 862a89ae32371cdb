package peer

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
)

// ProfileDirVar names a directory where each Go peer writes a CPU profile of its measured window
// (from "go" to "done"), so what bounds a system's CPU per job can be read with go tool pprof:
// BENCH_PROFILE=/tmp/prof make bench-peers. Unset: no profile, nothing written.
const ProfileDirVar = "BENCH_PROFILE"

// startProfile begins the CPU profile of one phase when ProfileDirVar is set, in
// "<peer>-<mode>-<work>-<pid>.pprof", and returns what ends it. A profile that cannot be written
// is said on stderr and the phase runs without it.
func startProfile(f Flags) (stop func()) {
	dir := os.Getenv(ProfileDirVar)
	if dir == "" {
		return func() {}
	}
	name := fmt.Sprintf("%s-%s-%s-%d.pprof", filepath.Base(os.Args[0]), f.Mode, f.Work, os.Getpid())
	out, err := os.Create(filepath.Join(dir, name))
	if err == nil {
		err = pprof.StartCPUProfile(out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "peer: no CPU profile:", err)
		if out != nil {
			_ = out.Close()
		}
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = out.Close()
	}
}
