// Package config is the configuration of a jobguard process: Config, read from the environment
// (FromLookup) with the settings the task types declare, validated, every error naming its
// variable (*Error) with secrets redacted; the list of variables (Variables) that help and
// .env.example print; SCHEDULES, TASK_LIMITS, ENCRYPT_TYPES and the key ring. It may import the
// library, the task contract and app/strictjson; nothing else of app, nor any example task.
package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/schedule"
	"github.com/jobguard/jobguard/tasks"
)

// Redis modes accepted by REDIS_MODE.
const (
	RedisStandalone = "standalone"
	RedisSentinel   = "sentinel"
	RedisCluster    = "cluster"
)

// Log formats accepted by LOG_FORMAT.
const (
	LogJSON    = "json"
	LogConsole = "console"
)

// Config is the whole configuration of a jobguard process. The zero value is not valid; start from
// Defaults or FromEnv. Every field names the environment variable it is read from.
type Config struct {
	// RedisURL (REDIS_URL) is the Redis to use. Empty: an embedded in-memory Redis that loses
	// everything when the process exits (development only).
	RedisURL string
	// RedisMode (REDIS_MODE) says how RedisURL is parsed: standalone (default, redis.ParseURL),
	// sentinel (redis.ParseFailoverURL) or cluster (redis.ParseClusterURL).
	RedisMode string
	// HTTPAddr (HTTP_ADDR) is where the API and UI listen, and the health and metrics endpoints
	// when AdminAddr is empty. Default 127.0.0.1:8080.
	HTTPAddr string
	// AdminAddr (ADMIN_ADDR) is where /metrics, /healthz and /readyz listen instead, apart from the
	// API. Empty (default): they are served on HTTPAddr.
	AdminAddr string
	// WorkerConcurrency (WORKER_CONCURRENCY) is the most handlers one worker process runs at once,
	// zombies included. Default 10.
	WorkerConcurrency int
	// Queues (QUEUES, e.g. "critical=6,default=3,low=1") are the queues a worker serves and their
	// weights. Default critical=6,default=3,low=1.
	Queues map[string]int
	// QueueShards (QUEUE_SHARDS) spreads each queue of Queues over this many asynq queues whose hash
	// tags sit on different Redis Cluster masters (middleware.Guard.ShardQueue): the number of masters
	// on a cluster. Default 1 (unsharded); 1-64.
	QueueShards int
	// LeaseTTL (LEASE_TTL) is the TTL of resource leases and so the time after which the job of a
	// dead worker is rescued. Default 30s; at least 2s.
	LeaseTTL time.Duration
	// ShutdownTimeout (SHUTDOWN_TIMEOUT) is how long running handlers may take to finish after a
	// stop signal before their contexts are cancelled. Default 25s.
	ShutdownTimeout time.Duration
	// KeyPrefix (KEY_PREFIX) is put before every key jobguard writes, so several apps can share one
	// Redis. Default "jobguard".
	KeyPrefix string
	// JobRetention (JOB_RETENTION) is how long a finished job's record and timeline are kept.
	// Default 168h (7 days).
	JobRetention time.Duration
	// IdempotencyRetention (IDEMPOTENCY_RETENTION) is how long an Idempotency-Key's stored answer is
	// kept. Default 24h.
	IdempotencyRetention time.Duration
	// LogLevel (LOG_LEVEL: trace, debug, info, warn, error). Default info.
	LogLevel zerolog.Level
	// LogFormat (LOG_FORMAT: json or console). Default json.
	LogFormat string
	// MonitoringUser and MonitoringPassword (MONITORING_USER, MONITORING_PASSWORD) protect the UI
	// under /monitoring/ with basic auth. Both or neither; without them a process that serves the UI
	// (api, all) starts only when HTTPAddr is a loopback address (New checks; a worker needs none).
	MonitoringUser     string
	MonitoringPassword string
	// MonitoringReadOnly (MONITORING_READONLY) lets the UI look but not change anything. Default false.
	MonitoringReadOnly bool
	// MonitoringPrometheus (MONITORING_PROMETHEUS_ADDRESS) is a Prometheus that scrapes jobguard's
	// /metrics; with it the UI draws its queue charts. Empty: no charts.
	MonitoringPrometheus string
	// APITokens (API_TOKENS, "token1:tenantA,token2:tenantB") maps bearer tokens to tenants. Empty:
	// the API is open (development only).
	APITokens map[string]string
	// Tasks are the task types the process runs; not from the environment: the program hands them
	// to FromLookup (cmd/jobguard: tasks/registry). Defaults has none.
	Tasks []tasks.Task
	// TaskSettings holds the value of each setting the Tasks declare (tasks.Setting), by variable
	// name, read from the environment with the rest. A setting missing here has its default.
	TaskSettings map[string]string
	// RescueInterval (RESCUE_INTERVAL) is how often each worker looks for jobs of dead workers.
	// Default 2s.
	RescueInterval time.Duration
	// ReconcileInterval (RECONCILE_INTERVAL) is how often each worker compares job records with
	// asynq's deliveries and repairs drift (engine.Reconciler). Default 15s.
	ReconcileInterval time.Duration
	// BodyLimit (BODY_LIMIT) is the largest request body accepted, in bytes. Default 65536.
	BodyLimit int
	// DatabaseURL (DATABASE_URL) is an optional PostgreSQL (postgres://...): tasks that keep their
	// effects in SQL (Task.SQLSchema) use it, fenced. Empty: everything is in Redis.
	DatabaseURL string
	// DatabaseMigrate (DATABASE_MIGRATE) applies pending schema steps at start-up; false: start-up
	// fails when a step is missing (run `jobguard migrate` first). Default false.
	DatabaseMigrate bool
	// RequestTimeout (REQUEST_TIMEOUT) is the deadline of every HTTP request: the Redis commands it
	// sends honour it, and a request that reaches it answers 503. Default 5s.
	RequestTimeout time.Duration
	// DurableReplicas (DURABLE_REPLICAS) turns on durable mode: the writes that make a promise
	// (an enqueue's confirmation before its 202, a run's start, a done job's finish, an applied
	// record) wait, with Redis WAIT in their round trip, until this many replicas hold them; when
	// they do not within DurableTimeout the enqueue answers 503 not_durable and a start does not
	// run its handler. Default 0: off.
	DurableReplicas int
	// DurableTimeout (DURABLE_TIMEOUT) bounds each wait for the replicas. Default 1s.
	DurableTimeout time.Duration
	// FairMetricKeys (FAIR_METRIC_KEYS) is how many tenants per fairly dispatched type the
	// jobguard_fair_key_* gauges name (the top by backlog and by running jobs). Default 0: none,
	// since /metrics on HTTP_ADDR is readable with any tenant's token; serve it on ADMIN_ADDR first.
	FairMetricKeys int
	// RateLimit (RATE_LIMIT) is how many API requests per second each tenant may send, on average,
	// across every API process (GCRA in Redis). Default 100; 0 turns the limit off.
	RateLimit int
	// RateLimitBurst (RATE_LIMIT_BURST) is how many requests a tenant that was idle may send at
	// once. Default 200.
	RateLimitBurst int
	// EventStreamsPerTenant (EVENT_STREAMS_PER_TENANT) is how many GET /jobs/{id}/events streams
	// and ?wait= long-polls one tenant may have open on one API process (an open API: one client
	// address). Default 20.
	EventStreamsPerTenant int
	// EventStreamsMax (EVENT_STREAMS_MAX) is how many event streams and long-polls one API process
	// keeps open in all. Default 1000.
	EventStreamsMax int
	// Schedules (SCHEDULES) are this deployment's periodic jobs, a JSON array of {"name", "spec",
	// "type", "payload", "timezone", "overlap", "catchup"}, on top of those the task types declare
	// (tasks.Task.Schedules). Default none.
	Schedules []schedule.Spec
	// OperatorTokens (OPERATOR_TOKENS, "tok1,tok2") are the bearer tokens of the operator routes
	// (/schedules); tenant tokens do not reach them. Empty with API_TOKENS empty: open.
	OperatorTokens map[string]string
	// EncryptionKeys (ENCRYPTION_KEYS, "id1:base64key,id0:base64key", or the same in the file
	// ENCRYPTION_KEYS_FILE names, one entry a line) is the key ring that encrypts job data at
	// rest: the first key encrypts, every key decrypts. Keys are 32 bytes (AES-256), in standard
	// base64. Default none.
	EncryptionKeys *middleware.KeyRing
	// MonitoringDecrypt (MONITORING_DECRYPT) lets the UI show encrypted results decrypted; false
	// (default): it shows "encrypted".
	MonitoringDecrypt bool
}

