package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Published schedules: a process's specs live in its configuration, so a process that runs no
// schedule (an API process) learns them from Redis. Every running Scheduler with schedules
// publishes them under a key of its own that expires after LeaseTTL unless refreshed (every
// LeaseTTL/3), listed in a set that expires with it; Run takes both back when it stops. Every
// key is in the slot {schedules}, so the reads are one pipeline on a cluster too.

// publishedResource is the slot of the published schedules.
const publishedResource = "schedules"

// publication is what one running scheduler publishes.
type publication struct {
	// Worker is the publishing process's worker id; Leading, whether it led when it published.
	Worker  string    `json:"worker"`
	Leading bool      `json:"leading"`
	At      time.Time `json:"at"`
	// Schedules are its specs, each with its next tick after At.
	Schedules []publishedSpec `json:"schedules"`
}

type publishedSpec struct {
	Spec
	NextTick time.Time `json:"next_tick"`
}

func (s *Scheduler) publishersKey() string { return s.locks.Key(publishedResource, "publishers") }

func (s *Scheduler) publicationKey(id string) string {
	return s.locks.Key(publishedResource, "published:"+id)
}

// publish keeps this scheduler's specs published until ctx ends, then takes them back.
func (s *Scheduler) publish(ctx context.Context) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := s.stack.WorkerID() + ":" + hex.EncodeToString(b[:])
	every := max(s.cfg.LeaseTTL/3, 10*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.publishOnce(ctx, id); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn().Str("event", "schedule_publish_error").Err(err).Msg("schedules not published")
		}
		select {
		case <-ctx.Done():
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			defer cancel()
			pipe := s.locks.Redis().TxPipeline()
			pipe.Del(rctx, s.publicationKey(id))
			pipe.SRem(rctx, s.publishersKey(), id)
			_, _ = pipe.Exec(rctx) // best effort: what is left expires within LeaseTTL
			return
		case <-t.C:
		}
	}
}

func (s *Scheduler) publishOnce(ctx context.Context, id string) error {
	now := s.cfg.Clock.Now()
	p := publication{Worker: s.stack.WorkerID(), Leading: s.Leading(), At: now.UTC()}
	for _, pl := range s.plans {
		sp := publishedSpec{Spec: pl.Spec, NextTick: pl.Next(now).UTC()}
		// The payload of an encrypted type is the payload its jobs keep encrypted at rest: it is
		// not published in plaintext (the process that runs the schedule shows it).
		if tc, ok := s.stack.TaskConfig(sp.Type); !ok || tc.Encrypt {
			sp.Payload = nil
		}
		p.Schedules = append(p.Schedules, sp)
	}
	data, err := json.Marshal(p)
	if err != nil {
		return err
	}
	ttl := s.cfg.LeaseTTL
	pipe := s.locks.Redis().TxPipeline()
	pipe.Set(ctx, s.publicationKey(id), data, ttl)
	pipe.SAdd(ctx, s.publishersKey(), id)
	pipe.PExpire(ctx, s.publishersKey(), ttl)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("schedule: publish: %w", err)
	}
	return nil
}

// published reads the schedules the running schedulers publish, one per name: the leader's
// when it publishes the name, else the first publisher's (by id). Two round trips.
func (s *Scheduler) published(ctx context.Context) ([]publishedSpec, error) {
	rdb := s.locks.Redis()
	ids, err := rdb.SMembers(ctx, s.publishersKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("schedule: read published schedules: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	slices.Sort(ids)
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.Get(ctx, s.publicationKey(id))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("schedule: read published schedules: %w", err)
	}
	var pubs []publication
	var gone []any
	for i, c := range cmds {
		var p publication
		if c.Err() != nil || json.Unmarshal([]byte(c.Val()), &p) != nil {
			gone = append(gone, ids[i]) // expired: its process stopped without taking it back
			continue
		}
		pubs = append(pubs, p)
	}
	if len(gone) > 0 {
		_ = rdb.SRem(ctx, s.publishersKey(), gone...).Err() // best effort
	}
	slices.SortStableFunc(pubs, func(a, b publication) int { // leaders first
		switch {
		case a.Leading == b.Leading:
			return 0
		case a.Leading:
			return -1
		}
		return 1
	})
	var out []publishedSpec
	seen := map[string]bool{}
	for _, p := range pubs {
		for _, sp := range p.Schedules {
			if !seen[sp.Name] {
				seen[sp.Name] = true
				out = append(out, sp)
			}
		}
	}
	return out, nil
}
