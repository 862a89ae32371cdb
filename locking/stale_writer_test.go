package locking

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// TestHelperStaleWriter is not a test: it is the child process of TestSIGSTOPPedHolderIsFencedOut.
// It takes a lease with a keeper, reports it, and on "write" writes under it whatever happened since.
func TestHelperStaleWriter(t *testing.T) {
	addr := os.Getenv("LOCKING_HELPER_REDIS")
	if addr == "" {
		t.Skip("child process of TestSIGSTOPPedHolderIsFencedOut")
	}
	db, _ := strconv.Atoi(os.Getenv("LOCKING_HELPER_DB"))
	rdb := redis.NewClient(&redis.Options{Addr: addr, DB: db})
	c := New(rdb, WithPrefix("stale"))
	k := c.NewKeeper(WithTick(20 * time.Millisecond))
	l, err := c.TryAcquire(bg(), "r", 500*time.Millisecond)
	if err != nil {
		fmt.Println("ERR", err)
		return
	}
	ctx, stop := k.Keep(bg(), l)
	defer stop()
	fmt.Println("TOKEN", l.Token)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		if in.Text() != "write" {
			continue
		}
		// Deliberately careless: it writes without looking at its context first, as a handler stuck
		// in a long computation would. Only the fence stands in the way.
		werr := c.SetFields(bg(), l.Fence(), c.Key("r", "state"), 0, "value", "from-stale-writer")
		fmt.Println("WRITE", werr == nil, werr)
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
		fmt.Println("CTX", context.Cause(ctx))
		return
	}
}

func TestSIGSTOPPedHolderIsFencedOut(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	c := New(db.Client, WithPrefix("stale"))
	child := exec.Command(os.Args[0], "-test.run=^TestHelperStaleWriter$", "-test.v")
	child.Env = append(os.Environ(), "LOCKING_HELPER_REDIS="+db.Server.Addr, "LOCKING_HELPER_DB="+strconv.Itoa(db.N))
	stdin, _ := child.StdinPipe()
	stdout, _ := child.StdoutPipe()
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	lines := make(chan string, 10)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	next := func(prefix string) string {
		t.Helper()
		timeout := time.After(10 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("child ended before %s", prefix)
				}
				if strings.HasPrefix(line, prefix+" ") {
					return strings.TrimPrefix(line, prefix+" ")
				}
			case <-timeout:
				t.Fatalf("no %s line from the child", prefix)
			}
		}
	}
	staleToken, _ := strconv.ParseInt(next("TOKEN"), 10, 64)

	// Pause the holder past its lease; its keeper cannot renew while it is stopped.
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var l *Lease
	eventually(t, 3*time.Second, "the paused holder's lease lapses", func() bool {
		var err error
		l, err = c.TryAcquire(bg(), "r", 10*time.Second)
		return err == nil
	})
	if l.Token <= staleToken {
		t.Fatalf("new token %d is not above the paused holder's %d", l.Token, staleToken)
	}
	if err := c.SetFields(bg(), l.Fence(), c.Key("r", "state"), 0, "value", "from-new-holder"); err != nil {
		t.Fatal(err)
	}

	// Wake it up and let it write.
	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "write")
	if w := next("WRITE"); !strings.HasPrefix(w, "false") || !strings.Contains(w, "stale fencing token") {
		t.Fatalf("the woken holder's write: %s", w)
	}
	if cause := next("CTX"); !strings.Contains(cause, "lease lost") {
		t.Fatalf("the woken holder's context: %s", cause)
	}
	if v := db.Client.HGet(bg(), c.Key("r", "state"), "value").Val(); v != "from-new-holder" {
		t.Fatalf("state is %q", v)
	}
	if info, _ := c.Inspect(bg(), "r"); info.Owner != l.Owner {
		t.Fatalf("the woken holder disturbed the new lease: %+v", info)
	}
}
