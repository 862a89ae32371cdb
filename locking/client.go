package locking

import (
	"crypto/rand"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel errors, inspected with errors.Is.
var (
	// ErrNotAcquired: another owner holds the lease (the error is a *HeldError).
	ErrNotAcquired = errors.New("locking: lease not acquired")
	// ErrLeaseLost: the lease was refused on renewal, could not be renewed, or its validity ran out.
	ErrLeaseLost = errors.New("locking: lease lost")
	// ErrRenewFailed: a renewal got an error instead of an answer (Redis unreachable, timeout).
	// Whether Redis extended the lease is unknown, so the lease counts as lost: ErrRenewFailed
	// wraps ErrLeaseLost.
	ErrRenewFailed = fmt.Errorf("%w: renewal failed", ErrLeaseLost)
	// ErrStaleToken: a newer token (or the same token from another owner) has written the target
	// (the error is a *StaleError).
	ErrStaleToken = errors.New("locking: stale fencing token")
	// ErrInvalidResource: the resource name cannot be made into a key.
	ErrInvalidResource = errors.New("locking: invalid resource")
)

//go:embed scripts/*.lua
var scriptFS embed.FS

func mustScript(name string) string {
	b, err := scriptFS.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// protocol is scripts/protocol.lua: the lease and fence protocol as local Lua functions, the start
// of every script this package runs or builds.
var protocol = mustScript("protocol.lua")

// NewProtocolScript builds a script from the protocol fragment (scripts/protocol.lua) followed by
// body, which may call its local functions (lease_acquire, lease_renew, lease_release,
// lease_holder, heartbeat_stamp, fence_last, fence_next, fence_seen, fence_check, fence_record,
// fence_seal, fence_sealed) with its own KEYS and ARGV; doc.go lists what they guarantee. Only the
// functions the body uses are put before it (Compose). Every key the body touches must share one
// hash tag (Client.Key), so the script runs unchanged on Redis Cluster. Locals the body declares
// shadow the fragment's names.
func NewProtocolScript(body string) *redis.Script {
	return redis.NewScript(Compose(body, protocol))
}

var (
	acquireScript = NewProtocolScript(mustScript("acquire.lua"))
	renewScript   = NewProtocolScript(mustScript("renew.lua"))
	releaseScript = NewProtocolScript(mustScript("release.lua"))
	inspectScript = NewProtocolScript(mustScript("inspect.lua"))
	raiseScript   = NewProtocolScript(mustScript("raise.lua"))
	fencePrelude  = mustScript("fence_prelude.lua")
)

// Clock gives the current time. time.Now carries a monotonic reading, so durations between two of
// its values are immune to wall-clock jumps; a test clock may return anything.
type Clock interface{ Now() time.Time }

// SystemClock is time.Now as a Clock: the default of every Clock in jobguard, one for all.
var SystemClock Clock = systemClock{}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// Client takes leases and makes fenced writes through one go-redis client.
type Client struct {
	rdb         redis.UniversalClient
	prefix      string
	clock       Clock
	drift       float64
	minMargin   time.Duration
	ownerPrefix string
}

// Option configures a Client.
type Option func(*Client)

// WithPrefix puts prefix before every key (default "locking"). It must not contain '{' or '}'.
func WithPrefix(prefix string) Option { return func(c *Client) { c.prefix = prefix } }

// WithClock replaces the clock used for lease validity (default: time.Now, monotonic).
func WithClock(clock Clock) Option { return func(c *Client) { c.clock = clock } }

// WithSafetyMargin sets how much of a lease's TTL is not trusted: drift × TTL + min (default
// 0.05 × TTL + 5ms). It covers clock rate differences between this process and Redis and the time
// a reply takes to arrive.
func WithSafetyMargin(drift float64, min time.Duration) Option {
	return func(c *Client) { c.drift, c.minMargin = drift, min }
}

// WithOwnerPrefix starts every owner value with prefix (default: none), so Inspect shows which
// worker holds a lease. The rest of the owner is 16 random bytes, fresh per acquisition.
func WithOwnerPrefix(prefix string) Option { return func(c *Client) { c.ownerPrefix = prefix } }

// New returns a Client on rdb.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{rdb: rdb, prefix: "locking", clock: systemClock{}, drift: 0.05, minMargin: 5 * time.Millisecond}
	for _, o := range opts {
		o(c)
	}
	if strings.ContainsAny(c.prefix, "{}") {
		panic("locking: prefix must not contain '{' or '}'")
	}
	return c
}

// Redis is the client's go-redis client.
func (c *Client) Redis() redis.UniversalClient { return c.rdb }

// Tag is the hash-tagged key stem of a resource: "<prefix>:{<resource>}". Every key that starts with
// it lives in the resource's slot, so one script may touch all of them on Redis Cluster.
func (c *Client) Tag(resource string) string { return c.prefix + ":{" + resource + "}" }

// Key is the key called name in the resource's slot: "<prefix>:{<resource>}:<name>".
func (c *Client) Key(resource, name string) string { return c.Tag(resource) + ":" + name }

// LeaseKey is the key of the resource's lease; its value is the owner. The names "lock" and
// "fence" are reserved in every resource's key space.
func (c *Client) LeaseKey(resource string) string { return c.Key(resource, "lock") }

// FenceKey is the key of the resource's fence counter.
func (c *Client) FenceKey(resource string) string { return c.Key(resource, "fence") }

// ValidateResource reports whether resource can name a lease: 1-512 bytes, no '{' or '}' (they
// would change the hash tag), no control characters.
func ValidateResource(resource string) error {
	if resource == "" || len(resource) > 512 {
		return fmt.Errorf("%w: length %d is not 1-512", ErrInvalidResource, len(resource))
	}
	for _, r := range resource {
		if r == '{' || r == '}' || r < 0x20 || r == 0x7f {
			return fmt.Errorf("%w: %q contains %q", ErrInvalidResource, resource, r)
		}
	}
	return nil
}

func (c *Client) margin(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.drift) + c.minMargin
}

// NewOwner returns a fresh owner value, for scripts that acquire leases themselves (Granted).
func (c *Client) NewOwner() string { return c.newOwner() }

func (c *Client) newOwner() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	if c.ownerPrefix == "" {
		return hex.EncodeToString(b[:])
	}
	return c.ownerPrefix + ":" + hex.EncodeToString(b[:])
}

func ms(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	if m := d.Milliseconds(); m > 0 {
		return m
	}
	return 1
}
