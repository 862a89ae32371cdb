package locking

import (
	"errors"
	"strconv"
	"testing"
	"time"
)

func TestFencedFields(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		key := c.Key("r", "state")
		old, _ := c.TryAcquire(bg(), "r", 5*time.Second)
		if err := c.SetFields(bg(), old.Fence(), key, time.Minute, "status", "processing"); err != nil {
			t.Fatal(err)
		}
		_ = old.Release(bg())
		cur, _ := c.TryAcquire(bg(), "r", 5*time.Second)
		if err := c.SetFields(bg(), cur.Fence(), key, time.Minute, "status", "done", "result", "42"); err != nil {
			t.Fatal(err)
		}
		// The old holder wakes up and writes: rejected, nothing changed.
		err := c.SetFields(bg(), old.Fence(), key, time.Minute, "status", "failed")
		var stale *StaleError
		if !errors.As(err, &stale) || !errors.Is(err, ErrStaleToken) || stale.Current != cur.Token || stale.Token != old.Token {
			t.Fatalf("stale write: %v", err)
		}
		// The same token from another owner is stale too.
		if err := c.SetFields(bg(), Fence{Token: cur.Token, Owner: "impostor"}, key, time.Minute, "status", "x"); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("same token, other owner: %v", err)
		}
		// The same fence again (a retried write) is accepted.
		if err := c.SetFields(bg(), cur.Fence(), key, time.Minute, "status", "done"); err != nil {
			t.Fatalf("repeated write of the current fence: %v", err)
		}
		got := tp.rdb.HGetAll(bg(), key).Val()
		if got["status"] != "done" || got["result"] != "42" || got[FieldFenceToken] != itoa(cur.Token) || got[FieldFenceOwner] != cur.Owner {
			t.Fatalf("target %v", got)
		}
		if ttl := tp.rdb.PTTL(bg(), key).Val(); ttl <= 0 || ttl > time.Minute {
			t.Fatalf("ttl %s", ttl)
		}
		if err := c.SetFields(bg(), cur.Fence(), key, 0, "odd"); err == nil {
			t.Fatal("odd field list accepted")
		}
	})
}

func TestFencedValue(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		key := c.Key("r", "cache")
		a, _ := c.TryAcquire(bg(), "r", 5*time.Second)
		_ = a.Release(bg())
		b, _ := c.TryAcquire(bg(), "r", 5*time.Second)
		if err := c.SetValue(bg(), b.Fence(), key, "new", 0); err != nil {
			t.Fatal(err)
		}
		if err := c.SetValue(bg(), a.Fence(), key, "old", 0); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("stale value write: %v", err)
		}
		if v := tp.rdb.Get(bg(), key).Val(); v != "new" {
			t.Fatalf("value %q", v)
		}
		if ttl := tp.rdb.PTTL(bg(), FenceRecordKey(key)).Val(); ttl != -1 {
			t.Fatalf("fence record of a value without TTL has TTL %s", ttl)
		}
		if err := c.SetValue(bg(), b.Fence(), key, "newer", time.Minute); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{key, FenceRecordKey(key)} {
			if ttl := tp.rdb.PTTL(bg(), k).Val(); ttl <= 0 {
				t.Fatalf("%s ttl %s", k, ttl)
			}
		}
	})
}

// A caller's own fenced script: an effect and its record in one script, in the resource's slot.
func TestCustomFencedScript(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		c := tp.client()
		s := NewFencedScript(`
-- KEYS[1] fence record, KEYS[2] counter; ARGV[3] amount; returns the new total
return redis.call('INCRBY', KEYS[2], ARGV[3])`)
		keys := []string{c.Key("sku", "applied"), c.Key("sku", "total")}
		a, _ := c.TryAcquire(bg(), "sku", 5*time.Second)
		_ = a.Release(bg())
		b, _ := c.TryAcquire(bg(), "sku", 5*time.Second)
		if n, err := s.Run(bg(), tp.rdb, b.Fence(), keys, 5).Int64(); err != nil || n != 5 {
			t.Fatalf("current fence: %d %v", n, err)
		}
		if _, err := s.Run(bg(), tp.rdb, a.Fence(), keys, 5).Int64(); !errors.Is(err, ErrStaleToken) {
			t.Fatalf("stale fence: %v", err)
		}
		if n := tp.rdb.Get(bg(), keys[1]).Val(); n != "5" {
			t.Fatalf("the stale script changed the total to %s", n)
		}
	})
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