// Variable is one environment variable jobguard reads: its name, its default as an operator writes
// it, and what it means. Variables is the one list of them; jobguard help, .env.example and the
// README's configuration table follow it, and a test checks that FromLookup reads exactly these.
type Variable struct {
	Name    string
	Default string // "" when unset means something, said in Help
	Help    string
	// Reader is who reads it besides the configuration: "" for FromLookup, else the subcommand or
	// part that does (healthcheck, tracing).
	Reader string
}

// Variables lists every variable, in the order FromLookup reads them. A task type's settings
// (tasks.Setting) come on top of these.
var Variables = []Variable{
	{Name: "REDIS_URL", Help: "the Redis to use; empty: an embedded in-memory Redis that loses everything at exit (development only)"},
	{Name: "REDIS_MODE", Default: RedisStandalone, Help: "how REDIS_URL is read: standalone, sentinel (needs master_name=NAME) or cluster (?addr= for more nodes)"},
	{Name: "HTTP_ADDR", Default: "127.0.0.1:8080", Help: "listen address of the API and UI, and of /metrics, /healthz, /readyz when ADMIN_ADDR is empty"},
	{Name: "ADMIN_ADDR", Help: "listen address of /metrics, /healthz and /readyz apart from the API (e.g. 0.0.0.0:9090); empty: they are on HTTP_ADDR. A worker with it does not listen on HTTP_ADDR"},
	{Name: "WORKER_CONCURRENCY", Default: "10", Help: "most handlers one worker runs at once, zombies included (1-10000)"},
	{Name: "QUEUES", Default: "critical=6,default=3,low=1", Help: "queues a worker serves, with their weights"},
	{Name: "QUEUE_SHARDS", Default: "1", Help: "asynq queues each queue of QUEUES is spread over, on different Redis Cluster masters (1-64; 1: unsharded)"},
	{Name: "LEASE_TTL", Default: "30s", Help: "resource lease TTL; also how soon a dead worker's job is rescued (2s-1h)"},
	{Name: "SHUTDOWN_TIMEOUT", Default: "25s", Help: "how long handlers may run on after SIGTERM (1s-10m)"},
	{Name: "KEY_PREFIX", Default: "jobguard", Help: "prefix of every key jobguard writes (1-64 of [A-Za-z0-9._-])"},
	{Name: "JOB_RETENTION", Default: "168h", Help: "how long finished job records and timelines are kept (at least 1m)"},
	{Name: "IDEMPOTENCY_RETENTION", Default: "24h", Help: "how long an Idempotency-Key answer is kept (at least 1m)"},
	{Name: "LOG_LEVEL", Default: "info", Help: "trace, debug, info, warn or error"},
	{Name: "LOG_FORMAT", Default: LogJSON, Help: "json or console"},
	{Name: "MONITORING_USER", Help: "basic-auth user of the UI (/monitoring/); with MONITORING_PASSWORD, required where the UI is served on a non-loopback HTTP_ADDR"},
	{Name: "MONITORING_PASSWORD", Help: "basic-auth password of the UI; set with MONITORING_USER or not at all"},
	{Name: "MONITORING_READONLY", Default: "false", Help: "the UI can look but not pause, delete, run or archive"},
	{Name: "MONITORING_PROMETHEUS_ADDRESS", Help: "a Prometheus scraping /metrics (http(s) URL), for the UI's charts; empty: no charts"},
	{Name: "API_TOKENS", Help: "token1:tenantA,token2:tenantB (tokens of at least 16 characters); empty: the API is open (development only)"},
	{Name: "BODY_LIMIT", Default: "65536", Help: "largest request body in bytes (1024-16777216); larger is 413"},
	{Name: "RESCUE_INTERVAL", Default: "2s", Help: "how often each worker looks for jobs of dead workers (100ms-1m)"},
	{Name: "RECONCILE_INTERVAL", Default: "15s", Help: "how often each worker repairs drift between job records and asynq's deliveries: a lost or archived delivery of a job that has not ended, a delivery whose job is gone (100ms-1h)"},
	{Name: "REQUEST_TIMEOUT", Default: "5s", Help: "deadline of every HTTP request (500ms-1m); one that reaches it answers 503"},
	{Name: "DATABASE_URL", Help: "a PostgreSQL (postgres://...) for the tasks that keep their effects in SQL, fenced; empty: Redis only"},
	{Name: "DATABASE_MIGRATE", Default: "false", Help: "apply pending PostgreSQL schema steps at start-up; false: start-up fails until `jobguard migrate` ran"},
	{Name: "DURABLE_REPLICAS", Default: "0", Help: "durable mode: replicas that must hold an enqueue's confirmation, a run's start, a done job's finish and an applied record before they count (Redis WAIT in their round trip; 0-16, 0 off); short of them within DURABLE_TIMEOUT an enqueue is 503 not_durable"},
	{Name: "DURABLE_TIMEOUT", Default: "1s", Help: "how long durable mode waits for the replicas per write (10ms-2s)"},
	{Name: "FAIR_METRIC_KEYS", Default: "0", Help: "tenants per fairly dispatched type named by the jobguard_fair_key_* gauges (0-100; 0: none, as any tenant's token reads /metrics on HTTP_ADDR)"},
	{Name: "RATE_LIMIT", Default: "100", Help: "API requests per second each tenant may send on average, across all API processes (0 turns it off)"},
	{Name: "RATE_LIMIT_BURST", Default: "200", Help: "requests an idle tenant may send at once (1-1000000)"},
	{Name: "EVENT_STREAMS_PER_TENANT", Default: "20", Help: "GET /jobs/{id}/events streams and ?wait= long-polls a tenant may have open on one API process (1-100000); more is 429"},
	{Name: "EVENT_STREAMS_MAX", Default: "1000", Help: "event streams and long-polls one API process keeps open in all (1-1000000); more is 429"},
	{Name: "TASK_LIMITS", Help: "limits per key of task types, over their code's: type=concurrency:N,rate:R/1s,burst:B;type2=... (the key each counts by is the task's: the tenant for the examples), and fair dispatch: fair:on,capacity:N,weight:KEY=W,sequence:on,on_failure:block,shards:N (docs/FAIRNESS.md); empty: the code's"},
	{Name: "SCHEDULES", Help: `periodic jobs: a JSON array of {"name","spec","type","payload","timezone","overlap","catchup"}; empty: none`},
	{Name: "OPERATOR_TOKENS", Help: "bearer tokens of the operator routes (/schedules), comma-separated, at least 16 characters each"},
	{Name: "ENCRYPTION_KEYS", Help: "key ring encrypting job data at rest: id1:base64key,id0:base64key (32-byte keys, standard base64; the first encrypts, all decrypt); empty: none"},
	{Name: "ENCRYPTION_KEYS_FILE", Help: "a file holding the key ring instead (one id:base64key a line, current first); not with ENCRYPTION_KEYS"},
	{Name: "ENCRYPT_TYPES", Help: "task types whose payloads, results and checkpoints are kept encrypted (comma-separated); needs a key ring"},
	{Name: "MONITORING_DECRYPT", Default: "false", Help: "the UI shows encrypted job results decrypted; false: it shows \"encrypted\""},
	{Name: "HEALTHCHECK_URL", Help: "what jobguard healthcheck asks; empty: http://127.0.0.1:<port of ADMIN_ADDR, else HTTP_ADDR>/readyz", Reader: "healthcheck"},
	{Name: "OTEL_EXPORTER_OTLP_ENDPOINT", Help: "OTLP/HTTP endpoint of a trace collector; set (or OTEL_TRACES_EXPORTER=otlp) turns tracing on; the other OTEL_* variables apply", Reader: "tracing"},
}

