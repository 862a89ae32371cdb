// Package rebuildcache is the example task rebuild-cache: a tenant's cache entry for a resource,
// rebuilt from its source under a fenced lease, with duplicates collapsed while one waits. It
// imports the task contract (tasks) and the library, nothing of the app.
package rebuildcache

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/redact"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/middleware"
	"github.com/jobguard/jobguard/tasks"
)

// TypeRebuildCache rebuilds a tenant's cache entry for a resource from its source.
const TypeRebuildCache = "rebuild-cache"

// RebuildCachePayload is the job's payload.
type RebuildCachePayload struct {
	TenantID   string `json:"tenant_id" openapi:"ref=ID"`
	ResourceID string `json:"resource_id" openapi:"ref=ID"`
}

// Validate names the first invalid field.
func (p RebuildCachePayload) Validate() error {
	if err := tasks.CheckID("tenant_id", p.TenantID); err != nil {
		return err
	}
	return tasks.CheckID("resource_id", p.ResourceID)
}

// Resource is what the lease protects: the tenant's resource.
func (p RebuildCachePayload) Resource() string { return p.TenantID + ":" + p.ResourceID }

// cacheKey is the entry's key, in the resource's slot: the handler writes it, the read model reads it.
func (p RebuildCachePayload) cacheKey(locks *locking.Client) string {
	return engine.ResourceKey(locks, p.Resource(), "cache")
}

// Tenant is the tenant the entry belongs to.
func (p RebuildCachePayload) Tenant() string { return p.TenantID }

// Spec is the job a validated payload is enqueued as: requests collapse while a rebuild waits,
// and one that arrives while a rebuild runs queues exactly one follow-up, so no update is lost.
func (p RebuildCachePayload) Spec() engine.Spec {
	b, _ := json.Marshal(p)
	return engine.Spec{Type: TypeRebuildCache, Tenant: p.TenantID, Resource: p.Resource(), Payload: b,
		Dedup: &engine.Dedup{Policy: engine.UntilStarted, Key: "rebuild"}}
}

// maxSourceBytes bounds what is read from the source.
const maxSourceBytes = 1 << 20

// SettingSourceURL is the setting naming where rebuild-cache fetches its source.
const SettingSourceURL = "REBUILD_SOURCE_URL"

// Task is rebuild-cache as the registry lists it.
var Task = tasks.Task{
	Description: "Rebuilds the tenant's cache entry for a resource. Requests collapse while a rebuild waits; " +
		"one that arrives while a rebuild runs queues exactly one follow-up.",
	Type: TypeRebuildCache,
	Config: middleware.Job{Queue: "default", MaxAttempts: 6, BackoffBase: 2 * time.Second, BackoffMax: 2 * time.Minute,
		// Limits count per tenant; none by default (TASK_LIMITS sets them per deployment).
		Limit: middleware.Limit{Key: tasks.ByTenant}},
	Request: func() tasks.Request { return &RebuildCachePayload{} },
	Settings: []tasks.Setting{{Name: SettingSourceURL, Validate: validateSourceURL,
		Help: "where rebuild-cache fetches its source (an http(s) URL); empty: the value is computed locally"}},
	Routes: []tasks.Route{{Method: http.MethodGet, Path: "/cache/:tenant/:resource", Tenant: "tenant",
		Params: map[string]func(string) error{"tenant": tasks.IDParam("tenant"), "resource": tasks.IDParam("resource")},
		Read: func(ctx context.Context, r tasks.ReadDeps, params map[string]string) (any, error) {
			return ReadCache(ctx, r.Locks, params["tenant"], params["resource"])
		},
		Summary:  "A tenant's cache entry for a resource",
		Response: CacheEntry{}}},
	Handler: func(d tasks.Deps) asynq.Handler {
		return asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
			job, _ := middleware.RunFrom(ctx)
			var p RebuildCachePayload
			if err := json.Unmarshal(t.Payload(), &p); err != nil {
				return middleware.Permanent(fmt.Errorf("payload: %w", err))
			}
			if err := p.Validate(); err != nil {
				return middleware.Permanent(err)
			}
			value, err := fetchSource(ctx, d, p)
			if err != nil {
				return err
			}
			version, err := cacheWrite.Run(ctx, job.Locks().Redis(), job.Fence(), []string{p.cacheKey(job.Locks())},
				value, job.JobID(), time.Now().UnixMilli()).Int64()
			if err != nil {
				return err // a stale token ends here: the newer run's entry stays
			}
			job.SetResult("version=" + strconv.FormatInt(version, 10))
			return nil
		})
	},
}

// cacheWrite replaces the cache entry, fenced: value, version, token, job and time.
var cacheWrite = locking.NewFencedScript(scripts.Read("cache_write.lua"))

