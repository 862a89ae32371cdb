package localserver_test

import (
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/jobguard/jobguard/internal/localserver"
)

// A site is an empty directory of its own and a port a server can listen on.
func TestASiteIsAnEmptyDirectoryAndAPortToListenOn(t *testing.T) {
	t.Parallel()
	dir, port, err := localserver.Site("localserver-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 0 {
		t.Fatalf("site directory %s: %d entries, %v; want an empty directory", dir, len(entries), err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		t.Fatalf("listen on the site's port %d: %v", port, err)
	}
	_ = l.Close()
}

// PG_BIN_DIR names the PostgreSQL binaries when set, whatever is installed.
func TestPGBinDirWins(t *testing.T) {
	t.Setenv("PG_BIN_DIR", "/opt/pg/bin")
	if dir, err := localserver.PostgresBinDir(); err != nil || dir != "/opt/pg/bin" {
		t.Fatalf("PostgresBinDir() = %q, %v; want /opt/pg/bin", dir, err)
	}
}

// A command made to run as postgres dies with this process, and runs as postgres when we are root.
func TestRunAsPostgresSetsTheDeathSignalAndTheUser(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("true")
	err := localserver.RunAsPostgres(cmd, t.TempDir())
	if err != nil {
		t.Skipf("no postgres user to run as: %v", err)
	}
	if cmd.SysProcAttr == nil || cmd.SysProcAttr.Pdeathsig == 0 {
		t.Fatal("no death signal: the server would outlive a killed test binary")
	}
	if root := os.Geteuid() == 0; root != (cmd.SysProcAttr.Credential != nil) {
		t.Fatalf("root %v, credential %v: want a credential exactly when root", root, cmd.SysProcAttr.Credential)
	}
}
