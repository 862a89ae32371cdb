package benchpeers

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jobguard/jobguard/internal/benchpeers/peer"
)

// peerProc is one running peer process, spoken to through internal/benchpeers/peer's protocol.
type peerProc struct {
	name   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *tail
}

// startPeer runs argv with f as flags and waits for its ready line.
func startPeer(name string, argv []string, f peer.Flags) (*peerProc, error) {
	args := append(argv[1:len(argv):len(argv)],
		"-url="+f.URL, "-mode="+f.Mode, "-n="+strconv.Itoa(f.N), "-c="+strconv.Itoa(f.Concurrency),
		"-work="+f.Work.String(), "-rate="+strconv.FormatFloat(f.Rate, 'f', -1, 64))
	p := &peerProc{name: name + " " + f.Mode, cmd: exec.Command(argv[0], args...), lines: make(chan string, 4), stderr: &tail{}}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p.cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	out, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("benchpeers: %s: %w", p.name, err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	// Startup: a Go binary, or node loading BullMQ, and River's migrations.
	if _, err := p.await("ready", time.Minute); err != nil {
		p.kill()
		return nil, err
	}
	return p, nil
}

func (p *peerProc) pid() int { return p.cmd.Process.Pid }

func (p *peerProc) send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// await waits for the line starting with word and returns the rest of it.
func (p *peerProc) await(word string, within time.Duration) (string, error) {
	timer := time.NewTimer(within)
	defer timer.Stop()
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				err := p.cmd.Wait()
				return "", fmt.Errorf("benchpeers: %s ended before %q (%v): %s", p.name, word, err, p.stderr)
			}
			if rest, found := strings.CutPrefix(line, word); found {
				return strings.TrimSpace(rest), nil
			}
		case <-timer.C:
			return "", fmt.Errorf("benchpeers: %s said no %q within %s: %s", p.name, word, within, p.stderr)
		}
	}
}

// result waits for the done line and checks that the phase ran want jobs without errors.
func (p *peerProc) result(want int, within time.Duration) (peer.Result, error) {
	rest, err := p.await("done", within)
	if err != nil {
		return peer.Result{}, err
	}
	var r peer.Result
	if err := json.Unmarshal([]byte(rest), &r); err != nil {
		return r, fmt.Errorf("benchpeers: %s: done %q: %w", p.name, rest, err)
	}
	if r.Errors > 0 || r.Jobs != want {
		return r, fmt.Errorf("benchpeers: %s: %d of %d jobs, %d errors: %s", p.name, r.Jobs, want, r.Errors, p.stderr)
	}
	return r, nil
}

// stop asks the peer to shut down and waits for it to exit (a worker finishes the jobs it took).
func (p *peerProc) stop() error {
	if err := p.send("stop"); err != nil {
		p.kill()
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			return fmt.Errorf("benchpeers: %s: %w: %s", p.name, err, p.stderr)
		}
		return nil
	case <-time.After(time.Minute):
		p.kill()
		return fmt.Errorf("benchpeers: %s did not exit within a minute of stop", p.name)
	}
}

func (p *peerProc) kill() {
	_ = p.cmd.Process.Kill()
}

// tail keeps the last 4 KiB a peer wrote to stderr, for the error that names it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
