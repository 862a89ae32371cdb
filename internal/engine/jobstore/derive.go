package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/locking"
)

// A final record (done or revoked: it never runs again) leaves out the fields that say what the
// rest of the record, or its key, says already (record_compact in scripts/prelude.lua): its
// id, its current delivery, its confirmation, its creation time when the id carries it, its
// last change when that was its end, its fencing token when the fence holds the same, its
// count of deliveries when that is one, and its queue and attempts when they are the defaults. Every
// reader gets them back: in Lua through record_get, in Go through derive. That, with the sealed
// fence, is what brings a finished job's record from about 650 to under 400 bytes.

// derivedFields are the fields a final record may leave out; deriveSources what deriving them reads.
var (
	derivedFields = []string{FieldJobID, FieldDelivery, FieldConfirmed, FieldCreatedAt, FieldUpdatedAt, FieldFencing,
		FieldDeliveries, FieldQueue, FieldMaxAttempts}
	deriveSources = []string{FieldStatus, FieldDeliveries, FieldFinishedAt, locking.FieldFenceToken}
)

// The engine's defaults for a task type's queue and attempts.
const (
	DefaultQueue       = "default"
	DefaultMaxAttempts = 5
)

// finalDefaults are what a final record's queue and max_attempts say when it leaves them out
// (record_compact drops only these values; final_defaults in scripts/prelude.lua): 32 of the
// record's listpack bytes, a step of jemalloc's size classes for make bench-peers' job.
var finalDefaults = map[string]string{FieldQueue: DefaultQueue, FieldMaxAttempts: strconv.Itoa(DefaultMaxAttempts)}

// final reports whether a record of status s is final: compacted, and derived on read.
func final(s string) bool { return s == string(StatusDone) || s == string(StatusRevoked) }

// derive fills in f, the fields of job id's record (with deriveSources among them), the derived
// fields it lacks; a record that is not final is left as it is.
func derive(id string, f map[string]string) {
	if !final(f[FieldStatus]) || !ValidJobID(id) {
		return
	}
	if _, ok := f[FieldDeliveries]; !ok {
		f[FieldDeliveries] = "1" // a final record keeps only a count above one
	}
	d := map[string]string{
		FieldJobID:     id,
		FieldDelivery:  DeliveryID(id, atoi(f[FieldDeliveries])),
		FieldConfirmed: "1",
		FieldCreatedAt: strconv.FormatInt(idMillis(id), 10),
		FieldFencing:   f[locking.FieldFenceToken],
	}
	for k, v := range finalDefaults {
		d[k] = v
	}
	if at, ok := f[FieldFinishedAt]; ok {
		d[FieldUpdatedAt] = at
	}
	if d[FieldFencing] == "" {
		d[FieldFencing] = "0"
	}
	for k, v := range d {
		if _, ok := f[k]; !ok {
			f[k] = v
		}
	}
}

// idMillis is the millisecond a job id carries (NewJobID's now).
func idMillis(id string) int64 {
	n, _ := strconv.ParseInt(id[17:29], 16, 64)
	return n
}

// idOfRecordKey is the job id of a record key ("" when key is not one).
func idOfRecordKey(key string) string {
	i := strings.LastIndex(key, ":job:")
	if i < 0 || !ValidJobID(key[i+5:]) {
		return ""
	}
	return key[i+5:]
}

// ReadFields reads fields of the job record at recordKey with any client, derived ones included
// (as record_get does in Lua), for tools and test suites that walk a keyspace: one round trip. A
// field the record lacks is absent from the map; a record Redis no longer has gives an empty one.
func ReadFields(ctx context.Context, rdb redis.Cmdable, recordKey string, fields ...string) (map[string]string, error) {
	pipe := rdb.Pipeline()
	read := QueueFields(ctx, pipe, recordKey, fields...)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("jobstore: read %s: %w", recordKey, err)
	}
	return read(), nil
}

// QueueFields is ReadFields for many records in one pipeline: it queues the read of recordKey on
// pipe and returns what reads its answer once the pipeline has run.
func QueueFields(ctx context.Context, pipe redis.Pipeliner, recordKey string, fields ...string) func() map[string]string {
	all := append(append([]string(nil), fields...), deriveSources...)
	cmd := pipe.HMGet(ctx, recordKey, all...)
	return func() map[string]string {
		got := map[string]string{}
		for i, v := range cmd.Val() {
			if s, ok := v.(string); ok && i < len(all) {
				got[all[i]] = s
			}
		}
		derive(idOfRecordKey(recordKey), got)
		out := make(map[string]string, len(fields))
		for _, f := range fields {
			if v, ok := got[f]; ok {
				out[f] = v
			}
		}
		return out
	}
}
