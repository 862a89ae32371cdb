package engine

import (
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/locking"
)

// UnstartedGrace is how long a delivery must have been seen active, and listed by no live asynq
// server, before it is taken for one whose worker died before its start: two of asynq's 5 s
// heartbeats, so that a live server that took it has listed it.
const UnstartedGrace = 10 * time.Second

// UnstartedWatch notes the active deliveries that no live asynq server lists among its workers
// (Inspector.Servers), and when each was first seen so: a worker killed between asynq's dequeue
// and its start script leaves such a delivery, which no lease lapse reveals. The job level's
// rescuer and the lease level's (middleware) share it; each decides what a due delivery needs.
type UnstartedWatch struct {
	clock locking.Clock
	mu    sync.Mutex
	first map[string]time.Time // the last pass's
}

// NewUnstartedWatch returns a watch that tells time by clock.
func NewUnstartedWatch(clock locking.Clock) *UnstartedWatch {
	return &UnstartedWatch{clock: clock}
}

// UnstartedPass is one walk of the active deliveries; End keeps what it saw for the next.
type UnstartedPass struct {
	w      *UnstartedWatch
	now    time.Time
	listed map[string]bool
	err    error // the live servers could not be listed: nothing is due
	seen   map[string]time.Time
}

// Begin starts a pass: it lists the tasks the live servers say they are working on.
func (w *UnstartedWatch) Begin(insp *asynq.Inspector) *UnstartedPass {
	p := &UnstartedPass{w: w, now: w.clock.Now(), seen: map[string]time.Time{}}
	p.listed, p.err = listedByLiveServers(insp)
	return p
}

// Due reports whether active delivery id has been listed by no live server for UnstartedGrace,
// and for how long; it notes an unlisted delivery for the next pass.
func (p *UnstartedPass) Due(id string) (time.Duration, bool) {
	if p.err != nil || p.listed[id] {
		return 0, false
	}
	p.w.mu.Lock()
	first, ok := p.w.first[id]
	p.w.mu.Unlock()
	if !ok {
		first = p.now
	}
	p.seen[id] = first
	since := p.now.Sub(first)
	return since, since >= UnstartedGrace
}

// End keeps the deliveries this pass saw (a delivery it did not see starts again at zero).
func (p *UnstartedPass) End() {
	p.w.mu.Lock()
	p.w.first = p.seen
	p.w.mu.Unlock()
}

// listedByLiveServers is the set of task ids the live asynq servers say they are working on.
func listedByLiveServers(insp *asynq.Inspector) (map[string]bool, error) {
	servers, err := insp.Servers()
	if err != nil {
		return nil, err
	}
	listed := map[string]bool{}
	for _, srv := range servers {
		for _, w := range srv.ActiveWorkers {
			listed[w.TaskID] = true
		}
	}
	return listed, nil
}
