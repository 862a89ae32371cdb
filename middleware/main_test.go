package middleware_test

import (
	"os"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// TestMain starts the package's redis-server and points the examples at a database of their own
// through REDIS_URL, so example_test.go imports nothing of the project's internals.
func TestMain(m *testing.M) {
	db := redistest.MustDB()
	_ = db.Client.Close() // the examples make their own clients
	os.Setenv("REDIS_URL", db.URL())
	redistest.Main(m)
}