// Defaults returns the configuration used for every variable that is not set.
func Defaults() Config {
	return Config{
		RedisMode:             RedisStandalone,
		HTTPAddr:              "127.0.0.1:8080",
		WorkerConcurrency:     10,
		Queues:                map[string]int{"critical": 6, "default": 3, "low": 1},
		QueueShards:           1,
		LeaseTTL:              30 * time.Second,
		ShutdownTimeout:       25 * time.Second,
		KeyPrefix:             "jobguard",
		JobRetention:          7 * 24 * time.Hour,
		IdempotencyRetention:  24 * time.Hour,
		LogLevel:              zerolog.InfoLevel,
		LogFormat:             LogJSON,
		BodyLimit:             64 << 10,
		RescueInterval:        2 * time.Second,
		ReconcileInterval:     15 * time.Second,
		RequestTimeout:        5 * time.Second,
		DurableTimeout:        time.Second,
		RateLimit:             100,
		RateLimitBurst:        200,
		EventStreamsPerTenant: 20,
		EventStreamsMax:       1000,
	}
}

// Error names the environment variable whose value is wrong.
type Error struct {
	Var string
	Err error
}

func (e *Error) Error() string { return "config: " + e.Var + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// FromEnv reads the configuration from the process environment and validates it, for a process
// that runs the task types of list.
func FromEnv(list []tasks.Task) (Config, error) { return FromLookup(os.LookupEnv, list) }

// FromLookup reads the configuration through lookup (os.LookupEnv in production, a map in tests)
// and validates it, for a process that runs the task types of list: the settings they declare are
// read and validated with the rest. The error names the first variable that is wrong.
func FromLookup(lookup func(string) (string, bool), list []tasks.Task) (Config, error) {
	c := Defaults()
	c.Tasks = list
	p := envParser{lookup: lookup}
	p.str("REDIS_URL", &c.RedisURL)
	p.str("REDIS_MODE", &c.RedisMode)
	p.str("HTTP_ADDR", &c.HTTPAddr)
	p.str("ADMIN_ADDR", &c.AdminAddr)
	p.integer("WORKER_CONCURRENCY", &c.WorkerConcurrency)
	p.fn("QUEUES", func(v string) (err error) { c.Queues, err = parseQueues(v); return err })
	p.integer("QUEUE_SHARDS", &c.QueueShards)
	p.duration("LEASE_TTL", &c.LeaseTTL)
	p.duration("SHUTDOWN_TIMEOUT", &c.ShutdownTimeout)
	p.str("KEY_PREFIX", &c.KeyPrefix)
	p.duration("JOB_RETENTION", &c.JobRetention)
	p.duration("IDEMPOTENCY_RETENTION", &c.IdempotencyRetention)
	p.fn("LOG_LEVEL", func(v string) (err error) { c.LogLevel, err = parseLevel(v); return err })
	p.str("LOG_FORMAT", &c.LogFormat)
	p.str("MONITORING_USER", &c.MonitoringUser)
	p.str("MONITORING_PASSWORD", &c.MonitoringPassword)
	p.fn("MONITORING_READONLY", func(v string) (err error) { c.MonitoringReadOnly, err = strconv.ParseBool(v); return err })
	p.str("MONITORING_PROMETHEUS_ADDRESS", &c.MonitoringPrometheus)
	p.fn("API_TOKENS", func(v string) (err error) { c.APITokens, err = parseTokens(v); return err })
	p.integer("BODY_LIMIT", &c.BodyLimit)
	p.duration("RESCUE_INTERVAL", &c.RescueInterval)
	p.duration("RECONCILE_INTERVAL", &c.ReconcileInterval)
	p.duration("REQUEST_TIMEOUT", &c.RequestTimeout)
	p.str("DATABASE_URL", &c.DatabaseURL)
	p.fn("DATABASE_MIGRATE", func(v string) (err error) { c.DatabaseMigrate, err = strconv.ParseBool(v); return err })
	p.integer("DURABLE_REPLICAS", &c.DurableReplicas)
	p.duration("DURABLE_TIMEOUT", &c.DurableTimeout)
	p.integer("FAIR_METRIC_KEYS", &c.FairMetricKeys)
	p.integer("RATE_LIMIT", &c.RateLimit)
	p.integer("RATE_LIMIT_BURST", &c.RateLimitBurst)
	p.integer("EVENT_STREAMS_PER_TENANT", &c.EventStreamsPerTenant)
	p.integer("EVENT_STREAMS_MAX", &c.EventStreamsMax)
	p.fn("TASK_LIMITS", func(v string) (err error) { c.Tasks, err = applyTaskLimits(v, c.Tasks); return err })
	p.fn("SCHEDULES", func(v string) (err error) { c.Schedules, err = parseSchedules(v); return err })
	p.fn("OPERATOR_TOKENS", func(v string) (err error) { c.OperatorTokens, err = parseOperatorTokens(v); return err })
	p.fn("ENCRYPTION_KEYS", func(v string) (err error) { c.EncryptionKeys, err = parseKeyRing(v); return err })
	p.fn("ENCRYPTION_KEYS_FILE", func(v string) (err error) {
		if c.EncryptionKeys != nil {
			return errors.New("set ENCRYPTION_KEYS or ENCRYPTION_KEYS_FILE, not both")
		}
		c.EncryptionKeys, err = readKeyRingFile(v)
		return err
	})
	p.fn("ENCRYPT_TYPES", func(v string) (err error) { c.Tasks, err = applyEncryptTypes(v, c.Tasks); return err })
	p.fn("MONITORING_DECRYPT", func(v string) (err error) { c.MonitoringDecrypt, err = strconv.ParseBool(v); return err })
	c.TaskSettings = p.taskSettings(c.Tasks) // after every variable of the app's own
	if p.err != nil {
		return Config{}, p.err
	}
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

var keyPrefixRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)
var queueNameRe = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Validate checks every field and returns a *Error naming the variable of the first bad one.
func (c Config) Validate() error {
	bad := func(v string, format string, args ...any) error {
		return &Error{Var: v, Err: fmt.Errorf(format, args...)}
	}
	switch c.RedisMode {
	case RedisStandalone, RedisSentinel, RedisCluster:
	default:
		return bad("REDIS_MODE", "%q is not one of standalone, sentinel, cluster", c.RedisMode)
	}
	if c.RedisURL != "" {
		if _, err := c.RedisOptions(); err != nil {
			return bad("REDIS_URL", "%w", RedactErr(err, c.RedisURL))
		}
	} else if c.RedisMode != RedisStandalone {
		return bad("REDIS_URL", "is required when REDIS_MODE is %s", c.RedisMode)
	}
	if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
		return bad("HTTP_ADDR", "%q is not host:port", c.HTTPAddr)
	}
	if c.AdminAddr != "" {
		if _, _, err := net.SplitHostPort(c.AdminAddr); err != nil {
			return bad("ADMIN_ADDR", "%q is not host:port", c.AdminAddr)
		}
	}
	if c.WorkerConcurrency < 1 || c.WorkerConcurrency > 10000 {
		return bad("WORKER_CONCURRENCY", "%d is not between 1 and 10000", c.WorkerConcurrency)
	}
	if len(c.Queues) == 0 {
		return bad("QUEUES", "at least one queue is required")
	}
	for name, w := range c.Queues {
		if !queueNameRe.MatchString(name) || w < 1 {
			return bad("QUEUES", "queue %q: name must be 1-64 of [A-Za-z0-9._-] and weight at least 1", name)
		}
	}
	if c.QueueShards < 1 || c.QueueShards > middleware.MaxShards {
		return bad("QUEUE_SHARDS", "%d is not between 1 and %d", c.QueueShards, middleware.MaxShards)
	}
	if c.LeaseTTL < 2*time.Second || c.LeaseTTL > time.Hour {
		return bad("LEASE_TTL", "%s is not between 2s and 1h", c.LeaseTTL)
	}
	if c.ShutdownTimeout < time.Second || c.ShutdownTimeout > 10*time.Minute {
		return bad("SHUTDOWN_TIMEOUT", "%s is not between 1s and 10m", c.ShutdownTimeout)
	}
	if !keyPrefixRe.MatchString(c.KeyPrefix) {
		return bad("KEY_PREFIX", "%q must be 1-64 characters of [A-Za-z0-9._-]", c.KeyPrefix)
	}
	if c.JobRetention < time.Minute {
		return bad("JOB_RETENTION", "%s is shorter than 1m", c.JobRetention)
	}
	if c.IdempotencyRetention < time.Minute {
		return bad("IDEMPOTENCY_RETENTION", "%s is shorter than 1m", c.IdempotencyRetention)
	}
	if c.LogFormat != LogJSON && c.LogFormat != LogConsole {
		return bad("LOG_FORMAT", "%q is not json or console", c.LogFormat)
	}
	if (c.MonitoringUser == "") != (c.MonitoringPassword == "") {
		return bad("MONITORING_PASSWORD", "MONITORING_USER and MONITORING_PASSWORD are set together or not at all")
	}
	if c.MonitoringPrometheus != "" {
		if u, err := url.Parse(c.MonitoringPrometheus); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("MONITORING_PROMETHEUS_ADDRESS", "%q is not an http(s) URL", redact.URL(c.MonitoringPrometheus))
		}
	}
	if err := c.validateTasks(); err != nil {
		return err
	}
	if err := c.validateSchedules(); err != nil {
		return err
	}
	for tok := range c.OperatorTokens {
		if _, both := c.APITokens[tok]; both {
			return bad("OPERATOR_TOKENS", "a token is in API_TOKENS too: an operator token is no tenant's")
		}
	}
	if c.RescueInterval < 100*time.Millisecond || c.RescueInterval > time.Minute {
		return bad("RESCUE_INTERVAL", "%s is not between 100ms and 1m", c.RescueInterval)
	}
	if c.ReconcileInterval < 100*time.Millisecond || c.ReconcileInterval > time.Hour {
		return bad("RECONCILE_INTERVAL", "%s is not between 100ms and 1h", c.ReconcileInterval)
	}
	if c.BodyLimit < 1024 || c.BodyLimit > 16<<20 {
		return bad("BODY_LIMIT", "%d is not between 1024 and 16777216", c.BodyLimit)
	}
	if c.RequestTimeout < 500*time.Millisecond || c.RequestTimeout > time.Minute {
		return bad("REQUEST_TIMEOUT", "%s is not between 500ms and 1m", c.RequestTimeout)
	}
	if c.DurableReplicas < 0 || c.DurableReplicas > 16 {
		return bad("DURABLE_REPLICAS", "%d is not between 0 (off) and 16", c.DurableReplicas)
	}
	if c.DurableReplicas > 0 && c.Embedded() {
		return bad("DURABLE_REPLICAS", "needs REDIS_URL: the embedded Redis has no replicas")
	}
	// Below the 3 s socket read timeout, which would cut a WAIT's answer off.
	if c.FairMetricKeys < 0 || c.FairMetricKeys > 100 {
		return bad("FAIR_METRIC_KEYS", "%d is not between 0 (no tenant named) and 100", c.FairMetricKeys)
	}
	if c.DurableTimeout < 10*time.Millisecond || c.DurableTimeout > 2*time.Second {
		return bad("DURABLE_TIMEOUT", "%s is not between 10ms and 2s", c.DurableTimeout)
	}
	if c.RateLimit < 0 || c.RateLimit > 1_000_000 {
		return bad("RATE_LIMIT", "%d is not between 0 (off) and 1000000 requests per second", c.RateLimit)
	}
	if c.RateLimit > 0 && (c.RateLimitBurst < 1 || c.RateLimitBurst > 1_000_000) {
		return bad("RATE_LIMIT_BURST", "%d is not between 1 and 1000000", c.RateLimitBurst)
	}
	if c.EventStreamsPerTenant < 1 || c.EventStreamsPerTenant > 100_000 {
		return bad("EVENT_STREAMS_PER_TENANT", "%d is not between 1 and 100000", c.EventStreamsPerTenant)
	}
	if c.EventStreamsMax < 1 || c.EventStreamsMax > 1_000_000 {
		return bad("EVENT_STREAMS_MAX", "%d is not between 1 and 1000000", c.EventStreamsMax)
	}
	if enc := EncryptedTypes(c.Tasks); len(enc) > 0 && c.EncryptionKeys == nil {
		return bad("ENCRYPT_TYPES", "%s encrypted: needs ENCRYPTION_KEYS or ENCRYPTION_KEYS_FILE", strings.Join(enc, ", "))
	}
	return nil
}

