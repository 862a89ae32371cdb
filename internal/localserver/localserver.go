// Package localserver holds what starting a database server on this machine takes, shared by the
// test helpers (internal/redistest, internal/pgtest) and the benchmark harness
// (internal/benchpeers): a free loopback port, a directory of the server's own, Debian's
// PostgreSQL binaries and the postgres user to run them as. It imports no testing code, so the
// harness's binary does not link the testing package.
package localserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
)

var (
	// ErrNoPostgres is PostgresBinDir's error when no PostgreSQL server is installed.
	ErrNoPostgres = errors.New("PostgreSQL is not installed (apt-get install -y postgresql, or set PG_BIN_DIR)")
	// ErrNoPostgresUser is RunAsPostgres's error for root on a machine without the postgres user.
	ErrNoPostgresUser = errors.New("running as root needs the postgres user (Debian's postgresql package creates it)")
)

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Site is a new temporary directory named after prefix and a free loopback port: where one server
// keeps its files and listens. The directory is the caller's to remove.
func Site(prefix string) (dir string, port int, err error) {
	dir, err = os.MkdirTemp("", prefix)
	if err != nil {
		return "", 0, err
	}
	port, err = FreePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", 0, err
	}
	return dir, port, nil
}

// PostgresBinDir is PG_BIN_DIR, or where Debian puts the server binaries of its newest installed
// major version; ErrNoPostgres when there is none.
func PostgresBinDir() (string, error) {
	if d := os.Getenv("PG_BIN_DIR"); d != "" {
		return d, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	if len(dirs) == 0 {
		return "", ErrNoPostgres
	}
	major := func(d string) int { n, _ := strconv.Atoi(filepath.Base(filepath.Dir(d))); return n }
	sort.Slice(dirs, func(i, j int) bool { return major(dirs[i]) > major(dirs[j]) })
	return dirs[0], nil
}

// RunAsPostgres makes cmd die with this process (SIGKILL) and, when this process is root, run as
// the postgres user, to whom it gives dir: PostgreSQL refuses to run as root.
func RunAsPostgres(cmd *exec.Cmd, dir string) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoPostgresUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chown(p, uid, gid)
	}); err != nil {
		return err
	}
	cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return nil
}
