package history

import (
	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
)

// parse reads a copied record with the store's schema.
func parse(raw map[string]string) engine.Record { return jobstore.ParseRecord(raw) }
