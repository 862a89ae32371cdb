package registry

import (
	"testing"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks"
	"github.com/jobguard/jobguard/tasks/internal/tasktest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// The registered task types pass Check.
func TestRegistryPassesCheck(t *testing.T) {
	t.Parallel()
	if err := tasks.Check(All()); err != nil {
		t.Fatalf("the registry: %v", err)
	}
}

// The registry alone decides which types a worker serves.
func TestRegistryDrivesHandlers(t *testing.T) {
	t.Parallel()
	e := tasktest.Start(t, tasks.Deps{}, All())
	for _, task := range All() {
		if _, ok := e.Stack.TaskConfig(task.Type); !ok {
			t.Errorf("%s is in the registry but not served", task.Type)
		}
	}
	if len(All()) != 2 {
		t.Fatalf("registry has %d types", len(All()))
	}
}
