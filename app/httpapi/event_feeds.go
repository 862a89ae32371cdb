package httpapi

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/jobguard/jobguard/app/problem"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// feedKeep bounds the events a feed holds for the streams that join it (the timeline's cap is
// smaller): a stream resuming before the oldest held starts there, as one resuming before the
// oldest stored event does.
const feedKeep = 1000

// streamsRetryAfter is the Retry-After of a stream refused by a cap, in seconds.
const streamsRetryAfter = "5"

// timelineReader is the read a feed polls (jobstore.Store.TimelineSince).
type timelineReader interface {
	TimelineSince(ctx context.Context, id string, n int64) (jobstore.TimelinePage, error)
}

// feeds shares one poller per job among the open event streams of that job, so that Redis pays
// per job followed, not per stream; and it counts the open streams, per tenant and in all, to
// refuse one past either cap. Both are per process.
type feeds struct {
	store timelineReader
	ctx   context.Context // the app's streams context: every poller stops with it
	poll  time.Duration
	// timeout bounds each read (REQUEST_TIMEOUT).
	timeout          time.Duration
	perTenant, total int

	mu      sync.Mutex
	byJob   map[string]*feed
	tenants map[string]int
	open    int
}

func newFeeds(ctx context.Context, store timelineReader, poll, timeout time.Duration, perTenant, total int) *feeds {
	return &feeds{store: store, ctx: ctx, poll: poll, timeout: timeout, perTenant: perTenant, total: total,
		byJob: map[string]*feed{}, tenants: map[string]int{}}
}

// admit takes a place for a stream of tenant (a key of the caller's: the tenant, or the client's
// address when the API is open), or refuses with 429 too_many_streams. release gives it back.
func (h *feeds) admit(tenant string) (release func(), err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tenants[tenant] >= h.perTenant {
		return nil, &problem.HTTPError{Status: http.StatusTooManyRequests, Code: problem.CodeTooManyStreams, Field: "Authorization",
			Detail: "the tenant has as many event streams open as it may (EVENT_STREAMS_PER_TENANT); close one first"}
	}
	if h.open >= h.total {
		return nil, &problem.HTTPError{Status: http.StatusTooManyRequests, Code: problem.CodeTooManyStreams,
			Detail: "this server has as many event streams open as it may (EVENT_STREAMS_MAX); retry later"}
	}
	h.tenants[tenant]++
	h.open++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.open--
			if h.tenants[tenant]--; h.tenants[tenant] <= 0 {
				delete(h.tenants, tenant)
			}
		})
	}, nil
}

// Open is how many streams are open now.
func (h *feeds) Open() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.open
}

// Polling is how many jobs are polled now (one poller each).
func (h *feeds) Polling() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byJob)
}

// join gives the stream job id's feed, starting its poller when it is the first.
func (h *feeds) join(id string) *feed {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := h.byJob[id]
	if f == nil {
		f = &feed{id: id, changed: make(chan struct{}), quit: make(chan struct{})}
		h.byJob[id] = f
		go h.run(f)
	}
	f.subs++
	return f
}

// leave takes the stream off its feed; the last one stops the poller.
func (h *feeds) leave(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if f.subs--; f.subs == 0 && h.byJob[f.id] == f {
		delete(h.byJob, f.id)
		close(f.quit)
	}
}

// drop forgets a feed that has no more to say (ended, failed or stopped); streams still on it
// read its last state, and a stream that comes later starts a new one.
func (h *feeds) drop(f *feed) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.byJob[f.id] == f {
		delete(h.byJob, f.id)
	}
}

// run polls the job's status and new events (one round trip, jobstore.Store.TimelineSince) every
// poll interval, from the first stream's join to the last one's leave, the job's end, a failed
// read or the app's stop.
func (h *feeds) run(f *feed) {
	defer h.drop(f)
	tick := time.NewTicker(h.poll)
	defer tick.Stop()
	next := int64(0) // the first read takes the whole kept timeline: later streams may want it
	for {
		rctx, cancel := context.WithTimeout(h.ctx, h.timeout)
		p, err := h.store.TimelineSince(rctx, f.id, next)
		cancel()
		if len(p.Events) > 0 {
			next = p.Events[len(p.Events)-1].Seq + 1
		}
		if f.update(p, next, err) {
			return
		}
		select {
		case <-h.ctx.Done():
			f.update(jobstore.TimelinePage{}, next, h.ctx.Err())
			return
		case <-f.quit:
			return
		case <-tick.C:
		}
	}
}

// feed is one job's poller's state, which its streams read.
type feed struct {
	id   string
	quit chan struct{} // closed by the last stream's leave
	subs int           // under feeds.mu

	mu      sync.Mutex
	read    bool             // the first read is done
	events  []jobstore.Event // held events, oldest first, at most feedKeep
	end     int64            // the position after the last event read
	status  jobstore.Status
	err     error         // the poller stopped on it (Redis failed, the job is gone, the app stops)
	changed chan struct{} // closed at each update, then replaced
}

// update records a read and wakes the streams; true when the feed has no more to say.
func (f *feed) update(p jobstore.TimelinePage, end int64, err error) (done bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil && f.read && len(p.Events) == 0 && p.Status == f.status {
		return false // nothing new: nobody is woken
	}
	f.read = true
	if err != nil {
		f.err = err
	} else {
		f.status = p.Status
		f.events = append(f.events, p.Events...)
		if n := len(f.events) - feedKeep; n > 0 {
			f.events = append(f.events[:0:0], f.events[n:]...)
		}
		f.end = end
	}
	close(f.changed)
	f.changed = make(chan struct{})
	return err != nil || f.status.Terminal()
}

// feedView is what a stream reads of its feed.
type feedView struct {
	events []jobstore.Event // held events from the stream's position on
	status jobstore.Status
	err    error // the feed failed: the stream ends without `end`
	read   bool  // false until the feed's first read
	// changed is closed at the feed's next update.
	changed <-chan struct{}
}

// since is what a stream at position next has to write: the held events from next on (from the
// oldest held when next is older), the status, the feed's error, and the channel closed at the
// next update. A position past the job's last event is taken as the position after it (next is
// moved there).
func (f *feed) since(next *int64) feedView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := feedView{read: f.read, changed: f.changed}
	if !f.read {
		return v
	}
	if *next > f.end {
		*next = f.end
	}
	for i, e := range f.events {
		if e.Seq >= *next {
			v.events = f.events[i:len(f.events):len(f.events)]
			break
		}
	}
	v.status, v.err = f.status, f.err
	return v
}
