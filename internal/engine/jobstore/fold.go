package jobstore

import "strconv"

// A job's first events are not stored while its record says them: the record's
// FieldTimelineFolded ("<k>:<worker>") says that it stands for the first k of enqueued,
// lease_acquired and done of its first run, and names the worker that enqueued it, the one fact
// the record lacks. create.lua writes k = 1 instead of an enqueued event; the first run's start
// makes it 2 instead of storing lease_acquired, when nothing was stored in between; its finish
// makes it 3 instead of storing done, on the happy path. Any other event is stored, at position
// k on. A later run writes the first run's lease_acquired out before replacing its fields
// (start.lua), so the record never stands for an event it no longer describes. Those events are
// rebuilt here on read; readers see the same events, at the same positions, either way. A job
// done on its happy path writes no timeline list at all (no JSON in Lua on that path), and
// keeps no list for its retention.

// foldedCount is the most events a record stands for.
const foldedCount = 3

// foldedFields are the record's fields that foldedEvents reads (TimelineSince passes them to
// timeline.lua, which returns them in this order).
var foldedFields = []string{FieldTimelineFolded, FieldCreatedAt, FieldStartedAt, FieldFencing, FieldWorkerID, FieldFinishedAt}

// foldedArgs are foldedFields as script arguments.
var foldedArgs = func() []any {
	out := make([]any, len(foldedFields))
	for i, f := range foldedFields {
		out[i] = f
	}
	return out
}()

// implied reads a record's mark: how many first events it stands for, and who enqueued the job.
// A mark without the count (written before it was) stands for all three.
func implied(mark string) (int64, string) {
	if len(mark) >= 2 && mark[1] == ':' && mark[0] >= '0' && mark[0] <= '3' {
		return int64(mark[0] - '0'), mark[2:]
	}
	if mark == "" {
		return 0, ""
	}
	return foldedCount, mark
}

// foldedEvents rebuilds the events job id's record f stands for, from position from on; nil when
// it stands for none.
func foldedEvents(id string, f map[string]string, from int64) []Event {
	k, by := implied(f[FieldTimelineFolded])
	if k == 0 {
		return nil
	}
	token, _ := strconv.ParseInt(f[FieldFencing], 10, 64)
	first := DeliveryID(id, 1)
	all := [foldedCount]Event{
		{Seq: 0, At: int64(atoi(f[FieldCreatedAt])), Event: "enqueued", Delivery: first, Worker: by},
		{Seq: 1, At: int64(atoi(f[FieldStartedAt])), Event: "lease_acquired", Delivery: first, Token: token,
			Attempt: 1, Worker: f[FieldWorkerID]},
		{Seq: 2, At: int64(atoi(f[FieldFinishedAt])), Event: "done", Delivery: first, Token: token, Worker: f[FieldWorkerID]},
	}
	from = max(from, 0)
	if from >= k {
		return nil
	}
	return append([]Event(nil), all[from:k]...)
}
