package engine

import (
	"context"
	"sync"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// A rate-limited fair type's key whose next token is not due is parked in the admission layer
// (fair_admit.lua) instead of admitted: its jobs wait there, none bounces through asynq. Every
// admission script readies the parked keys that became due, and, so that a parked key is admitted
// in its turn when nothing else happens, a process that has used such a type pumps it when its
// first parked key is due (at least every parkedPumpMost) until the stack closes. Any process may
// pump: each admission is one atomic script.

// Bounds of a parked pump's period: a fast rate is not pumped faster than parkedPumpLeast, a slow
// one at least every parkedPumpMost (its parked keys come back that late at worst).
const (
	parkedPumpLeast = 5 * time.Millisecond
	parkedPumpMost  = 500 * time.Millisecond
)

// parkedPumps are the process's pumps of rate-limited fair types, one per type, started at the
// type's first admission here.
type parkedPumps struct {
	started sync.Map // type -> struct{}
	stop    chan struct{}
	stopped sync.Once
	wg      sync.WaitGroup
}

// pumpParked starts tc's pump unless it runs (or tc parks nothing: no fair dispatch or no rate).
func (s *Stack) pumpParked(tc TaskConfig) {
	if tc.Fair == nil || tc.Limit.Rate <= 0 || s.stopping.Load() {
		return
	}
	if _, running := s.parked.started.LoadOrStore(tc.Type, struct{}{}); running {
		return
	}
	s.parked.wg.Add(1)
	go s.runParkedPump(tc)
}

// runParkedPump admits what tc's parked keys allow once they are due, until the stack closes. It
// sleeps until the first parked key is due (a key released late would lose that time from its
// rate: GCRA counts from the admission), at most half an interval when none is parked.
func (s *Stack) runParkedPump(tc TaskConfig) {
	defer s.parked.wg.Done()
	idle := min(max(tc.Limit.withDefaults().interval()/2, parkedPumpLeast), parkedPumpMost)
	timer := time.NewTimer(idle)
	defer timer.Stop()
	for {
		select {
		case <-s.parked.stop:
			return
		case <-timer.C:
		}
		timer.Reset(s.pumpParkedOnce(tc, idle))
	}
}

// pumpParkedOnce admits and delivers what tc's due keys allow, and says how long to sleep next.
func (s *Stack) pumpParkedOnce(tc TaskConfig, idle time.Duration) time.Duration {
	next := idle
	for _, sh := range s.fairShardsOf(tc) {
		next = min(next, s.pumpParkedShard(tc, sh, idle))
	}
	return next
}

// pumpParkedShard is pumpParkedOnce for shard sh of tc.
func (s *Stack) pumpParkedShard(tc TaskConfig, sh jobstore.FairShard, idle time.Duration) time.Duration {
	ctx, cancel := context.WithTimeout(context.Background(), fairWaitTimeout)
	defer cancel()
	entries, err := s.pumpThrough(ctx, sh, s.fairPolicy(tc, sh))
	s.deliverAdmittedAtOnce(ctx, tc, entries)
	if err != nil {
		return idle
	}
	due, parked, err := s.store.FairNextDue(ctx, sh)
	if err != nil || !parked {
		return idle
	}
	// due is in Redis's clock: this process's is ClockOffset behind it.
	wait := time.Until(time.UnixMilli(due).Add(-s.ClockOffset()))
	return min(max(wait, parkedPumpLeast), parkedPumpMost)
}

// closeParkedPumps stops the pumps and waits for them.
func (s *Stack) closeParkedPumps() {
	s.parked.stopped.Do(func() { close(s.parked.stop) })
	s.parked.wg.Wait()
}