// Embedded reports whether the process runs on the in-memory development Redis.
func (c Config) Embedded() bool { return c.RedisURL == "" }

// PoolSize is the connection pool of the one Redis client a process shares: every handler may hold
// one connection for its own scripts while asynq's fetchers, heartbeats and the API use the rest.
func (c Config) PoolSize() int { return 2*c.WorkerConcurrency + 32 }

// RedisOptions parses RedisURL for RedisMode into universal options.
func (c Config) RedisOptions() (*redis.UniversalOptions, error) {
	switch c.RedisMode {
	case RedisSentinel:
		o, err := redis.ParseFailoverURL(c.RedisURL)
		if err != nil {
			return nil, err
		}
		if o.MasterName == "" {
			return nil, errors.New("a sentinel URL needs master_name=NAME")
		}
		return &redis.UniversalOptions{
			Addrs: o.SentinelAddrs, MasterName: o.MasterName, DB: o.DB,
			Username: o.Username, Password: o.Password,
			SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword,
			TLSConfig: o.TLSConfig, Protocol: o.Protocol,
		}, nil
	case RedisCluster:
		o, err := redis.ParseClusterURL(c.RedisURL)
		if err != nil {
			return nil, err
		}
		return &redis.UniversalOptions{
			Addrs: o.Addrs, Username: o.Username, Password: o.Password,
			TLSConfig: o.TLSConfig, Protocol: o.Protocol, IsClusterMode: true,
		}, nil
	default:
		o, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			return nil, err
		}
		return &redis.UniversalOptions{
			Addrs: []string{o.Addr}, DB: o.DB, Username: o.Username, Password: o.Password,
			TLSConfig: o.TLSConfig, Protocol: o.Protocol,
		}, nil
	}
}

