package engine

import (
	"strconv"
	"time"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// Job ids and hash tags are the store's (jobstore/ids.go); these are the engine's names for them.

// ResourceTag is the hash tag of a resource's keys.
func ResourceTag(resource string) string { return jobstore.ResourceTag(resource) }

// NewJobID returns a fresh job id for a job on resource.
func NewJobID(resource string, now time.Time) string { return jobstore.NewJobID(resource, now) }

// jobIDFor is the id of the job spec asks for: its JobID, or a new one (newJobIDFor).
func (s *Stack) jobIDFor(spec Spec, now time.Time) string {
	if spec.JobID != "" {
		return spec.JobID
	}
	return s.newJobIDFor(spec, now)
}

// newJobIDFor is a fresh id for a job of spec: on its resource, or, without one, on a resource
// of the job's own (the time and a unique owner, so no two jobs share it).
func (s *Stack) newJobIDFor(spec Spec, now time.Time) string {
	resource := spec.Resource
	if resource == "" {
		resource = "job:" + strconv.FormatInt(now.UnixNano(), 36) + s.locks.NewOwner()
	}
	return NewJobID(resource, now)
}

// TagOf returns the resource tag a job id carries.
func TagOf(jobID string) (string, error) { return jobstore.TagOf(jobID) }

// ValidJobID reports whether id has the form of a job id.
func ValidJobID(id string) bool { return jobstore.ValidJobID(id) }

// DeliveryID is the asynq task id of the n-th delivery of a job.
func DeliveryID(jobID string, n int) string { return jobstore.DeliveryID(jobID, n) }

// The store's view of a job, its timeline events and record, under the engine's names.
type (
	// View is everything known about a job: record, live lease, timeline.
	View = jobstore.View
	// Event is one entry of a job's timeline.
	Event = jobstore.Event
	// Record is a job record, typed.
	Record = jobstore.Record
	// Status is where a job is in its life.
	Status = jobstore.Status
)
