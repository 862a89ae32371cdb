// Package pgtest starts real PostgreSQL servers for tests: Debian's postgresql package, initdb into
// a temporary directory, a free loopback port, trust authentication. One server per test package
// (started on first use, stopped when redistest.Main ends); each test gets a database of its own.
package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobguard/jobguard/internal/localserver"
	"github.com/jobguard/jobguard/internal/redistest"
)

// Server is one running PostgreSQL.
type Server struct {
	Port int
	dir  string
	bin  string
	cmd  *exec.Cmd
	// durable keeps every acknowledged commit through Restart (synchronous_commit on).
	durable bool
}

var (
	sharedOnce sync.Once
	shared     *Server
	sharedErr  error
	nextDB     atomic.Int64
)

func start(durable bool) (*Server, error) {
	bin, err := localserver.PostgresBinDir()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C")
	if err := runAsPostgres(initdb, dir); err != nil {
		return nil, err
	}
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w: %s", err, out)
	}
	port, err := localserver.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Port: port, dir: dir, bin: bin, durable: durable}
	if err := s.launch(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// launch starts postgres on the server's data directory and port and waits until it answers.
func (s *Server) launch() error {
	// fsync and full-page writes guard against a crash of the machine, which no test makes; an
	// asynchronous commit is lost by a crash of the server itself (its WAL buffers are shared
	// memory), which Restart makes: a server that is restarted commits synchronously.
	syncCommit := "off"
	if s.durable {
		syncCommit = "on"
	}
	s.cmd = exec.Command(filepath.Join(s.bin, "postgres"), "-D", filepath.Join(s.dir, "data"), "-p", strconv.Itoa(s.Port), "-k", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit="+syncCommit, "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	if err := runAsPostgres(s.cmd, s.dir); err != nil {
		return err
	}
	log, _ := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	s.cmd.Stdout, s.cmd.Stderr = log, log
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	if err := s.waitReady(15 * time.Second); err != nil {
		b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
		return fmt.Errorf("pgtest: %w; log: %s", err, b)
	}
	return nil
}

// StartServer starts a PostgreSQL of the test's own rather than the package's shared one (for a
// test that restarts it), stopped when the test ends. Its commits are synchronous, so a Restart
// loses none that it acknowledged (the shared server's are not: faster, and it is never restarted).
func StartServer(tb testing.TB) *Server {
	tb.Helper()
	s, err := start(true)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Restart stops the server with an immediate shutdown (SIGQUIT: no checkpoint, the backends
// dropped, crash recovery at the next start, as after a crash of the server) and starts it again
// on the same port and data, waiting down for down before it starts.
func (s *Server) Restart(down time.Duration) error {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGQUIT)
		_ = s.cmd.Wait()
	}
	time.Sleep(down)
	return s.launch()
}

func (s *Server) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			_ = conn.Close(ctx)
			cancel()
			return nil
		}
		cancel()
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on port %d not ready: %w", s.Port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// URL is a connection URL for database db.
func (s *Server) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	_ = os.RemoveAll(s.dir)
}

// NewDB gives the test a fresh database on the package's server and returns its URL; the
// database is dropped when the test ends.
func NewDB(tb testing.TB) string {
	tb.Helper()
	url, drop, err := NewDatabase()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(drop)
	return url
}

// NewPool is a pool on a fresh database (NewDB), closed when the test ends.
func NewPool(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, err := pgxpool.New(context.Background(), NewDB(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// NewDatabase creates a fresh database on the package's server (started on first use) and
// returns its URL and the function that drops it; for examples, which have no testing.TB.
func NewDatabase() (string, func(), error) {
	sharedOnce.Do(func() {
		shared, sharedErr = start(false)
		if sharedErr == nil {
			redistest.AtExit(shared.Stop)
		}
	})
	if sharedErr != nil {
		return "", nil, sharedErr
	}
	name := fmt.Sprintf("t%d_%d", os.Getpid(), nextDB.Add(1))
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, shared.URL("postgres"))
	if err != nil {
		return "", nil, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, err
	}
	drop := func() {
		c, err := pgx.Connect(ctx, shared.URL("postgres"))
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}
	return shared.URL(name), drop, nil
}

// runAsPostgres is localserver.RunAsPostgres with this package's prefix on its errors.
func runAsPostgres(cmd *exec.Cmd, dir string) error {
	if err := localserver.RunAsPostgres(cmd, dir); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}
