// Package chaos is jobguard's fault-injection suite: real processes, a real Redis with AOF, a fake
// upstream and a loopback proxy that adds latency and partitions. Run it with make chaos.
package chaos

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// proxy forwards loopback TCP to a target, with injectable latency and partitions.
type proxy struct {
	ln      net.Listener
	target  string
	delay   atomic.Int64 // per chunk, in ns
	blocked atomic.Bool
	mu      sync.Mutex
	conns   map[net.Conn]bool
}

func newProxy(target string) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	go p.accept()
	return p, nil
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
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
		p.track(c, s)
		go p.pipe(c, s)
		go p.pipe(s, c)
	}
}

func (p *proxy) track(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		p.conns[c] = true
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if d := p.delay.Load(); d > 0 {
				time.Sleep(time.Duration(d))
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			return
		}
	}
}

// setLatency delays every chunk in both directions.
func (p *proxy) setLatency(d time.Duration) { p.delay.Store(int64(d)) }

// partition cuts every connection and refuses new ones for d.
func (p *proxy) partition(d time.Duration) {
	p.blocked.Store(true)
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	time.Sleep(d)
	p.blocked.Store(false)
}

func (p *proxy) Close() { p.ln.Close() }
