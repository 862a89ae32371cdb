package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jobguard/jobguard/tasks/registry"
)

func lookupFrom(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestFromLookupDefaults(t *testing.T) {
	t.Parallel()
	c, err := FromLookup(lookupFrom(nil), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	if !c.Embedded() || c.HTTPAddr != "127.0.0.1:8080" || c.WorkerConcurrency != 10 || c.LeaseTTL != 30*time.Second ||
		c.Queues["critical"] != 6 || c.IdempotencyRetention != 24*time.Hour || c.KeyPrefix != "jobguard" {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if got := c.QueueNames(); strings.Join(got, ",") != "critical,default,low" {
		t.Fatalf("QueueNames = %v", got)
	}
}

func TestFromLookupParses(t *testing.T) {
	t.Parallel()
	c, err := FromLookup(lookupFrom(map[string]string{
		"REDIS_URL":           "redis://:secret@10.0.0.1:6380/2",
		"WORKER_CONCURRENCY":  "4",
		"QUEUES":              "a=1, b=5",
		"LEASE_TTL":           "5s",
		"API_TOKENS":          "0123456789abcdef:tenantA,fedcba9876543210:tenantB",
		"MONITORING_READONLY": "true",
		"LOG_LEVEL":           "debug",
		"LOG_FORMAT":          "console",
	}), registry.All())
	if err != nil {
		t.Fatal(err)
	}
	if c.WorkerConcurrency != 4 || c.Queues["b"] != 5 || c.LeaseTTL != 5*time.Second ||
		c.APITokens["fedcba9876543210"] != "tenantB" || !c.MonitoringReadOnly || c.LogFormat != LogConsole {
		t.Fatalf("not parsed: %+v", c)
	}
	o, err := c.RedisOptions()
	if err != nil || o.Addrs[0] != "10.0.0.1:6380" || o.DB != 2 || o.Password != "secret" {
		t.Fatalf("redis options %+v, %v", o, err)
	}
}

func TestRedisModes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode, url string
		addrs     int
		master    string
		cluster   bool
	}{
		{RedisSentinel, "redis://s1:26379/0?addr=s2:26379&master_name=mymaster", 2, "mymaster", false},
		{RedisCluster, "redis://n1:7000?addr=n2:7001&addr=n3:7002", 3, "", true},
	} {
		c, err := FromLookup(lookupFrom(map[string]string{"REDIS_URL": tc.url, "REDIS_MODE": tc.mode}), registry.All())
		if err != nil {
			t.Fatalf("%s: %v", tc.mode, err)
		}
		o, _ := c.RedisOptions()
		if len(o.Addrs) != tc.addrs || o.MasterName != tc.master || o.IsClusterMode != tc.cluster {
			t.Fatalf("%s: options %+v", tc.mode, o)
		}
	}
}

// Every bad value names its variable, and only its variable.
func TestFromLookupNamesTheBadVariable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"WORKER_CONCURRENCY": "abc"}, "WORKER_CONCURRENCY"},
		{map[string]string{"WORKER_CONCURRENCY": "0"}, "WORKER_CONCURRENCY"},
		{map[string]string{"REDIS_URL": "http://x"}, "REDIS_URL"},
		{map[string]string{"REDIS_URL": "redis://:hunter2@h:notaport"}, "REDIS_URL"},
		{map[string]string{"REDIS_MODE": "cluster"}, "REDIS_URL"},
		{map[string]string{"REDIS_MODE": "ring"}, "REDIS_MODE"},
		{map[string]string{"REDIS_MODE": "sentinel", "REDIS_URL": "redis://s1:26379"}, "REDIS_URL"},
		{map[string]string{"HTTP_ADDR": "nohost"}, "HTTP_ADDR"},
		{map[string]string{"ADMIN_ADDR": "9090"}, "ADMIN_ADDR"},
		{map[string]string{"QUEUES": "a"}, "QUEUES"},
		{map[string]string{"QUEUES": "a=0"}, "QUEUES"},
		{map[string]string{"QUEUES": "a b=1"}, "QUEUES"},
		{map[string]string{"QUEUE_SHARDS": "0"}, "QUEUE_SHARDS"},
		{map[string]string{"QUEUE_SHARDS": "65"}, "QUEUE_SHARDS"},
		{map[string]string{"LEASE_TTL": "1s"}, "LEASE_TTL"},
		{map[string]string{"LEASE_TTL": "soon"}, "LEASE_TTL"},
		{map[string]string{"SHUTDOWN_TIMEOUT": "0s"}, "SHUTDOWN_TIMEOUT"},
		{map[string]string{"KEY_PREFIX": "a:b"}, "KEY_PREFIX"},
		{map[string]string{"JOB_RETENTION": "1s"}, "JOB_RETENTION"},
		{map[string]string{"IDEMPOTENCY_RETENTION": "x"}, "IDEMPOTENCY_RETENTION"},
		{map[string]string{"LOG_LEVEL": "loud"}, "LOG_LEVEL"},
		{map[string]string{"LOG_FORMAT": "xml"}, "LOG_FORMAT"},
		{map[string]string{"MONITORING_USER": "admin"}, "MONITORING_PASSWORD"},
		{map[string]string{"MONITORING_READONLY": "maybe"}, "MONITORING_READONLY"},
		{map[string]string{"API_TOKENS": "short:tenant"}, "API_TOKENS"},
		{map[string]string{"API_TOKENS": "0123456789abcdef"}, "API_TOKENS"},
		{map[string]string{"REBUILD_SOURCE_URL": "ftp://x"}, "REBUILD_SOURCE_URL"},
		{map[string]string{"BODY_LIMIT": "10"}, "BODY_LIMIT"},
	} {
		_, err := FromLookup(lookupFrom(tc.env), registry.All())
		var ce *Error
		if !errors.As(err, &ce) || ce.Var != tc.want {
			t.Errorf("%v: got %v, want an error naming %s", tc.env, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: error leaks the password: %v", tc.env, err)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error is not one line: %q", tc.env, err)
		}
	}
}

func TestRescueInterval(t *testing.T) {
	t.Parallel()
	c, err := FromLookup(lookupFrom(map[string]string{"RESCUE_INTERVAL": "500ms"}), registry.All())
	if err != nil || c.RescueInterval != 500*time.Millisecond {
		t.Fatalf("%v %v", c.RescueInterval, err)
	}
	if _, err := FromLookup(lookupFrom(map[string]string{"RESCUE_INTERVAL": "1ms"}), registry.All()); err == nil || !strings.Contains(err.Error(), "RESCUE_INTERVAL") {
		t.Fatalf("1ms accepted: %v", err)
	}
}
