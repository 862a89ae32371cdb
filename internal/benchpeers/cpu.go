package benchpeers

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on every Linux ABI.
const clockTicks = 100

// procTimes are one process's CPU seconds from /proc/<pid>/stat: its own (utime + stime, all its
// threads) and those of its children it waited for (cutime + cstime).
type procTimes struct {
	ppid           int
	self, children float64
}

func readProc(pid int) (procTimes, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procTimes{}, err
	}
	// The command name (field 2) may hold spaces and parentheses: the fields that follow come
	// after its last ')', from field 3 (state) on.
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 15 {
		return procTimes{}, fmt.Errorf("benchpeers: /proc/%d/stat has %d fields after the name", pid, len(fields))
	}
	n := func(i int) float64 { // field i of proc(5), 1-based
		v, _ := strconv.ParseFloat(fields[i-3], 64)
		return v / clockTicks
	}
	ppid, _ := strconv.Atoi(fields[4-3])
	return procTimes{ppid: ppid, self: n(14) + n(15), children: n(16) + n(17)}, nil
}

// processCPU is pid's own CPU seconds (a peer: Go and Node start no child processes).
func processCPU(pid int) (float64, error) {
	t, err := readProc(pid)
	return t.self, err
}

// treeCPU is the CPU seconds of pid and of its child processes, live or ended: PostgreSQL's
// postmaster and its backends and workers. An ended child's time is in the postmaster's children
// time once it reaped it, and a live one's is read from the child, so a window's difference counts
// every backend that ran in it.
func treeCPU(pid int) (float64, error) {
	root, err := readProc(pid)
	if err != nil {
		return 0, err
	}
	total := root.self + root.children
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		child, err := strconv.Atoi(filepath.Base(d))
		if err != nil || child == pid {
			continue
		}
		t, err := readProc(child)
		if err != nil || t.ppid != pid {
			continue // ended meanwhile, or not the server's
		}
		total += t.self + t.children
	}
	return total, nil
}
