package jobstore

import "strconv"

// A job's first events are not stored while its record says them: the record's
// FieldTimelineFolded ("<k>:<worker>") says that it stands for the first k of enqueued,
// lease_acquired and done of its first run, and names the worker that enqueued it, the one fact
// the record lacks. create.lua writes k = 1 instead of an enqueued event; the first run's start
// makes it 2 instead of storing lease_acquired, when nothing was stored in between; its finish
// makes it 3 instead of storing done, on the happy path. A job that waited for its key's
// admission (fair dispatch) has a FieldFairKey and the mark "w<k>:<worker>": its sequence is
// enqueued, waiting, lease_acquired, done, and create.lua writes k = 2 instead of both first
// events. Any other event is stored, at position k on. A later run writes the first run's
// lease_acquired out before replacing its fields (start.lua), so the record never stands for an
// event it no longer describes. Those events are rebuilt here on read; readers see the same
// events, at the same positions, either way. A job done on its happy path writes no timeline list
// at all (no JSON in Lua on that path), and keeps no list for its retention.

// foldedCount is the most events a record stands for (one more after a waiting).
const foldedCount = 3

// foldedFields are the record's fields that foldedEvents reads (TimelineSince passes them to
// timeline.lua, which returns them in this order).
var foldedFields = []string{FieldTimelineFolded, FieldCreatedAt, FieldStartedAt, FieldFencing, FieldWorkerID,
	FieldFinishedAt, FieldFairKey}

// foldedArgs are foldedFields as script arguments.
var foldedArgs = func() []any {
	out := make([]any, len(foldedFields))
	for i, f := range foldedFields {
		out[i] = f
	}
	return out
}()

// implied reads a record's mark: how many first events it stands for, who enqueued the job, and
// whether the job waited for its key (a "w" mark: a waiting event after the enqueued one). A mark
// without the count (written before it was) stands for all three.
func implied(mark string) (k int64, by string, waited bool) {
	if len(mark) >= 3 && mark[0] == 'w' && mark[2] == ':' && mark[1] >= '0' && mark[1] <= '4' {
		return int64(mark[1] - '0'), mark[3:], true
	}
	if len(mark) >= 2 && mark[1] == ':' && mark[0] >= '0' && mark[0] <= '3' {
		return int64(mark[0] - '0'), mark[2:], false
	}
	if mark == "" {
		return 0, "", false
	}
	return foldedCount, mark, false
}

// foldedEvents rebuilds the events job id's record f stands for, from position from on; nil when
// it stands for none.
func foldedEvents(id string, f map[string]string, from int64) []Event {
	k, by, waited := implied(f[FieldTimelineFolded])
	if k == 0 {
		return nil
	}
	token, _ := strconv.ParseInt(f[FieldFencing], 10, 64)
	first := DeliveryID(id, 1)
	created := int64(atoi(f[FieldCreatedAt]))
	all := make([]Event, 0, foldedCount+1)
	all = append(all, Event{At: created, Event: "enqueued", Delivery: first, Worker: by})
	if waited {
		// The wait began with the job (its create and its place in the key's list are one request).
		all = append(all, Event{At: created, Event: "waiting", Detail: WaitingDetail(f[FieldFairKey]), Worker: by})
	}
	all = append(all,
		Event{At: int64(atoi(f[FieldStartedAt])), Event: "lease_acquired", Delivery: first, Token: token,
			Attempt: 1, Worker: f[FieldWorkerID]},
		Event{At: int64(atoi(f[FieldFinishedAt])), Event: "done", Delivery: first, Token: token, Worker: f[FieldWorkerID]})
	for i := range all {
		all[i].Seq = int64(i)
	}
	k, from = min(k, int64(len(all))), max(from, 0)
	if from >= k {
		return nil
	}
	return append([]Event(nil), all[from:k]...)
}

// WaitingDetail is the detail of the waiting event of a job that waits for its turn on key.
func WaitingDetail(key string) string { return "for its turn on key " + key }
