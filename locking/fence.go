package locking

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// StaleError is the ErrStaleToken answer: Current is the token that last wrote the target.
type StaleError struct {
	Token   int64
	Current int64
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("locking: stale fencing token %d: the target was written by token %d", e.Token, e.Current)
}

// Is makes errors.Is(err, ErrStaleToken) true.
func (e *StaleError) Is(target error) bool { return target == ErrStaleToken }

// Fence record fields, reserved in every fenced hash target.
const (
	FieldFenceToken = "_fence_token"
	FieldFenceOwner = "_fence_owner"
)

// FencedScript is a Lua script whose body runs only for a fence that may write: the prelude
// (scripts/fence_prelude.lua, on the protocol fragment's fence_check and fence_record) rejects a
// lower token, or the same token from another owner, and records the fence in KEYS[1] before the
// body runs. In the body, KEYS are the caller's keys (KEYS[1] being the fence record, a hash the
// body may also use as its target), ARGV[1] and ARGV[2] are the token and owner, and the caller's
// arguments start at ARGV[3]; the protocol's functions (see NewProtocolScript) are in scope. All
// keys must share the resource's hash tag (Client.Key). Run appends one key of the prelude's after
// the caller's (the fence's Counter, or KEYS[1] again when it has none): a body indexes its keys
// from KEYS[1] and counts them up to #KEYS-1.
type FencedScript struct {
	script *redis.Script
}

// NewFencedScript builds a fenced script from its body.
func NewFencedScript(body string) *FencedScript {
	return &FencedScript{script: NewProtocolScript(fencePrelude + "\n" + body)}
}

// Run runs the script for fence f. A stale fence gets a *StaleError and nothing is written.
func (s *FencedScript) Run(ctx context.Context, rdb redis.Scripter, f Fence, keys []string, args ...any) *redis.Cmd {
	all, argv := fencedArgs(f, keys, args)
	return s.Reply(f, s.script.Run(ctx, rdb, all, argv...))
}

// Queue adds the script's call for fence f to pipe, by SHA: a NOSCRIPT answer means it did not
// run (Load, then send it again). Read its answer with Reply once pipe ran.
func (s *FencedScript) Queue(ctx context.Context, pipe redis.Pipeliner, f Fence, keys []string, args ...any) *redis.Cmd {
	all, argv := fencedArgs(f, keys, args)
	return s.script.EvalSha(ctx, pipe, all, argv...)
}

// Reply is cmd, a call of the script for fence f, with a stale fence's answer as a *StaleError.
func (s *FencedScript) Reply(f Fence, cmd *redis.Cmd) *redis.Cmd {
	if err := cmd.Err(); err != nil {
		if cur, ok := staleToken(err); ok {
			cmd.SetErr(&StaleError{Token: f.Token, Current: cur})
		}
	}
	return cmd
}

// fencedArgs are a fenced call's KEYS (the prelude's counter key appended) and ARGV.
func fencedArgs(f Fence, keys []string, args []any) ([]string, []any) {
	counter := f.Counter
	if counter == "" && len(keys) > 0 {
		counter = keys[0] // the prelude reads "no counter" from KEYS[#KEYS] == KEYS[1]
	}
	all := append(slices.Clip(keys), counter) // never into the caller's array
	return all, append([]any{f.Token, f.Owner}, args...)
}

// Load loads the script into Redis (every master of a cluster), so pipelines can use EvalSha.
func (s *FencedScript) Load(ctx context.Context, rdb redis.Scripter) error {
	return s.script.Load(ctx, rdb).Err()
}

func staleToken(err error) (int64, bool) {
	msg := err.Error()
	if !strings.HasPrefix(msg, "STALE ") {
		return 0, false
	}
	n, perr := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(msg, "STALE ")), 10, 64)
	return n, perr == nil
}

var (
	fencedHSet = NewFencedScript(mustScript("fenced_hset.lua"))
	fencedSet  = NewFencedScript(mustScript("fenced_set.lua"))
)

// SetFields writes fields (name, value pairs) into the hash at key under fence f, with ttl (0: no
// expiry). The hash keeps the fence in its FieldFenceToken and FieldFenceOwner fields.
func (c *Client) SetFields(ctx context.Context, f Fence, key string, ttl time.Duration, fields ...any) error {
	if len(fields) == 0 || len(fields)%2 != 0 {
		return fmt.Errorf("locking: SetFields needs name, value pairs, got %d values", len(fields))
	}
	args := append([]any{ms(ttl)}, fields...)
	if err := fencedHSet.Run(ctx, c.rdb, f, []string{key}, args...).Err(); err != nil {
		return fmt.Errorf("locking: fenced write of %s: %w", key, err)
	}
	return nil
}

// SetValue replaces the string at key under fence f, with ttl (0: no expiry). Its fence record is
// the hash FenceRecordKey(key).
func (c *Client) SetValue(ctx context.Context, f Fence, key string, value any, ttl time.Duration) error {
	err := fencedSet.Run(ctx, c.rdb, f, []string{FenceRecordKey(key), key}, ms(ttl), value).Err()
	if err != nil {
		return fmt.Errorf("locking: fenced write of %s: %w", key, err)
	}
	return nil
}

// FenceRecordKey is where SetValue keeps the fence of a string target: the same key with ":fence"
// appended, which keeps its hash tag.
func FenceRecordKey(key string) string { return key + ":fence" }
