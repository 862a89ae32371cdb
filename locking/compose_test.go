package locking

import (
	"strings"
	"testing"
)

// Compose keeps the definitions a body uses, directly or through another, in the fragments'
// order, and leaves out the rest and the fragments' comments.
func TestComposeKeepsWhatTheBodyUses(t *testing.T) {
	t.Parallel()
	frag := `-- a fragment: its header comment goes
local function a() return 1 end
local function b()
  return a() + 1
end
local unused_table = {x = 1,
  y = 2}
local function c() return unused_table.x end
local t1, t2 = 1, 2
`
	got := Compose("return b() + t2", frag)
	want := "local function a() return 1 end\nlocal function b()\n  return a() + 1\nend\nlocal t1, t2 = 1, 2\nreturn b() + t2"
	if got != want {
		t.Fatalf("composed:\n%s\nwant:\n%s", got, want)
	}
	// The protocol as every caller gets it: a body that uses nothing gets nothing.
	if got := Compose("return 1", protocol); got != "return 1" {
		t.Fatalf("a body that uses nothing got %q", got)
	}
	if got := Compose("return fence_check(KEYS[1], 1, 'a')", protocol); strings.Contains(got, "lease_acquire") ||
		!strings.Contains(got, "local function fence_check") {
		t.Fatalf("fence_check alone: %s", got)
	}
}
