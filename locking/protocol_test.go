package locking

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// The protocol's functions (scripts/protocol.lua) are tested here once, through a body built the
// way every caller builds one: NewProtocolScript. Locking's own scripts and other packages' scripts
// that call them inherit these tests.

var probeScript = sync.OnceValue(func() *redis.Script {
	body, err := os.ReadFile("testdata/protocol_probe.lua")
	if err != nil {
		panic(err)
	}
	return NewProtocolScript(string(body))
})

// probe calls protocol function fn with keys and args in one script and returns its return values
// as strings ("true", "false", "nil" or the value).
func probe(t *testing.T, rdb redis.Scripter, fn string, keys []string, args ...any) []string {
	t.Helper()
	res, err := probeScript().Run(bg(), rdb, keys, append([]any{fn}, args...)...).StringSlice()
	if err != nil {
		t.Fatalf("%s%v: %v", fn, args, err)
	}
	return res
}

func wantReturns(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("%s returned %q, want %q", what, got, want)
	}
}

func TestProtocolLease(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		lease, fence := c.LeaseKey("r"), c.FenceKey("r")
		keys := []string{lease, fence}

		wantReturns(t, "first acquire", probe(t, tp.rdb, "lease_acquire", keys, "a", 1000, 0, 0), "true", "1", "true")
		// A retried call by the same owner refreshes the TTL and draws no second token.
		tp.rdb.PExpire(bg(), lease, 100*time.Millisecond)
		wantReturns(t, "same owner again", probe(t, tp.rdb, "lease_acquire", keys, "a", 5000, 0, 0), "true", "1", "false")
		if n, _ := tp.rdb.Get(bg(), fence).Int64(); n != 1 {
			t.Fatalf("fence counter %d after a retried acquire, want 1", n)
		}
		if ttl := tp.rdb.PTTL(bg(), lease).Val(); ttl < 4*time.Second {
			t.Fatalf("a retried acquire left TTL %s", ttl)
		}
		held := probe(t, tp.rdb, "lease_acquire", keys, "b", 1000, 0, 0)
		if remaining, _ := strconv.Atoi(held[1]); len(held) != 2 || held[0] != "false" || remaining <= 0 || remaining > 5000 {
			t.Fatalf("acquire of a held lease returned %q", held)
		}
		wantReturns(t, "holder", probe(t, tp.rdb, "lease_holder", []string{lease}), "a")

		// Another owner can neither renew nor release; nothing changes.
		tp.rdb.PExpire(bg(), lease, 2*time.Second)
		wantReturns(t, "renew by another owner", probe(t, tp.rdb, "lease_renew", []string{lease}, "b", 60000), "false")
		if ttl := tp.rdb.PTTL(bg(), lease).Val(); ttl > 2*time.Second {
			t.Fatalf("another owner's renew set TTL %s", ttl)
		}
		wantReturns(t, "release by another owner", probe(t, tp.rdb, "lease_release", []string{lease}, "b"), "false")
		wantReturns(t, "holder after refused calls", probe(t, tp.rdb, "lease_holder", []string{lease}), "a")

		wantReturns(t, "renew by the owner", probe(t, tp.rdb, "lease_renew", []string{lease}, "a", 60000), "true")
		if ttl := tp.rdb.PTTL(bg(), lease).Val(); ttl <= 59*time.Second {
			t.Fatalf("the owner's renew left TTL %s", ttl)
		}
		wantReturns(t, "release by the owner", probe(t, tp.rdb, "lease_release", []string{lease}, "a"), "true")
		wantReturns(t, "holder after release", probe(t, tp.rdb, "lease_holder", []string{lease}), "false")
		wantReturns(t, "release again", probe(t, tp.rdb, "lease_release", []string{lease}, "a"), "false")
		wantReturns(t, "renew after release", probe(t, tp.rdb, "lease_renew", []string{lease}, "a", 1000), "false")
		if tp.rdb.Exists(bg(), lease).Val() != 0 {
			t.Fatal("a renew after release recreated the lease")
		}
		wantReturns(t, "next acquire", probe(t, tp.rdb, "lease_acquire", keys, "b", 1000, 0, 0), "true", "2", "true")
		wantReturns(t, "fence_last", probe(t, tp.rdb, "fence_last", []string{fence}), "2")
		wantReturns(t, "fence_last of a fresh counter", probe(t, tp.rdb, "fence_last", []string{c.FenceKey("fresh")}), "0")
		wantReturns(t, "fence_next", probe(t, tp.rdb, "fence_next", []string{c.FenceKey("slots")}), "1")
		wantReturns(t, "fence_next again", probe(t, tp.rdb, "fence_next", []string{c.FenceKey("slots")}), "2")
		// A retry by the holder after its counter was lost cannot know its token: nil, never a new one.
		tp.rdb.Del(bg(), fence)
		wantReturns(t, "same owner again, counter lost", probe(t, tp.rdb, "lease_acquire", keys, "b", 1000, 0, 0), "true", "nil", "false")
		if tp.rdb.Exists(bg(), fence).Val() != 0 {
			t.Fatal("a retried acquire drew a token")
		}
	})
}

