package jobstore

import (
	"testing"
	"time"
)

func take(t *testing.T, s *Store, k LimitKeys, owner string, a LimitArgs) Take {
	t.Helper()
	a.Owner = owner
	tk, err := s.TakeLimit(bg, k, a)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// The semaphore: N holders at once with rising tokens, a retried take by the same owner gets its
// slot and token again, a full key answers when its earliest holder expires, a released slot is
// free at once, a holder that stops renewing is pruned after its TTL, and every key expires.
func TestLimitSlotsAreLeasesWithTokens(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	k := s.LimitKeys("t", "tenant-a")
	a := LimitArgs{SlotTTL: 300 * time.Millisecond, Concurrency: 2}
	t1, t2 := take(t, s, k, "o1", a), take(t, s, k, "o2", a)
	if t1.State != Taken || t2.State != Taken || t2.Token != t1.Token+1 || t2.Held != 2 {
		t.Fatalf("takes %+v %+v", t1, t2)
	}
	if again := take(t, s, k, "o1", a); again.State != Taken || again.Token != t2.Token || again.Held != 2 {
		t.Fatalf("retried take %+v", again) // the counter's current value, nothing drawn again
	}
	full := take(t, s, k, "o3", a)
	if full.State != Full || full.Held != 2 || full.Wait <= 0 || full.Wait > 300*time.Millisecond {
		t.Fatalf("third take %+v", full)
	}
	if err := s.ReleaseLimit(bg, LimitRelease{Keys: k, Owner: "o1"}); err != nil {
		t.Fatal(err)
	}
	if t3 := take(t, s, k, "o3", a); t3.State != Taken || t3.Token != t2.Token+1 {
		t.Fatalf("take after a release %+v", t3)
	}
	// o2 keeps renewing, o3 stops: only o3's slot is recovered.
	deadline := time.Now().Add(5 * time.Second)
	for {
		held, errs := s.RenewLimits(bg, []LimitRenewal{{Keys: k, Owner: "o2", TTL: a.SlotTTL}})
		if errs[0] != nil || !held[0] {
			t.Fatalf("renewal of o2: %v %v", held, errs)
		}
		if tk := take(t, s, k, "o4", a); tk.State == Taken {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("o3's slot was never recovered")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if held, _ := s.RenewLimits(bg, []LimitRenewal{{Keys: k, Owner: "o3", TTL: a.SlotTTL}}); held[0] {
		t.Fatal("the pruned holder renewed its slot")
	}
	for _, key := range []string{k.Holders, k.Fence} {
		if ttl := s.rdb.PTTL(bg, key).Val(); ttl <= 0 {
			t.Errorf("%s has no TTL (%s)", key, ttl)
		}
	}
}

// GCRA: a rate of 10 per second with burst 1 lets one start per 100 ms; a caller that waits
// reserves the next start (and the one after it is 100 ms later); a push-back (an upstream's 429)
// makes the key's next starts wait for it, with or without a rate, and expires.
func TestLimitRateAndPushBack(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	k := s.LimitKeys("t", "host")
	a := LimitArgs{Interval: 100 * time.Millisecond}
	if tk := take(t, s, k, "o1", a); tk.State != Taken {
		t.Fatalf("first start %+v", tk)
	}
	tk := take(t, s, k, "o2", a)
	if tk.State != RateWait || tk.Wait <= 0 || tk.Wait > 100*time.Millisecond {
		t.Fatalf("second start at once %+v", tk)
	}
	time.Sleep(tk.Wait)
	if tk := take(t, s, k, "o2", a); tk.State != Taken {
		t.Fatalf("second start after the wait %+v", tk)
	}
	if ttl := s.rdb.PTTL(bg, k.Arrival).Val(); ttl <= 0 || ttl > 2*time.Second {
		t.Fatalf("arrival time TTL %s", ttl)
	}
	// Reservations, on a key of their own at one start a second (a loaded machine's pauses between
	// the calls, up to half a second, do not change what each call finds): the first start is
	// now, the second reserved a second later, the third would wait two: past MaxWait.
	r := s.LimitKeys("t", "reserved")
	ra := LimitArgs{Interval: time.Second, MaxWait: 1500 * time.Millisecond}
	r0, r1, r2 := take(t, s, r, "o3", ra), take(t, s, r, "o4", ra), take(t, s, r, "o5", ra)
	if r0.State != Taken || r1.State != Taken || r1.Wait <= 500*time.Millisecond || r1.Wait > time.Second ||
		r2.State != RateWait || r2.Wait < r1.Wait+500*time.Millisecond {
		t.Fatalf("reserved start %+v, next %+v", r1, r2)
	}

	p := s.LimitKeys("t", "pushed")
	if err := s.ReleaseLimit(bg, LimitRelease{Keys: p, Owner: "o1", PushBack: 2 * time.Second}); err != nil {
		t.Fatal(err)
	}
	tk = take(t, s, p, "o2", LimitArgs{Concurrency: 5, SlotTTL: time.Second})
	if tk.State != RateWait || tk.Wait < 1500*time.Millisecond || tk.Wait > 2*time.Second {
		t.Fatalf("start after a push-back %+v", tk)
	}
	if n := s.rdb.ZCard(bg, p.Holders).Val(); n != 0 {
		t.Fatalf("a refused start took a slot: %d holders", n)
	}
}