// RedactErr keeps the credentials and query values of a URL out of the start-up error line.
func RedactErr(err error, _ string) error { return redact.Error(err) }

// IsLoopback reports whether addr (host:port) listens on loopback only: the UI may then be served
// without credentials.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func parseQueues(v string) (map[string]int, error) {
	q := map[string]int{}
	for _, part := range strings.Split(v, ",") {
		name, weight, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("%q is not name=weight", part)
		}
		w, err := strconv.Atoi(weight)
		if err != nil {
			return nil, fmt.Errorf("weight of %q is not an integer", name)
		}
		if _, dup := q[name]; dup {
			return nil, fmt.Errorf("queue %q is listed twice", name)
		}
		q[name] = w
	}
	return q, nil
}

func parseTokens(v string) (map[string]string, error) {
	m := map[string]string{}
	for i, part := range strings.Split(v, ",") {
		token, tenant, ok := strings.Cut(strings.TrimSpace(part), ":")
		// Tokens are never echoed back: the error names the entry by position only.
		if !ok || len(token) < 16 || !TenantPattern.MatchString(tenant) {
			return nil, fmt.Errorf("entry %d is not token:tenant (token at least 16 characters, tenant 1-128 of [A-Za-z0-9._-])", i+1)
		}
		if _, dup := m[token]; dup {
			return nil, fmt.Errorf("entry %d repeats a token", i+1)
		}
		m[token] = tenant
	}
	return m, nil
}

