package jobstore

// A job that ends done on its happy path keeps no timeline list: finish.lua's fold sees that the
// list holds only the job's enqueued event and its one run's lease_acquired, each with what the
// record says (times, delivery, token, attempt, worker), deletes the list and marks the record
// with FieldTimelineFolded, whose value is the one fact the record lacks: the enqueuing worker
// (never empty: a job enqueued by a worker without an id keeps its list).
// The three events (enqueued, lease_acquired, done) are rebuilt here on read, at positions 0-2;
// an event pushed later (a stale write refused, a deduplicated request) goes on at 3
// (timeline_push). Readers see the same events whether or not the list was folded.

// foldedCount is how many events a folded record stands for.
const foldedCount = 3

// foldedFields are the record's fields that foldedEvents reads (TimelineSince passes them to
// timeline.lua, which returns them in this order).
var foldedFields = []string{FieldTimelineFolded, FieldCreatedAt, FieldDelivery, FieldStartedAt, FieldFencing,
	FieldAttempt, FieldWorkerID, FieldFinishedAt}

// foldedArgs are foldedFields as script arguments.
var foldedArgs = func() []any {
	out := make([]any, len(foldedFields))
	for i, f := range foldedFields {
		out[i] = f
	}
	return out
}()

// foldedEvents rebuilds the events a folded record stands for, from position from on; nil when
// the record is not folded.
func foldedEvents(f map[string]string, from int64) []Event {
	by, ok := f[FieldTimelineFolded]
	if !ok {
		return nil
	}
	token := int64(atoi(f[FieldFencing]))
	all := [foldedCount]Event{
		{Seq: 0, At: int64(atoi(f[FieldCreatedAt])), Event: "enqueued", Delivery: f[FieldDelivery], Worker: by},
		{Seq: 1, At: int64(atoi(f[FieldStartedAt])), Event: "lease_acquired", Delivery: f[FieldDelivery], Token: token,
			Attempt: atoi(f[FieldAttempt]), Worker: f[FieldWorkerID]},
		{Seq: 2, At: int64(atoi(f[FieldFinishedAt])), Event: "done", Delivery: f[FieldDelivery], Token: token, Worker: f[FieldWorkerID]},
	}
	if from < 0 {
		from = 0
	}
	if from >= foldedCount {
		return nil
	}
	return append([]Event(nil), all[from:]...)
}
