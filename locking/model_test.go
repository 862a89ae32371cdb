package locking

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/redistest"
)

// model is what Redis must agree with: who holds each resource, the last token drawn (a write by a
// lower token is refused), and the fence each target was last written with.
type model struct {
	holder    map[string]string
	fence     map[string]int64
	written   map[string]Fence
	hasWriter map[string]bool
}

var modelRun atomic.Int64

// checkModel interprets ops as a sequence of acquire, renew, release, expire and write operations
// by three clients on two resources and fails on the first answer that differs from the model.
func checkModel(t *testing.T, rdb redis.UniversalClient, ops []byte) {
	c := New(rdb, WithPrefix(fmt.Sprintf("model%d", modelRun.Add(1))))
	m := model{holder: map[string]string{}, fence: map[string]int64{}, written: map[string]Fence{}, hasWriter: map[string]bool{}}
	resources := []string{"r0", "r1"}
	var leases []*Lease // every lease ever granted, stale ones included
	for i := 0; i+2 < len(ops); i += 3 {
		op, a, b := ops[i]%5, int(ops[i+1]), int(ops[i+2])
		res := resources[a%2]
		step := fmt.Sprintf("op %d (%d %d %d)", i/3, op, a, b)
		switch op {
		case 0: // acquire
			l, err := c.TryAcquire(bg(), res, 10*time.Second)
			if m.holder[res] != "" {
				if !errors.Is(err, ErrNotAcquired) {
					t.Fatalf("%s: acquire of held %s: %v", step, res, err)
				}
				continue
			}
			if err != nil || l.Token != m.fence[res]+1 {
				t.Fatalf("%s: acquire of free %s: %+v %v (model token %d)", step, res, l, err, m.fence[res]+1)
			}
			m.fence[res], m.holder[res] = l.Token, l.Owner
			leases = append(leases, l)
		case 1, 2: // renew or release a lease, current or stale
			if len(leases) == 0 {
				continue
			}
			l := leases[b%len(leases)]
			current := m.holder[l.Resource] == l.Owner
			var err error
			if op == 1 {
				err = l.Renew(bg())
			} else {
				err = l.Release(bg())
			}
			if current && l.Err() == nil && err != nil || !current && !errors.Is(err, ErrLeaseLost) {
				t.Fatalf("%s: op %d of lease %d on %s (current %v): %v", step, op, l.Token, l.Resource, current, err)
			}
			if op == 2 && current {
				m.holder[l.Resource] = ""
			}
		case 3: // the lease's TTL runs out
			rdb.Del(bg(), c.LeaseKey(res))
			m.holder[res] = ""
		case 4: // a fenced write by any lease ever granted
			if len(leases) == 0 {
				continue
			}
			l := leases[b%len(leases)]
			w, ok := m.written[l.Resource], m.hasWriter[l.Resource]
			// A lease's fence carries the resource's counter: once a newer token was drawn, its
			// writes are refused even where that newer token has not written yet.
			allowed := l.Token >= m.fence[l.Resource] && (!ok || l.Token > w.Token || l.Token == w.Token && l.Owner == w.Owner)
			err := c.SetFields(bg(), l.Fence(), c.Key(l.Resource, "target"), 0, "v", step)
			if allowed != (err == nil) || !allowed && !errors.Is(err, ErrStaleToken) {
				t.Fatalf("%s: write by token %d on %s (last %d, allowed %v): %v", step, l.Token, l.Resource, w.Token, allowed, err)
			}
			if allowed {
				m.written[l.Resource], m.hasWriter[l.Resource] = l.Fence(), true
			}
		}
	}
}

func TestModelRandomInterleavings(t *testing.T) {
	t.Parallel()
	eachTopology(t, func(t *testing.T, tp topology) {
		for seed := uint64(0); seed < 60; seed++ {
			r := rand.New(rand.NewPCG(seed, 7))
			ops := make([]byte, 3*80)
			for i := range ops {
				ops[i] = byte(r.IntN(256))
			}
			checkModel(t, tp.rdb, ops)
		}
	})
}

// FuzzModel explores interleavings beyond the fixed seeds: go test -fuzz FuzzModel ./locking/
func FuzzModel(f *testing.F) {
	f.Add([]byte{0, 0, 0, 4, 0, 0, 3, 0, 0, 0, 0, 0, 4, 0, 0, 4, 0, 1, 1, 0, 0, 2, 0, 1})
	f.Add([]byte{0, 1, 0, 0, 1, 0, 2, 1, 0, 0, 1, 0, 4, 1, 1, 4, 1, 0})
	db := redistest.NewDB(f)
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 3*200 {
			ops = ops[:3*200]
		}
		checkModel(t, db.Client, ops)
	})
}
