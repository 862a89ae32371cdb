package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/seal"
)

// ReencryptStats count what a re-encrypt pass did.
type ReencryptStats struct {
	// Jobs is the records read; Rewritten the fields written with the current key; Changed the
	// fields a writer changed between the read and the write (theirs kept, already current).
	Jobs, Rewritten, Changed int
	// Failed lists the jobs with a field that did not decrypt (the key that sealed it is not in
	// the ring): they still need an old key, which must not be removed yet.
	Failed []string
}

// ErrReencryptIncomplete: some jobs could not be moved to the current key (ReencryptStats.Failed).
var ErrReencryptIncomplete = errors.New("engine: re-encrypt left jobs on keys the ring cannot open")

// Rewrites are the rewrites that bring job id's data fields (payload, result, checkpoint, as read
// in fields) onto the ring's current key: a value sealed with another key is opened and sealed
// again; a plaintext value of a type now marked Encrypt is sealed. Nothing for a job already
// current. An error is ErrUndecryptable.
func (s *Stack) Rewrites(id, typ string, fields map[string]string) ([]jobstore.Rewrite, error) {
	ring := s.cfg.Keys
	if ring.Current() == "" {
		return nil, nil
	}
	tc, _ := s.TaskConfig(typ)
	var out []jobstore.Rewrite
	for _, f := range sealedFields {
		v := fields[f]
		if !ring.Stale(v, tc.Encrypt) {
			continue
		}
		plain, err := s.openValue(id, f, []byte(v))
		if err != nil {
			return nil, err
		}
		nv, err := ring.Seal(plain, seal.AD(id, f))
		if err != nil {
			return nil, fmt.Errorf("engine: encrypt %s of job %s: %w", f, id, err)
		}
		out = append(out, jobstore.Rewrite{Field: f, Old: v, New: nv})
	}
	return out, nil
}

// Reencrypt moves every job record in Redis onto the current key (Rewrites), each field
// compare-and-set against concurrent writers (jobstore.Reseal). It can be stopped and run again
// at any time: a second pass reads every record and writes only what is not current yet. progress,
// when set, is called after each job. The error is ErrReencryptIncomplete when some job needs a key
// the ring lacks (Stats.Failed names them), or the first Redis error.
func (s *Stack) Reencrypt(ctx context.Context, progress func(ReencryptStats)) (ReencryptStats, error) {
	var st ReencryptStats
	if s.cfg.Keys.Current() == "" {
		return st, errors.New("engine: re-encrypt needs keys (Config.Keys)")
	}
	fields := append([]string{jobstore.FieldType}, sealedFields...)
	err := s.store.ScanJobs(ctx, func(ctx context.Context, id string) error {
		k, err := s.store.Keys(id, "")
		if err != nil {
			return nil
		}
		vals, err := s.rdb.HMGet(ctx, k.Record, fields...).Result()
		if err != nil {
			return fmt.Errorf("engine: re-encrypt %s: %w", id, err)
		}
		read := make(map[string]string, len(fields))
		for i, f := range fields {
			if v, ok := vals[i].(string); ok {
				read[f] = v
			}
		}
		st.Jobs++
		rw, err := s.Rewrites(id, read[jobstore.FieldType], read)
		if err != nil {
			st.Failed = append(st.Failed, id)
		} else if len(rw) > 0 {
			n, err := s.store.Reseal(ctx, id, rw)
			if err != nil {
				return err
			}
			st.Rewritten += n
			st.Changed += len(rw) - n
		}
		if progress != nil {
			progress(st)
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	if len(st.Failed) > 0 {
		return st, fmt.Errorf("%w: %d jobs", ErrReencryptIncomplete, len(st.Failed))
	}
	return st, nil
}
