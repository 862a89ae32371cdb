package testsupport

import (
	"maps"
	"sync"
)

// Peaks counts the runs in flight per key, across every server of a test, and the most seen at
// once: what a concurrency limit's test asserts on.
type Peaks struct {
	mu       sync.Mutex
	now, top map[string]int
}

// NewPeaks is a Peaks with nothing running.
func NewPeaks() *Peaks { return &Peaks{now: map[string]int{}, top: map[string]int{}} }

// Enter counts a run of key starting.
func (p *Peaks) Enter(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[key]++
	p.top[key] = max(p.top[key], p.now[key])
}

// Leave counts a run of key ending.
func (p *Peaks) Leave(key string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.now[key]--
}

// Max is the most runs of key seen at once.
func (p *Peaks) Max(key string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.top[key]
}

// All is the most runs seen at once, per key.
func (p *Peaks) All() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.top)
}