// validateSourceURL accepts an empty value (computed locally) or an http(s) URL; its error shows
// the URL without its user name, password and query values.
func validateSourceURL(v string) error {
	if v == "" {
		return nil
	}
	if u, err := url.Parse(v); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an http(s) URL", redact.URL(v))
	}
	return nil
}

// fetchSource gets the resource's value: from REBUILD_SOURCE_URL when set, else computed locally.
// Upstream 5xx and timeouts are transient, 429 is rate-limited (Retry-After), other 4xx permanent.
// Its errors are stable texts ("source: HTTP 503", "source: request failed (connection refused)")
// that never name the URL: REBUILD_SOURCE_URL may hold a user name, a password or an api key, and
// net/http's *url.Error prints all but the password.
func fetchSource(ctx context.Context, d tasks.Deps, p RebuildCachePayload) (string, error) {
	source := d.Setting(SettingSourceURL)
	if source == "" {
		sum := sha256.Sum256([]byte(p.TenantID + "/" + p.ResourceID + "/" + time.Now().UTC().Format(time.RFC3339Nano)))
		return "computed:" + hex.EncodeToString(sum[:8]), nil
	}
	u, err := url.Parse(source)
	if err != nil {
		return "", middleware.Permanent(errors.New("source: REBUILD_SOURCE_URL is not a valid URL"))
	}
	q := u.Query()
	q.Set("tenant_id", p.TenantID)
	q.Set("resource_id", p.ResourceID)
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", middleware.Permanent(errors.New("source: REBUILD_SOURCE_URL cannot make a request"))
	}
	resp, err := d.HTTP.Do(req)
	if err != nil {
		return "", sourceFailure("request failed", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSourceBytes))
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return "", middleware.RetryAfter(errors.New("source: HTTP 429"), retryAfter(resp.Header.Get("Retry-After")))
	case resp.StatusCode >= 500:
		return "", fmt.Errorf("source: HTTP %d", resp.StatusCode)
	case resp.StatusCode >= 400:
		return "", middleware.Permanent(fmt.Errorf("source: HTTP %d", resp.StatusCode))
	case err != nil:
		return "", sourceFailure("reading the body failed", err)
	}
	return string(body), nil
}

// sourceError is a failed call to the source: a stable text, and the cause without the
// *url.Error around it (which names the URL), for errors.Is.
type sourceError struct {
	text  string
	cause error
}

func (e *sourceError) Error() string { return e.text }
func (e *sourceError) Unwrap() error { return e.cause }

// sourceFailure names what went wrong in a few words that carry nothing of the request.
func sourceFailure(what string, err error) error {
	var uerr *url.Error
	if errors.As(err, &uerr) {
		err = uerr.Err
	}
	var dnsErr *net.DNSError
	var netErr net.Error
	reason := "network error"
	switch {
	case errors.Is(err, context.Canceled):
		reason = "cancelled"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &netErr) && netErr.Timeout():
		reason = "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		reason = "connection refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		reason = "connection reset"
	case errors.As(err, &dnsErr):
		reason = "host not found"
	case errors.As(err, new(*tls.CertificateVerificationError)), errors.As(err, new(tls.RecordHeaderError)):
		reason = "tls failure"
	}
	return &sourceError{text: "source: " + what + " (" + reason + ")", cause: err}
}

// retryAfter parses Retry-After (seconds or an HTTP date); 1 s when absent or unparsable.
func retryAfter(v string) time.Duration {
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return time.Second
}

// CacheEntry is the read model of a tenant's cached resource.
type CacheEntry struct {
	TenantID     string `json:"tenant_id"`
	ResourceID   string `json:"resource_id"`
	Value        string `json:"value"`
	Version      int64  `json:"version"`
	FencingToken int64  `json:"fencing_token"`
	JobID        string `json:"job_id" openapi:"ref=JobID"`
	BuiltAt      int64  `json:"built_at"`
}

// ErrNoEntry: the resource was never built (an ErrNotFound: GET /cache answers 404).
var ErrNoEntry = tasks.NotFound("no cache entry")

// ReadCache reads a cache entry in one round trip; GET /cache/{tenant}/{resource} answers it.
func ReadCache(ctx context.Context, locks *locking.Client, tenant, resource string) (CacheEntry, error) {
	key := RebuildCachePayload{TenantID: tenant, ResourceID: resource}.cacheKey(locks)
	m, err := locks.Redis().HGetAll(ctx, key).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return CacheEntry{}, err
	}
	if len(m) == 0 {
		return CacheEntry{}, fmt.Errorf("%w for %s/%s", ErrNoEntry, tenant, resource)
	}
	return CacheEntry{
		TenantID: tenant, ResourceID: resource, Value: m["value"], JobID: m["job_id"],
		Version: toInt(m["version"]), FencingToken: toInt(m["token"]), BuiltAt: toInt(m["built_at"]),
	}, nil
}

// toInt reads an integer field of a Redis hash; a missing or malformed one is 0.
func toInt(v any) int64 {
	s, _ := v.(string)
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
