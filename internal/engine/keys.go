package engine

import (
	"strings"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// keysFor are the store's keys of job id with its operation key, and with its dedup marker when
// dedup ("<policy>:<key>", as in HeaderDedup) names one.
func (s *Stack) keysFor(jobID, opKey, dedup string) (jobstore.Keys, error) {
	k, err := s.store.Keys(jobID, opKey)
	if err != nil {
		return k, err
	}
	if policy, key, ok := strings.Cut(dedup, ":"); ok && key != "" {
		k = s.store.WithMarker(k, key, Policy(policy).clearsAt())
	}
	return k, nil
}
