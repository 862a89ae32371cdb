package middleware

import (
	"context"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

// Every script of the package compiles and loads in a real Redis.
func TestScriptsLoad(t *testing.T) {
	t.Parallel()
	rdb := redistest.NewDB(t).Client
	for _, s := range allScripts {
		if err := s.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
}
