package observe

import (
	"bytes"
	"encoding/json"
	"log"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"
)

// lockedBuffer is a log destination that several goroutines may write.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A standard-library log line goes to the newest routed owner's logger as a JSON warn line with
// component=stdlog; once that owner is unrouted, to the one before. Not parallel: the routes are
// process-wide.
func TestProcessLogsGoToTheNewestOwner(t *testing.T) {
	var first, second lockedBuffer
	a, b := new(int), new(int)
	RouteProcessLogs(a, zerolog.New(&first))
	RouteProcessLogs(b, zerolog.New(&second))
	t.Cleanup(func() { UnrouteProcessLogs(a); UnrouteProcessLogs(b) })
	log.Print("to the newest")
	UnrouteProcessLogs(b)
	UnrouteProcessLogs(b) // twice is harmless
	log.Print("to the first")
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(second.String())), &line); err != nil ||
		line["component"] != "stdlog" || line["level"] != "warn" || line["message"] != "to the newest" {
		t.Fatalf("the newest owner got %q (%v)", second.String(), err)
	}
	if strings.Contains(first.String(), "to the newest") || !strings.Contains(first.String(), `"message":"to the first"`) {
		t.Fatalf("the first owner got %q", first.String())
	}
}
