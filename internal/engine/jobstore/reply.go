package jobstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Script replies are checked here, once: a reply of a shape the script never sends is an error,
// never a panic at a call site.

// replyError says a script answered something its header does not promise.
func replyError(script string, res any) error {
	return fmt.Errorf("jobstore: %s script: unexpected reply %v", script, res)
}

// strings reads a reply that is a list of at least n strings.
func replyStrings(script string, res any, n int) ([]string, error) {
	list, ok := res.([]any)
	if !ok || len(list) < n {
		return nil, replyError(script, res)
	}
	out := make([]string, len(list))
	for i, v := range list {
		s, ok := v.(string)
		if !ok {
			return nil, replyError(script, res)
		}
		out[i] = s
	}
	return out, nil
}

// runList runs script, named name in its errors, on keys and args, and reads its reply as
// replyList does: for the scripts that answer a state and its details.
func (s *Store) runList(ctx context.Context, script *redis.Script, name string, keys []string, args ...any) (string, []any, error) {
	res, err := script.Run(ctx, s.rdb, keys, args...).Result()
	if err != nil {
		return "", nil, fmt.Errorf("jobstore: %s: %w", name, err)
	}
	return replyList(name, res)
}

// replyList reads a reply that is a list whose first element is a string state.
func replyList(script string, res any) (string, []any, error) {
	list, ok := res.([]any)
	if !ok || len(list) == 0 {
		return "", nil, replyError(script, res)
	}
	state, ok := list[0].(string)
	if !ok {
		return "", nil, replyError(script, res)
	}
	return state, list[1:], nil
}

// intAt reads an integer element; nil (a Lua nil at the end of a table) is 0.
func intAt(script string, rest []any, i int) (int64, error) {
	if i >= len(rest) || rest[i] == nil {
		return 0, nil
	}
	n, ok := rest[i].(int64)
	if !ok {
		return 0, replyError(script, rest)
	}
	return n, nil
}

// stringAt reads a string element.
func stringAt(script string, rest []any, i int) (string, error) {
	if i >= len(rest) {
		return "", replyError(script, rest)
	}
	s, ok := rest[i].(string)
	if !ok {
		return "", replyError(script, rest)
	}
	return s, nil
}
