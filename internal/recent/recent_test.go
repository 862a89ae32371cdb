package recent

import (
	"strconv"
	"testing"
	"time"
)

// A key is seen for the memory after it was last seen, and then forgotten; other keys are not
// seen; a full set starts again empty.
func TestSetRemembersForItsMemory(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s := New(time.Second)
	s.Clock = func() time.Time { return now }
	if s.Seen("a") {
		t.Fatal("a key never seen is seen")
	}
	s.Saw("a")
	if !s.Seen("a") || s.Seen("b") {
		t.Fatalf("after Saw(a): a %v, b %v", s.Seen("a"), s.Seen("b"))
	}
	now = now.Add(999 * time.Millisecond)
	if !s.Seen("a") {
		t.Fatal("a is forgotten before its memory ran out")
	}
	now = now.Add(time.Millisecond)
	if s.Seen("a") {
		t.Fatal("a is remembered past its memory")
	}
	for i := range bound {
		s.Saw(strconv.Itoa(i))
	}
	s.Saw("z")
	if s.Seen("0") || !s.Seen("z") || len(s.seen) != 1 {
		t.Fatalf("a full set kept %d keys", len(s.seen))
	}
}
