// Package redistest starts real redis-server processes for tests: one standalone server per test
// package (each test gets a database of its own) and, on demand, a local 3-master Redis Cluster.
// Servers run in temporary directories and are killed when the package's tests end, and by the
// kernel if the test binary dies first. Only tests import it.
package redistest

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/jobguard/jobguard/internal/localserver"
)

// leakIgnores are goroutines that are not leaks: fasthttp's process-wide date ticker and the
// idle-worker cleaner that outlives a stopped Fiber server by up to 10 s, and keep-alive
// connections of the tests' own HTTP clients.
var leakIgnores = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.updateServerDate.func1"),
	goleak.IgnoreAnyFunction("github.com/valyala/fasthttp.(*workerPool).Start.func2"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
}

// databases is how many logical databases the shared server has: one per test that asks.
const databases = 4096

// Server is one redis-server process.
type Server struct {
	Addr string
	Port int
	dir  string
	args []string
	cmd  *exec.Cmd
	mu   sync.Mutex
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	nextDB     atomic.Int64

	clusterOnce sync.Once
	cluster     *Cluster
	clusterErr  error

	startedMu sync.Mutex
	started   []func()
)

// Main runs the package's tests, fails them if goroutines outlive them (keepers, rescuers, asynq
// servers not stopped), and then stops every server they started. Unless -parallel is given, it
// runs up to defaultParallel parallel tests at once. Use it as
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
func Main(m *testing.M) {
	widenParallel()
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(leakIgnores...); err != nil {
			fmt.Fprintf(os.Stderr, "redistest: goroutines outlived the tests: %v\n", err)
			code = 1
		}
	}
	startedMu.Lock()
	for i := len(started) - 1; i >= 0; i-- { // last started, first stopped
		started[i]()
	}
	startedMu.Unlock()
	os.Exit(code)
}

// defaultParallel is how many parallel tests of a package run at once unless -parallel says
// otherwise. These tests mostly wait on Redis and on asynq's polling, not on the CPU, so the
// testing package's default (GOMAXPROCS, 2 on a small machine) would leave them queued idle.
const defaultParallel = 8

func widenParallel() {
	if !flag.Parsed() {
		flag.Parse()
	}
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if p := flag.Lookup("test.parallel"); p != nil && !set {
		_ = p.Value.Set(strconv.Itoa(max(defaultParallel, runtime.GOMAXPROCS(0))))
	}
}

// AtExit runs stop when Main ends, after the tests: for other servers the tests start (PostgreSQL).
func AtExit(stop func()) { onExit(stop) }

func onExit(stop func()) {
	startedMu.Lock()
	started = append(started, stop)
	startedMu.Unlock()
}

// Binary is the redis-server executable the tests run.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER_BIN"); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("redis-server")
	if err != nil {
		return "", fmt.Errorf("redistest: redis-server is not installed (make test installs it: apt-get install -y redis-server)")
	}
	return p, nil
}

// Start starts a redis-server on a free loopback port with extra config args (e.g.
// "--appendonly", "yes"); it is stopped at the end of the test.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	s, err := start(args...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

func start(args ...string) (*Server, error) {
	dir, port, err := localserver.Site("redistest-")
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(port), Port: port, dir: dir, args: args}
	if err := s.launch(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) launch() error {
	bin, err := Binary()
	if err != nil {
		return err
	}
	base := []string{
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--appendonly", "no", "--databases", strconv.Itoa(databases),
		"--daemonize", "no", "--logfile", filepath.Join(s.dir, "redis.log"),
		"--protected-mode", "no",
	}
	cmd := exec.Command(bin, append(base, s.args...)...)
	// The kernel kills the server if the test binary dies without running its cleanup.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redistest: start redis-server: %w", err)
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	if err := waitReady(s.Addr, 10*time.Second); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("redistest: redis-server on %s: %w; log: %s", s.Addr, err, s.logTail())
	}
	return nil
}

// Pid is the server process's id (0 when it is not running): its CPU time is in /proc/<pid>/stat.
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.Kill()
	_ = os.RemoveAll(s.dir)
}

// Kill stops the server process at once (SIGKILL), keeping its directory so Restart can reuse
// its data files.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd := s.cmd
	s.cmd = nil
	s.mu.Unlock()
	if cmd != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
}

