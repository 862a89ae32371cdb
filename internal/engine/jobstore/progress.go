package jobstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/locking"
)

// ErrProgressBackwards: the run reported a higher progress before; nothing was written.
var ErrProgressBackwards = errors.New("jobstore: progress may not go backwards within a run")

// progressScript is fenced by locking's prelude, like SetFields: a stale run cannot move it.
var progressScript = locking.NewFencedScript(scripts.Read("progress.lua"))

// ProgressArgs are one progress report.
type ProgressArgs struct {
	Percent int
	Note    string
	Now     time.Time
	// Retention keeps the record for another retention period.
	Retention time.Duration
}

// SaveProgress writes a run's progress into the job record under fence f, in one round trip. It
// fails with locking.ErrStaleToken when a later run or a cancel raised the fence, and with
// ErrProgressBackwards when the run reported more before.
func SaveProgress(ctx context.Context, rdb redis.Scripter, k Keys, f locking.Fence, a ProgressArgs) error {
	err := progressScript.Run(ctx, rdb, f, []string{k.Record}, a.Percent, a.Note, a.Now.UnixMilli(), ms(a.Retention)).Err()
	switch {
	case err == nil:
		return nil
	case strings.HasPrefix(err.Error(), "BACKWARDS "):
		return fmt.Errorf("%w: it is at %s", ErrProgressBackwards, strings.TrimPrefix(err.Error(), "BACKWARDS "))
	}
	return fmt.Errorf("jobstore: progress: %w", err)
}
