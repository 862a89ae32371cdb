package httpapi

import (
	"context"
	"encoding/json"
	"log"
	"net"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/tasks/registry"
)

// go-redis's own lines (here: its pool giving up dialing a Redis that is not there) are zerolog
// JSON events with component=redis in the process's log, not plain text beside it, and they name
// the address but never the password of REDIS_URL.
//
// Not parallel: go-redis's logger is process-wide, and a parallel test's newer App would take
// these lines.
func TestRedisLogLinesAreJSON(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	const password = "hunter2-not-for-logs"
	cfg, err := config.FromLookup(lookupFrom(map[string]string{
		"REDIS_URL": "redis://:" + password + "@" + addr + "/0", "HTTP_ADDR": "127.0.0.1:0",
	}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	if a, err := newProcess(context.Background(), cfg, RoleAPI, zerolog.New(logs)); err == nil {
		a.Close()
		t.Fatal("New succeeded without a Redis")
	}
	logs.mu.Lock()
	raw := logs.b.String()
	logs.mu.Unlock()
	dial := 0
	for _, line := range strings.Split(strings.TrimSpace(raw), "\n") {
		if line == "" {
			continue
		}
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		if strings.Contains(line, password) {
			t.Errorf("the password reached the log: %s", line)
		}
		msg, _ := ev["message"].(string)
		if strings.Contains(msg, "failed to dial") {
			dial++
			if ev["component"] != "redis" || ev["level"] != "warn" || !strings.Contains(msg, addr) || strings.HasSuffix(msg, "\n") {
				t.Errorf("go-redis line: %s", line)
			}
		}
	}
	if dial == 0 {
		t.Fatalf("no go-redis dial failure in the process's log:\n%s", raw)
	}
}

// The standard library's log package (asynqmon reports failed batch operations there) writes
// into the open App's log as JSON too. Not parallel, for the same reason as above.
func TestStdLogLinesAreJSON(t *testing.T) {
	cfg, err := config.FromLookup(lookupFrom(map[string]string{"REDIS_URL": redistest.NewDB(t).URL(), "HTTP_ADDR": "127.0.0.1:0"}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	a, err := newProcess(context.Background(), cfg, RoleAPI, zerolog.New(logs))
	if err != nil {
		t.Fatal(err)
	}
	log.Printf("error: could not delete task with id %q: %v", "t1", "boom")
	a.Close()
	log.Printf("after close") // goes to stderr, not to the closed App's writer
	logs.mu.Lock()
	raw := strings.TrimSpace(logs.b.String())
	logs.mu.Unlock()
	var ev map[string]any
	if err := json.Unmarshal([]byte(raw), &ev); err != nil {
		t.Fatalf("want one JSON line, got %q", raw)
	}
	if ev["component"] != "stdlog" || ev["level"] != "warn" || ev["message"] != `error: could not delete task with id "t1": boom` {
		t.Fatalf("std log line: %s", raw)
	}
}
