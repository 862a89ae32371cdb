// Package recent remembers for a while which keys were seen: a limit key found full, a tenant's
// budget found spent. Both the engine's limits and the API's rate limit use it to decide when not
// to send a check speculatively with the write it guards (a flooding key is checked first, alone).
package recent

import (
	"sync"
	"time"
)

// bound is the most keys remembered; a full set is emptied rather than grown (forgetting a key
// only costs one speculative write).
const bound = 10000

// Set remembers keys for Memory after each was last seen. The zero value is not usable: use New.
type Set struct {
	memory time.Duration
	mu     sync.Mutex
	seen   map[string]time.Time
	// Clock gives the time (nil: time.Now); tests set it.
	Clock func() time.Time
}

// New returns a set that remembers a key for memory after it was last seen.
func New(memory time.Duration) *Set { return &Set{memory: memory, seen: map[string]time.Time{}} }

func (s *Set) now() time.Time {
	if s.Clock != nil {
		return s.Clock()
	}
	return time.Now()
}

// Saw notes that key was seen now.
func (s *Set) Saw(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.seen) >= bound {
		s.seen = map[string]time.Time{}
	}
	s.seen[key] = s.now()
}

// Seen reports whether key was seen within the memory; a key seen longer ago is forgotten.
func (s *Set) Seen(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.seen[key]
	if ok && s.now().Sub(at) >= s.memory {
		delete(s.seen, key)
		return false
	}
	return ok
}
