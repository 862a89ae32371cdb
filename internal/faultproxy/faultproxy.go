// Package faultproxy is a loopback TCP proxy for tests that inject network faults between a
// process and Redis: latency on every chunk, and partitions that cut live connections and refuse
// new ones.
package faultproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections accepted on a loopback port to a target address.
type Proxy struct {
	ln      net.Listener
	target  string
	delay   atomic.Int64 // per chunk, in ns
	blocked atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]bool
	done    chan struct{} // closed by Close: a chunk waiting out its latency is dropped
	wg      sync.WaitGroup
	closing sync.Once
}

// New starts a proxy to target on a free loopback port.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if p.blocked.Load() {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		if !p.trackUnlessBlocked(c, s) {
			c.Close()
			s.Close()
			continue
		}
		p.wg.Add(2)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

// trackUnlessBlocked tracks a new connection's two ends unless a Block came since its accept: one
// that came between the accept's check and the tracking would not have cut it (a test's request then
// went through a Block, waiting out a minute's latency per chunk: TestDuplicateWaitsForAPendingJob
// hung 12 minutes in a CI run). Block sets blocked under the same lock.
func (p *Proxy) trackUnlessBlocked(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.blocked.Load() {
		return false
	}
	for _, c := range cs {
		p.conns[c] = true
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	defer p.untrack(dst, src)
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.delay.Load(); d > 0 {
				select {
				case <-time.After(time.Duration(d)):
				case <-p.done:
					return
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// SetLatency delays every chunk in both directions by d (0: none).
func (p *Proxy) SetLatency(d time.Duration) { p.delay.Store(int64(d)) }

// Block cuts every live connection and refuses new ones until Unblock.
func (p *Proxy) Block() {
	p.mu.Lock()
	p.blocked.Store(true)
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
}

// Unblock accepts connections again.
func (p *Proxy) Unblock() { p.blocked.Store(false) }

// Partition blocks for d, then unblocks.
func (p *Proxy) Partition(d time.Duration) {
	p.Block()
	time.Sleep(d)
	p.Unblock()
}

// Close stops accepting, cuts every live connection and returns once none of the proxy's
// goroutines is left (a test's leak check runs right after).
func (p *Proxy) Close() {
	p.closing.Do(func() {
		p.ln.Close()
		close(p.done)
		p.mu.Lock()
		for c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
}
