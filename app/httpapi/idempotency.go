package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/internal/scriptfs"
)

// Idempotency-Key handling per draft-ietf-httpapi-idempotency-key-header-06: the key is scoped to a
// tenant, bound to a fingerprint of the request, claimed with a short lease while the request
// runs, and answered from storage for IDEMPOTENCY_RETENTION once the enqueue was acknowledged.
// Its records live in their own slot ({idem:<tenant>:<hash>}), apart from the job's, so claim and
// enqueue are made crash-safe by the claim lease rather than assumed atomic.

//go:embed scripts/*.lua
var appScripts embed.FS

func appScript(name string) *redis.Script {
	return redis.NewScript(scriptfs.Read(appScripts, name))
}

// appDeadlineScript is an app script that checks its caller's deadline (jobstore.NewScript).
func appDeadlineScript(name string) *redis.Script {
	b, err := appScripts.ReadFile("scripts/" + name)
	if err != nil {
		panic(err)
	}
	return jobstore.NewScript(string(b))
}

var (
	idemClaim    = appDeadlineScript("idem_claim.lua")
	idemComplete = appDeadlineScript("idem_complete.lua")
	// idemCompleteDecided: see complete.
	idemCompleteDecided = appScript("idem_complete_decided.lua")
	idemRelease         = appScript("idem_release.lua")
	idemForget          = appScript("idem_forget.lua")
)

// idemClaimLease bounds how long a crash between claim and answer blocks the key.
const idemClaimLease = 30 * time.Second

// Errors of the Idempotency-Key header, mapped to 400, 409 and 422.
var (
	errIdemMalformed = errors.New("the Idempotency-Key header must be a structured-field string (\"...\") or a bare token, of 1-255 printable ASCII characters")
	errIdemInFlight  = errors.New("a request with this Idempotency-Key is still being processed; retry later")
	errIdemMismatch  = errors.New("this Idempotency-Key was used with a different request")
)

var idemHeaderName = []byte("Idempotency-Key")

// idempotencyHeader is the Idempotency-Key field value and whether the header was sent at all:
// c.Get answers "" both for an absent header and for an empty one, which is malformed. Several
// field lines are combined as RFC 9110 section 5.3 says; a list is not one key, so it is malformed.
func idempotencyHeader(c *fiber.Ctx) (string, bool) {
	var vals []string
	c.Request().Header.VisitAll(func(k, v []byte) {
		if bytes.EqualFold(k, idemHeaderName) {
			vals = append(vals, string(v))
		}
	})
	return strings.Join(vals, ", "), len(vals) > 0
}

// parseIdempotencyKey accepts the draft's sf-string ("abc", with \" and \\ escapes) and, for
// clients that do not quote, a bare token of visible ASCII without quotes, spaces, backslashes,
// commas or semicolons.
func parseIdempotencyKey(h string) (string, error) {
	if strings.HasPrefix(h, `"`) {
		if len(h) < 2 || !strings.HasSuffix(h, `"`) {
			return "", errIdemMalformed
		}
		var b strings.Builder
		inner := h[1 : len(h)-1]
		for i := 0; i < len(inner); i++ {
			c := inner[i]
			switch {
			case c == '\\':
				if i+1 >= len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
					return "", errIdemMalformed
				}
				i++
				b.WriteByte(inner[i])
			case c == '"' || c < 0x20 || c > 0x7e:
				return "", errIdemMalformed
			default:
				b.WriteByte(c)
			}
		}
		h = b.String()
	} else {
		for i := 0; i < len(h); i++ {
			// ',' and ';' separate list members and parameters: "a,b" is two keys joined by a
			// proxy (as "a, b" is), never one.
			if c := h[i]; c <= 0x20 || c > 0x7e || c == '"' || c == '\\' || c == ',' || c == ';' {
				return "", errIdemMalformed
			}
		}
	}
	if h == "" || len(h) > 255 {
		return "", errIdemMalformed
	}
	return h, nil
}

type idempotency struct {
	rdb       redis.UniversalClient
	prefix    string
	retention time.Duration
	// deadline is the request's deadline in Redis's clock (Stack.WriteDeadline): a claim or an
	// answer that reaches a stalled Redis after the request gave up writes nothing.
	deadline func(context.Context) int64
	// settling counts the settlements of unknown outcomes running (idempotency_settle.go).
	settling *settlements
}

func (s idempotency) deadlineOf(ctx context.Context) int64 {
	if s.deadline == nil {
		return 0
	}
	return s.deadline(ctx)
}

// claim is one request's hold on a key.
type claim struct {
	key, token string
}

// answer is a stored response.
type answer struct {
	status   int
	body     []byte
	location string
	// retryAfter is sent as Retry-After (not stored: a replay is not told to wait).
	retryAfter string
}

func (s idempotency) recordKey(tenant, key string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + key))
	return s.prefix + ":{idem:" + hex.EncodeToString(sum[:16]) + "}"
}

func fingerprint(method, path string, body []byte) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s %s\n", method, path)
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// begin claims the key, or returns the stored answer (claim is then nil), in a round trip of its
// own.
func (s idempotency) begin(ctx context.Context, tenant, key, fp string) (*claim, *answer, error) {
	pipe := s.rdb.Pipeline()
	q := s.queueClaim(ctx, pipe, tenant, key, fp)
	_, _ = pipe.Exec(ctx)
	return q.result(ctx)
}

// queuedClaim is a claim queued in a pipeline; result reads it once the pipeline ran.
type queuedClaim struct {
	s    idempotency
	c    *claim
	cmd  *redis.Cmd
	args []any
}