func TestProtocolFenceTTL(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		keys := []string{c.LeaseKey("r"), c.FenceKey("r")}
		probe(t, tp.rdb, "lease_acquire", keys, "a", 1000, 3600000, 0)
		if ttl := tp.rdb.PTTL(bg(), keys[1]).Val(); ttl <= 59*time.Minute {
			t.Fatalf("fence counter TTL %s, want about 1h", ttl)
		}
		probe(t, tp.rdb, "lease_release", keys[:1], "a")
		// fence_ttl_ms 0 leaves the counter's TTL as it is.
		probe(t, tp.rdb, "lease_acquire", keys, "b", 1000, 0, 0)
		if ttl := tp.rdb.PTTL(bg(), keys[1]).Val(); ttl <= 59*time.Minute {
			t.Fatalf("an acquire without fence TTL changed the counter's TTL to %s", ttl)
		}
	})
}

// The floor keeps tokens above what a record has seen, whatever happened to the counter.
func TestProtocolFloor(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		lease, fence, record := c.LeaseKey("r"), c.FenceKey("r"), c.Key("r", "record")
		keys := []string{lease, fence}
		probe(t, tp.rdb, "fence_record", []string{record}, 7, "a")
		wantReturns(t, "fence_seen", probe(t, tp.rdb, "fence_seen", []string{record}), "7")
		wantReturns(t, "fence_seen of a record without fence", probe(t, tp.rdb, "fence_seen", []string{c.Key("r", "none")}), "0")

		// The counter is lost while the record holds token 7: the next token is 8, not 1.
		wantReturns(t, "acquire with floor 7, no counter", probe(t, tp.rdb, "lease_acquire", keys, "b", 1000, 0, 7), "true", "8", "true")
		if n, _ := tp.rdb.Get(bg(), fence).Int64(); n != 8 {
			t.Fatalf("fence counter %d, want 8", n)
		}
		probe(t, tp.rdb, "lease_release", keys[:1], "b")

		// A counter below the floor jumps above it and keeps its TTL.
		tp.rdb.Set(bg(), fence, 3, time.Hour)
		wantReturns(t, "acquire with floor 7, counter 3", probe(t, tp.rdb, "lease_acquire", keys, "c", 1000, 0, 7), "true", "8", "true")
		if ttl := tp.rdb.PTTL(bg(), fence).Val(); ttl <= 59*time.Minute {
			t.Fatalf("raising the counter to the floor changed its TTL to %s", ttl)
		}
		probe(t, tp.rdb, "lease_release", keys[:1], "c")

		// A floor below the counter changes nothing; an absent floor counts as 0.
		wantReturns(t, "acquire with floor 2, counter 8", probe(t, tp.rdb, "lease_acquire", keys, "d", 1000, 0, 2), "true", "9", "true")
		probe(t, tp.rdb, "lease_release", keys[:1], "d")
		wantReturns(t, "acquire without floor", probe(t, tp.rdb, "lease_acquire", keys, "e", 1000, 0), "true", "10", "true")
	})
}

// The floor through the Go API: TryAcquire with WithTokenFloor.
func TestTryAcquireTokenFloor(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		l, _ := c.TryAcquire(bg(), "r", time.Second)
		_ = l.Release(bg())
		tp.rdb.Del(bg(), c.FenceKey("r"))
		l, err := c.TryAcquire(bg(), "r", time.Second, WithTokenFloor(7))
		if err != nil || l.Token != 8 {
			t.Fatalf("acquire with floor 7 after the counter was lost: %+v %v", l, err)
		}
		if info, _ := c.Inspect(bg(), "r"); info.Fence != 8 {
			t.Fatalf("inspect after a floored acquire: %+v", info)
		}
	})
}

