package jobstore

import "github.com/jobguard/jobguard/locking"

// Keys are the keys of one job, all in its resource's slot.
type Keys struct {
	// Tag is the resource's hash tag: Key(name) is the key called name in the job's slot.
	Tag, Record, Timeline, Lease, Fence string
	// Applied is the applied-operation record; the record key when the job has no operation key.
	Applied string
	// Marker and Pending are the dedup marker and its pending flag; the record key when none.
	Marker, Pending string
	// Clear says when the dedup marker is cleared: "start", "done" or "" (never: it expires).
	Clear string
}

// HasMarker reports whether the keys carry a dedup marker.
func (k Keys) HasMarker() bool { return k.Marker != k.Record }

// Keys returns the keys of job id; opKey names its applied-operation record ("" none).
func (s *Store) Keys(jobID, opKey string) (Keys, error) {
	tag, err := TagOf(jobID)
	if err != nil {
		return Keys{}, err
	}
	k := Keys{
		Tag:      tag,
		Record:   s.locks.Key(tag, "job:"+jobID),
		Timeline: s.locks.Key(tag, "job:"+jobID+timelineSuffix),
		Lease:    s.locks.LeaseKey(tag),
		Fence:    s.locks.FenceKey(tag),
	}
	// A key of the slot that is never an applied record, marker or flag stands in for them.
	k.Applied, k.Marker, k.Pending = k.Record, k.Record, k.Record
	if opKey != "" {
		k.Applied = s.locks.Key(tag, "applied:"+opKey)
	}
	return k, nil
}

// WithMarker adds the job's dedup marker for key, cleared when clear says ("start", "done", "").
func (s *Store) WithMarker(k Keys, key, clear string) Keys {
	if key == "" {
		return k
	}
	k.Marker = s.locks.Key(k.Tag, "dedup:"+key)
	k.Pending = s.locks.Key(k.Tag, "dedup-pending:"+key)
	k.Clear = clear
	return k
}

// Key is the key called name in the slot of tag.
func (s *Store) Key(tag, name string) string { return s.locks.Key(tag, name) }

// Locks is the store's locking client.
func (s *Store) Locks() *locking.Client { return s.locks }

// timelineSuffix makes a job's timeline key of its record key (timeline_push in
// scripts/prelude.lua reads it back the other way).
const timelineSuffix = ":timeline"
