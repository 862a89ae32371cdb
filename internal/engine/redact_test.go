package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// lockedBuffer collects log lines written from several goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Whatever a handler's error (or panic) says, a URL in it loses its userinfo and query values
// before the job record, the timeline, the log line and asynq's stored error see it.
func TestHandlerErrorsAreRedacted(t *testing.T) {
	t.Parallel()
	const secretURL = "https://svc-user:pw-1f@upstream.example:8443/v1?api_key=KEY-93b&x=1"
	leak := fmt.Sprintf("upstream: Get %q: connection refused", secretURL)
	logs := &lockedBuffer{}
	log := zerolog.New(logs)
	h := newHarness(t, Config{Logger: &log}, func(s *Stack) {
		s.Register(TaskConfig{Type: "permanent"}, func(context.Context, *Job) error { return Permanent(errors.New(leak)) })
		s.Register(TaskConfig{Type: "transient", MaxAttempts: 3, Backoff: Backoff{Base: time.Minute}},
			func(context.Context, *Job) error { return errors.New(leak) })
		s.Register(TaskConfig{Type: "limited"}, func(context.Context, *Job) error { return RateLimited(errors.New(leak), time.Minute) })
		s.Register(TaskConfig{Type: "panics"}, func(context.Context, *Job) error { panic(leak) })
	})
	jobs := map[string]string{
		"permanent": "failed", "transient": "retrying", "limited": "retrying", "panics": "retrying",
	}
	for typ, status := range jobs {
		id := h.enqueue(Spec{Type: typ, Tenant: "t1", Resource: "t1:" + typ})
		v := h.waitStatus(id, status, 10*time.Second)
		var lastErr string
		eventually(t, 10*time.Second, typ+": asynq stored the error", func() bool {
			info, err := h.insp.GetTaskInfo("default", DeliveryID(id, 1))
			if err == nil {
				lastErr = info.LastErr
			}
			return lastErr != ""
		})
		texts := map[string]string{"last_error": v.Raw["last_error"], "asynq LastErr": lastErr}
		for _, e := range v.Timeline {
			texts["timeline "+e.Event] += e.Detail
		}
		if typ != "limited" && !strings.Contains(v.Raw["last_error"], "https://upstream.example:8443/v1?api_key=REDACTED&x=REDACTED") {
			t.Errorf("%s: last_error %q does not keep the redacted URL", typ, v.Raw["last_error"])
		}
		for where, text := range texts {
			for _, secret := range []string{"svc-user", "pw-1f", "KEY-93b"} {
				if strings.Contains(text, secret) {
					t.Errorf("%s: %s carries %q: %s", typ, where, secret, text)
				}
			}
		}
	}
	for _, secret := range []string{"svc-user", "pw-1f", "KEY-93b"} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("the log carries %q: %s", secret, logs.String())
		}
	}
}
