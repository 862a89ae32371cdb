package jobstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A job carries up to MaxTags tags: labels its enqueuer chose, kept in the record's tags field
// (joined by ','), shown by the list and searchable through one index per tag and tenant beside
// the tenant's job index (TagIndexKey), written and trimmed with it.

// MaxTags is how many tags a job may carry; MaxTagLen how long one may be.
const (
	MaxTags   = 8
	MaxTagLen = 64
)

// ErrBadTags: a tag that is empty, too long or outside the tag charset, or more than MaxTags.
var ErrBadTags = errors.New("jobstore: invalid tags")

// tagSep joins a record's tags; it is outside the tag charset.
const tagSep = ","

// NormalizeTags checks tags (at most MaxTags, each 1-64 characters of A-Z a-z 0-9 . _ : = -)
// and returns them with duplicates folded, in their first order; nil for none. The error wraps
// ErrBadTags and says what is wrong without repeating the tag.
func NormalizeTags(tags []string) ([]string, error) {
	if len(tags) == 0 {
		return nil, nil
	}
	if len(tags) > MaxTags {
		return nil, fmt.Errorf("%w: at most %d tags, got %d", ErrBadTags, MaxTags, len(tags))
	}
	out := make([]string, 0, min(len(tags), MaxTags))
	for i, t := range tags {
		if err := checkTag(t); err != nil {
			return nil, fmt.Errorf("%w: tag %d %s", ErrBadTags, i+1, err)
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out, nil
}

func checkTag(t string) error {
	if len(t) == 0 || len(t) > MaxTagLen {
		return fmt.Errorf("must be 1-%d characters long", MaxTagLen)
	}
	for i := 0; i < len(t); i++ {
		if !tagByte(t[i]) {
			return errors.New("may hold only A-Z a-z 0-9 . _ : = -")
		}
	}
	return nil
}

func tagByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("._:=-", c) >= 0
}

// joinTags is a record's tags field; splitTags reads it back (nil when empty).
func joinTags(tags []string) string { return strings.Join(tags, tagSep) }

func splitTags(field string) []string {
	if field == "" {
		return nil
	}
	return strings.Split(field, tagSep)
}

// SplitTags reads a record's tags field (as ReadFields or a copy of the record holds it).
func SplitTags(field string) []string { return splitTags(field) }

// TagIndexKey is the key of tenant's index of the jobs tagged tag (tenant "": of every tenant's).
// It shares the slot of the tenant's job index (IndexKey), so one script reads both.
// On a cluster each stripe of the tenant's index has its own (IndexKeyOf(tenant, id) + ":tag:" + tag).
func (s *Store) TagIndexKey(tenant, tag string) string {
	return s.IndexKey(tenant) + tagIndexSuffix + tag
}

// tagIndexSuffix makes a tag's index key of its tenant index's key (or stripe's).
const tagIndexSuffix = ":tag:"