func TestProtocolFenceCheck(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		record := c.Key("r", "record")
		check := func(token int64, owner string) []string {
			return probe(t, tp.rdb, "fence_check", []string{record}, token, owner)
		}
		wantReturns(t, "check of a record that does not exist", check(1, "a"), "nil")
		if tp.rdb.Exists(bg(), record).Val() != 0 {
			t.Fatal("fence_check created the record")
		}
		tp.rdb.HSet(bg(), record, "status", "x")
		wantReturns(t, "check of a record without fence", check(1, "a"), "nil")

		wantReturns(t, "fence_record", probe(t, tp.rdb, "fence_record", []string{record}, 5, "a"))
		before := tp.rdb.HGetAll(bg(), record).Val()
		if before[FieldFenceToken] != "5" || before[FieldFenceOwner] != "a" || before["status"] != "x" {
			t.Fatalf("record after fence_record: %v", before)
		}
		wantReturns(t, "a lower token", check(4, "z"), "5")
		wantReturns(t, "the same token from another owner", check(5, "b"), "5")
		wantReturns(t, "the same token and owner again", check(5, "a"), "nil")
		wantReturns(t, "a higher token", check(6, "c"), "nil")
		if after := tp.rdb.HGetAll(bg(), record).Val(); len(after) != len(before) || after[FieldFenceToken] != "5" || after[FieldFenceOwner] != "a" {
			t.Fatalf("fence_check wrote: %v -> %v", before, after)
		}
		// A sealed record refuses its own token too, from its last owner as from anyone; a higher
		// token still passes, and the token stays.
		wantReturns(t, "sealed before the seal", probe(t, tp.rdb, "fence_sealed", []string{record}), "false")
		wantReturns(t, "fence_seal", probe(t, tp.rdb, "fence_seal", []string{record}))
		wantReturns(t, "sealed", probe(t, tp.rdb, "fence_sealed", []string{record}), "true")
		wantReturns(t, "the last owner after the seal", check(5, "a"), "5")
		wantReturns(t, "a higher token after the seal", check(6, "a"), "nil")
		if got := tp.rdb.HGet(bg(), record, FieldFenceToken).Val(); got != "5" {
			t.Fatalf("the seal changed the token to %q", got)
		}
		probe(t, tp.rdb, "fence_record", []string{record}, 6, "a")
		wantReturns(t, "sealed after a new record", probe(t, tp.rdb, "fence_sealed", []string{record}), "false")
		// Tokens are written as integers, never in exponent form.
		probe(t, tp.rdb, "fence_record", []string{record}, "1000000000000001", "d")
		if got := tp.rdb.HGet(bg(), record, FieldFenceToken).Val(); got != "1000000000000001" {
			t.Fatalf("a large token was written as %q", got)
		}
	})
}

func TestProtocolHeartbeat(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		record := c.Key("r", "job")
		wantReturns(t, "stamp of a missing hash", probe(t, tp.rdb, "heartbeat_stamp", []string{record}, "beat_at", 123), "false")
		if tp.rdb.Exists(bg(), record).Val() != 0 {
			t.Fatal("heartbeat_stamp created the hash")
		}
		tp.rdb.HSet(bg(), record, "status", "processing")
		wantReturns(t, "stamp", probe(t, tp.rdb, "heartbeat_stamp", []string{record}, "beat_at", 123), "true")
		if got := tp.rdb.HGet(bg(), record, "beat_at").Val(); got != "123" {
			t.Fatalf("heartbeat field %q", got)
		}
	})
}

// The fragment defines locals only: Redis 7 refuses scripts that create globals, and a global
// would leak between scripts on older servers.
func TestProtocolDefinesNoGlobals(t *testing.T) {
	t.Parallel()
	for i, line := range strings.Split(protocol, "\n") {
		if regexp.MustCompile(`^\s*function\b`).MatchString(line) || regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*\s*=`).MatchString(line) {
			t.Errorf("protocol.lua:%d assigns a global: %s", i+1, line)
		}
	}
	db := redistest.NewDB(t)
	s := NewProtocolScript(`
-- KEYS: none; returns the protocol names visible as globals
local leaked = {}
for _, name in ipairs({'lease_acquire', 'lease_renew', 'lease_release', 'lease_holder', 'heartbeat_stamp',
    'fence_last', 'fence_seen', 'fence_check', 'fence_record', 'fence_seal', 'fence_sealed', 'fence_next'}) do
  if rawget(_G, name) ~= nil then leaked[#leaked + 1] = name end
end
return leaked`)
	leaked, err := s.Run(bg(), db.Client, nil).StringSlice()
	if err != nil || len(leaked) != 0 {
		t.Fatalf("globals %v %v", leaked, err)
	}
}

// The fence fields are named in protocol.lua only, with the Go constants' names; every locking
// script starts with the fragment.
func TestProtocolIsTheOnlySpelling(t *testing.T) {
	t.Parallel()
	for _, field := range []string{FieldFenceToken, FieldFenceOwner} {
		if !strings.Contains(protocol, "'"+field+"'") {
			t.Errorf("protocol.lua does not use %s", field)
		}
	}
	entries, err := scriptFS.ReadDir("scripts")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "protocol.lua" {
			continue
		}
		src := mustScript(e.Name())
		if strings.Contains(src, "_fence_") || strings.Contains(src, "INCR") {
			t.Errorf("%s spells the protocol by hand", e.Name())
		}
	}
	onProtocol := func(body string) string { return redis.NewScript(Compose(body, protocol)).Hash() }
	for name, c := range map[string]struct {
		s    *redis.Script
		body string
	}{
		"acquire":     {acquireScript, mustScript("acquire.lua")},
		"renew":       {renewScript, mustScript("renew.lua")},
		"release":     {releaseScript, mustScript("release.lua")},
		"inspect":     {inspectScript, mustScript("inspect.lua")},
		"fenced_hset": {fencedHSet.script, fencePrelude + "\n" + mustScript("fenced_hset.lua")},
		"fenced_set":  {fencedSet.script, fencePrelude + "\n" + mustScript("fenced_set.lua")},
	} {
		if c.s.Hash() != onProtocol(c.body) {
			t.Errorf("%s is not built on the protocol fragment", name)
		}
	}
}
