// Package history copies finished jobs from Redis to PostgreSQL, batched and off the hot path, so
// Redis can keep finished jobs only briefly (JOB_RETENTION) while their records and timelines
// stay for audit; a job view reads the copy once Redis has let the job go.
//
// What it guarantees and what not: a job is queued for copying when this process ends it
// (Stack.OnEnd) and copied within about a flush interval; the queue lives in the process, so a
// job ended in the last moment before a crash may miss its copy (it is still in Redis for
// JOB_RETENTION). Keep JOB_RETENTION well above the flush interval.
package history

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/sqlfence"
)

var (
	//go:embed schema.sql
	schemaSQL string
	//go:embed upsert.sql
	upsertSQL string
)

// Schema is the DDL of the package's table (idempotent: CREATE ... IF NOT EXISTS), for a
// migration tool; Migrate runs it.
func Schema() string { return schemaSQL }

// Migrate creates the history table, its list order (ListSchema) and its tags (SearchSchema) if
// they are not there.
func Migrate(ctx context.Context, q sqlfence.Querier) error {
	for _, ddl := range []string{schemaSQL, listSchemaSQL, searchSchemaSQL} {
		if _, err := q.Exec(ctx, ddl); err != nil {
			return fmt.Errorf("history: migrate: %w", err)
		}
	}
	return nil
}

// queueSize bounds the jobs waiting for their copy; past it a job's copy is dropped (counted).
const queueSize = 10000

// Writer copies the jobs it is given to SQL, in batches.
type Writer struct {
	db    *pgxpool.Pool
	stack *engine.Stack
	log   zerolog.Logger
	queue chan string
	// Flush is how often a partial batch is written (default 250ms); Batch the most jobs per
	// transaction (default 100).
	Flush time.Duration
	Batch int
	// Copied and Dropped count jobs copied and jobs whose copy was dropped (a full queue).
	Copied, Dropped atomic.Int64
}

// NewWriter returns a writer; give it the jobs with Add (Stack.OnEnd(w.Add)) and Run it.
func NewWriter(db *pgxpool.Pool, stack *engine.Stack, log zerolog.Logger) *Writer {
	return &Writer{db: db, stack: stack, log: log, queue: make(chan string, queueSize), Flush: 250 * time.Millisecond, Batch: 100}
}

// Add queues a finished job for its copy; it never blocks.
func (w *Writer) Add(jobID string) {
	select {
	case w.queue <- jobID:
	default:
		w.Dropped.Add(1)
	}
}

// Run copies queued jobs until ctx ends, then writes what is queued (for up to 5 s) and returns.
func (w *Writer) Run(ctx context.Context) {
	t := time.NewTicker(w.Flush)
	defer t.Stop()
	var batch []string
	flush := func(ctx context.Context) {
		if len(batch) == 0 {
			return
		}
		if err := w.copy(ctx, batch); err != nil {
			// Kept for the next flush (the queue's bound still applies): a PostgreSQL hiccup
			// must not lose the copies.
			w.log.Warn().Err(err).Int("jobs", len(batch)).Msg("history: copy failed; retried at the next flush")
			if len(batch) < queueSize {
				return
			}
			w.Dropped.Add(int64(len(batch)))
		}
		batch = batch[:0]
	}
	for {
		select {
		case id := <-w.queue:
			batch = append(batch, id)
			if len(batch)%w.Batch == 0 {
				flush(ctx)
			}
		case <-t.C:
			flush(ctx)
		case <-ctx.Done():
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			for len(w.queue) > 0 && len(batch) < queueSize {
				batch = append(batch, <-w.queue)
			}
			flush(dctx)
			return
		}
	}
}

// copy reads the jobs' views from Redis and writes them in one transaction.
func (w *Writer) copy(ctx context.Context, ids []string) error {
	return pgx.BeginFunc(ctx, w.db, func(tx pgx.Tx) error {
		for _, id := range ids {
			v, err := w.stack.Get(ctx, id)
			if errors.Is(err, engine.ErrJobNotFound) {
				continue // already gone from Redis: nothing to copy
			}
			if err != nil {
				return err
			}
			if !v.Record.Status.Terminal() {
				continue // a late answer of a job a newer run owns (or a replay): its end queues it
			}
			if err := upsert(ctx, tx, v); err != nil {
				return err
			}
			w.Copied.Add(1)
		}
		return nil
	})
}

func upsert(ctx context.Context, tx pgx.Tx, v engine.View) error {
	rec, err := json.Marshal(v.Raw)
	if err != nil {
		return err
	}
	tl, err := json.Marshal(storedTimeline(v.Timeline))
	if err != nil {
		return err
	}
	var finished *time.Time
	if !v.Record.FinishedAt.IsZero() {
		finished = &v.Record.FinishedAt
	}
	created := time.UnixMilli(jobstore.CreatedMS(v.Record.JobID))
	tags := v.Record.Tags
	if tags == nil {
		tags = []string{}
	}
	_, err = tx.Exec(ctx, upsertSQL, v.Record.JobID, v.Record.Tenant, v.Record.Type, string(v.Record.Status), finished, rec, tl, created, tags)
	return err
}

// ErrNotFound: no copy of the job.
var ErrNotFound = errors.New("history: job not found")

// Load reads a job's copy as the engine's view (no live lease: the job has ended).
func Load(ctx context.Context, db *pgxpool.Pool, id string) (engine.View, error) {
	var rec, tl []byte
	err := db.QueryRow(ctx, `SELECT record, timeline FROM jobguard_job_history WHERE job_id = $1`, id).Scan(&rec, &tl)
	if errors.Is(err, pgx.ErrNoRows) {
		return engine.View{}, ErrNotFound
	}
	if err != nil {
		return engine.View{}, fmt.Errorf("history: read job %s: %w", id, err)
	}
	var v engine.View
	if err := json.Unmarshal(rec, &v.Raw); err != nil {
		return engine.View{}, fmt.Errorf("history: job %s: %w", id, err)
	}
	var events []storedEvent
	if err := json.Unmarshal(tl, &events); err != nil {
		return engine.View{}, fmt.Errorf("history: job %s: %w", id, err)
	}
	v.Timeline = loadedTimeline(events)
	v.Record = parse(v.Raw)
	return v, nil
}

// storedEvent is a timeline event as the copy stores it: with its seq, which engine.Event leaves
// out of its JSON (it is the SSE id), so a copy's events keep the ids Redis gave them.
type storedEvent struct {
	Seq *int64 `json:"seq"`
	engine.Event
}

func storedTimeline(tl []engine.Event) []storedEvent {
	out := make([]storedEvent, len(tl))
	for i, e := range tl {
		seq := e.Seq
		out[i] = storedEvent{Seq: &seq, Event: e}
	}
	return out
}

// loadedTimeline reads the events back; a row copied before seqs were stored gets positions.
func loadedTimeline(events []storedEvent) []engine.Event {
	out := make([]engine.Event, len(events))
	for i, e := range events {
		out[i] = e.Event
		out[i].Seq = int64(i)
		if e.Seq != nil {
			out[i].Seq = *e.Seq
		}
	}
	return out
}
