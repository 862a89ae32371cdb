package jobstore

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrInvalidJobID: the string is not a job id.
var ErrInvalidJobID = errors.New("jobstore: invalid job id")

// A job id is "<tag>-<time><random>": tag is the first 16 hex digits of SHA-256 of the job's
// resource, so every key of the job (its record, timeline, the resource's lease, fence and state)
// can be computed from the id alone and shares the hash tag {tag}; the rest is 12 hex digits of
// milliseconds since the epoch and 16 random hex digits. 45 characters of [0-9a-f-].

// JobIDPattern is the regular expression every job id matches (the API's description says it).
const JobIDPattern = `^[0-9a-f]{16}-[0-9a-f]{28}$`

// ResourceTag is the hash tag of a resource's keys.
func ResourceTag(resource string) string {
	sum := sha256.Sum256([]byte(resource))
	return hex.EncodeToString(sum[:8])
}

// NewJobID returns a fresh job id for a job on resource.
func NewJobID(resource string, now time.Time) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return fmt.Sprintf("%s-%012x%016x", ResourceTag(resource), uint64(now.UnixMilli())&0xffffffffffff, binary.BigEndian.Uint64(b[:]))
}

// DerivedJobID returns the job id of a job on resource that is named by at and salt rather than
// drawn at random: the same arguments always give the same id (a schedule's tick: two leaders
// creating one tick create one job). Same shape as NewJobID; the random part is SHA-256 of salt and
// at's unix nanoseconds.
func DerivedJobID(resource string, at time.Time, salt string) string {
	sum := sha256.Sum256([]byte(salt + "\x00" + strconv.FormatInt(at.UnixNano(), 10)))
	return fmt.Sprintf("%s-%012x%016x", ResourceTag(resource), uint64(at.UnixMilli())&0xffffffffffff, binary.BigEndian.Uint64(sum[:8]))
}

// TagOf returns the resource tag a job id carries.
func TagOf(jobID string) (string, error) {
	if !ValidJobID(jobID) {
		return "", fmt.Errorf("%w: %q", ErrInvalidJobID, jobID)
	}
	return jobID[:16], nil
}

// jobIDLen and jobIDDash are a job id's length and the place of its one dash.
const (
	jobIDLen  = 45
	jobIDDash = 16
)

// ValidJobID reports whether id has the form of a job id (JobIDPattern). A loop over its bytes,
// not the pattern's regular expression: a job's keys are derived from its id several times a run,
// and the matching was 1.8% of a no-op drain's CPU.
func ValidJobID(id string) bool {
	if len(id) != jobIDLen || id[jobIDDash] != '-' {
		return false
	}
	for i := range len(id) {
		if c := id[i]; i != jobIDDash && (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// DeliveryID is the asynq task id of the n-th delivery of a job. Deriving it from the job lets
// several rescuers, or a replay racing a rescue, enqueue the same delivery at most once.
func DeliveryID(jobID string, n int) string { return jobID + ".d" + strconv.Itoa(n) }