// Pause stops the server process (SIGSTOP) without closing its sockets: clients' commands wait
// in the kernel's buffers, as with a stalled or swapping Redis. Resume undoes it.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Stall pauses the server for a test and returns what resumes it (once, however often it is
// called); the test's end resumes it if the test did not.
func (s *Server) Stall(tb testing.TB) (resume func()) {
	tb.Helper()
	if err := s.Pause(); err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	resume = func() {
		once.Do(func() {
			if err := s.Resume(); err != nil {
				tb.Error(err)
			}
		})
	}
	tb.Cleanup(resume)
	return resume
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return fmt.Errorf("redistest: server on %s is not running", s.Addr)
	}
	return s.cmd.Process.Signal(sig)
}

// Restart starts the server again on the same port and directory.
func (s *Server) Restart() error {
	s.Kill()
	return s.launch()
}

// Client returns a client for database db of this server, closed at the end of the test.
func (s *Server) Client(tb testing.TB, db int) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr, DB: db})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// DB is one test's isolated database on the package's shared server.
type DB struct {
	Server *Server
	N      int
	Client *redis.Client
}

// URL is a redis:// URL of this database, for configuring the app under test.
func (d DB) URL() string { return fmt.Sprintf("redis://%s/%d", d.Server.Addr, d.N) }

// NewDB gives the test a fresh database on the package's shared server (started on first use);
// the database is flushed when the test ends.
func NewDB(tb testing.TB) DB {
	tb.Helper()
	if err := startShared(); err != nil {
		tb.Fatal(err)
	}
	n := int(nextDB.Add(1))
	if n >= databases {
		tb.Fatalf("redistest: more than %d databases asked for in one package", databases-1)
	}
	c := redis.NewClient(&redis.Options{Addr: shared.Addr, DB: n})
	tb.Cleanup(func() {
		_ = c.FlushDB(context.Background()).Err()
		_ = c.Close()
	})
	return DB{Server: shared, N: n, Client: c}
}

// FreePort asks the kernel for a free loopback TCP port.
func FreePort() (int, error) { return localserver.FreePort() }

func waitReady(addr string, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		conn, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(time.Second))
			_, _ = conn.Write([]byte("PING\r\n"))
			line, rerr := bufio.NewReader(conn).ReadString('\n')
			_ = conn.Close()
			if rerr == nil && strings.HasPrefix(line, "+PONG") {
				return nil
			}
			last = fmt.Errorf("answered %q, %v", line, rerr)
		} else {
			last = err
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %s: %v", within, last)
}

// MustDB is NewDB for examples, which have no testing.TB: it panics instead of failing, and the
// database is flushed when the package's tests end.
func MustDB() DB {
	if err := startShared(); err != nil {
		panic(err)
	}
	n := int(nextDB.Add(1))
	c := redis.NewClient(&redis.Options{Addr: shared.Addr, DB: n})
	onExit(func() { _ = c.FlushDB(context.Background()).Err(); _ = c.Close() })
	return DB{Server: shared, N: n, Client: c}
}

func startShared() error {
	sharedOnce.Do(func() {
		shared, sharedErr = start()
		if sharedErr == nil {
			onExit(shared.Stop)
		}
	})
	return sharedErr
}

// Sentinel is a redis-sentinel process monitoring one master as "mymaster".
type Sentinel struct {
	Addr string
	cmd  *exec.Cmd
	dir  string
}

// URL is a redis:// URL for REDIS_MODE=sentinel.
func (s *Sentinel) URL() string { return "redis://" + s.Addr + "?master_name=mymaster" }

// StartSentinel starts a sentinel (redis-server in sentinel mode) that monitors master; it is
// stopped at the end of the test.
func StartSentinel(tb testing.TB, master *Server) *Sentinel {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	port, err := FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	conf := filepath.Join(dir, "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\ndir %s\nsentinel monitor mymaster 127.0.0.1 %d 1\nsentinel down-after-milliseconds mymaster 2000\n", port, dir, master.Port)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	s := &Sentinel{Addr: "127.0.0.1:" + strconv.Itoa(port), cmd: cmd, dir: dir}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if err := waitReady(s.Addr, 10*time.Second); err != nil {
		tb.Fatal(err)
	}
	return s
}