// queueClaim adds the claim of tenant's key for the request fp to pipe (by SHA: the script is
// sent only when Redis lacks it).
func (s idempotency) queueClaim(ctx context.Context, pipe redis.Pipeliner, tenant, key, fp string) queuedClaim {
	var tok [12]byte
	_, _ = rand.Read(tok[:])
	c := &claim{key: s.recordKey(tenant, key), token: hex.EncodeToString(tok[:])}
	lease := jobstore.ClaimTTL(ctx, idemClaimLease)
	args := []any{fp, c.token, lease.Milliseconds(), s.deadlineOf(ctx)}
	return queuedClaim{s: s, c: c, args: args, cmd: idemClaim.EvalSha(ctx, pipe, []string{c.key}, args...)}
}

// result is the claim (this request holds the key), or the stored answer (claim nil), or why
// neither. A claim that found its script missing did not run, and is sent again alone.
func (q queuedClaim) result(ctx context.Context) (*claim, *answer, error) {
	res, err := q.cmd.StringSlice()
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		res, err = idemClaim.Eval(ctx, q.s.rdb, []string{q.c.key}, q.args...).StringSlice()
	}
	if err != nil {
		return nil, nil, fmt.Errorf("app: idempotency claim: %w", err)
	}
	if len(res) == 0 || (res[0] == "done" && len(res) < 4) {
		return nil, nil, fmt.Errorf("app: idempotency claim: unexpected reply %q", res)
	}
	switch res[0] {
	case "expired":
		return nil, nil, fmt.Errorf("app: idempotency claim: %w", engine.ErrNotAccepted)
	case "claimed":
		return q.c, nil, nil
	case "inflight":
		return nil, nil, errIdemInFlight
	case "mismatch":
		return nil, nil, errIdemMismatch
	case "done":
		status, _ := strconv.Atoi(res[1])
		return nil, &answer{status: status, body: []byte(res[2]), location: res[3]}, nil
	}
	return nil, nil, fmt.Errorf("app: idempotency claim: unexpected reply %q", res)
}

// complete stores the answer through pipe (best effort: if it fails, the claim lease runs out and
// a retry of the request is answered by the job's dedup instead).
//
// decided, when not empty, is the key of the hash that the decision just before it in pipe (on one
// Redis node) confirms, a workflow's or a job's record: the answer is stored only if that decision
// took, and checks no deadline itself (the decision did). The returned command answers 1 when the
// answer was stored.
func (s idempotency) complete(ctx context.Context, pipe redis.Pipeliner, c *claim, a answer, decided string) *redis.Cmd {
	if decided != "" {
		return idemCompleteDecided.Eval(ctx, pipe, []string{c.key, decided}, c.token, a.status, string(a.body), a.location, s.retention.Milliseconds())
	}
	return s.store(ctx, pipe, c, a, s.deadlineOf(ctx))
}

// keep stores the answer through pipe whatever the time: for a caller that knows its decision
// took. A deadline here would be the keeper's own short one, which a slow Redis can pass, and the
// answer of a job that stands would then be lost (and its key released for a second create).
func (s idempotency) keep(ctx context.Context, pipe redis.Pipeliner, c *claim, a answer) *redis.Cmd {
	return s.store(ctx, pipe, c, a, 0)
}

// store stores the answer under c's claim unless Redis's clock is past deadline (unix ms; 0 none).
func (s idempotency) store(ctx context.Context, pipe redis.Pipeliner, c *claim, a answer, deadline int64) *redis.Cmd {
	return idemComplete.Eval(ctx, pipe, []string{c.key}, c.token, a.status, string(a.body), a.location, s.retention.Milliseconds(), deadline)
}

// keptAnswer is an answer queued with the confirmation it answers (cmd nil: none).
type keptAnswer struct {
	c   *claim
	ans answer
	cmd *redis.Cmd
}

// secure stores k's answer again, without a deadline, when the confirmation took (the caller
// knows it did) and the answer queued with it was not stored: both check the request's deadline,
// and the time between the two adjacent commands can pass it; or, on a cluster, the answer went
// in a round trip of its own after the confirmation's, and failed. The request is answered with
// it: a retry with the key must meet it, not create again. Storing it twice stores the same.
// Bounded like release.
func (s idempotency) secure(ctx context.Context, k keptAnswer) {
	if k.cmd == nil {
		return
	}
	if n, err := k.cmd.Int(); err == nil && n == 1 {
		return
	}
	s.keepNow(ctx, k.c, k.ans)
}

// keepNow stores a decided answer in a round trip of its own, on a context that outlives the
// request (the request's may have ended: its answer still goes out, and a retry must meet it).
// Bounded like release.
func (s idempotency) keepNow(ctx context.Context, c *claim, a answer) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	pipe := s.rdb.Pipeline()
	s.keep(cctx, pipe, c, a)
	_, _ = pipe.Exec(cctx)
}

// release frees the key after an infrastructure failure, on a context that outlives the request.
func (s idempotency) release(ctx context.Context, c *claim) {
	// Bounded so the answer is not held back: an unreleased claim runs out by itself shortly
	// after the request's deadline.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	_ = idemRelease.Run(cctx, s.rdb, []string{c.key}, c.token).Err()
}

// forget removes the answer this claim stored, on a context that outlives the request (best
// effort, bounded like release).
func (s idempotency) forget(ctx context.Context, c *claim) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 500*time.Millisecond)
	defer cancel()
	_ = idemForget.Run(cctx, s.rdb, []string{c.key}, c.token).Err()
}
