package store

import (
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// TestMain stops the PostgreSQL the tests start and removes its directory.
func TestMain(m *testing.M) { redistest.Main(m) }
