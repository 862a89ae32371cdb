package tasks

import (
	"context"
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

var bg = context.Background()