// TenantPattern is what a tenant id is: API tokens' tenants, and the rate limit's budget names.
var TenantPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func parseLevel(v string) (zerolog.Level, error) {
	switch v {
	case "trace", "debug", "info", "warn", "error":
		return zerolog.ParseLevel(v)
	}
	return 0, fmt.Errorf("%q is not one of trace, debug, info, warn, error", v)
}

// QueueNames lists the configured queues, highest weight first.
func (c Config) QueueNames() []string {
	names := make([]string, 0, len(c.Queues))
	for n := range c.Queues {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if c.Queues[names[i]] != c.Queues[names[j]] {
			return c.Queues[names[i]] > c.Queues[names[j]]
		}
		return names[i] < names[j]
	})
	return names
}

// envParser reads variables and keeps the first error, so FromLookup reads as a list.
type envParser struct {
	lookup func(string) (string, bool)
	err    error
	names  []string // every variable asked for, in order
}

func (p *envParser) fn(name string, parse func(string) error) {
	p.names = append(p.names, name)
	if p.err != nil {
		return
	}
	v, ok := p.lookup(name)
	if !ok || v == "" {
		return
	}
	if err := parse(v); err != nil {
		p.err = &Error{Var: name, Err: err}
	}
}

func (p *envParser) str(name string, dst *string) {
	p.fn(name, func(v string) error { *dst = v; return nil })
}

func (p *envParser) integer(name string, dst *int) {
	p.fn(name, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%q is not an integer", v)
		}
		*dst = n
		return nil
	})
}

func (p *envParser) duration(name string, dst *time.Duration) {
	p.fn(name, func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%q is not a duration (e.g. 30s, 5m, 24h)", v)
		}
		*dst = d
		return nil
	})
}
