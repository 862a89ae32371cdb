package tasks

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine/jobstore"
	"github.com/jobguard/jobguard/locking"
	"github.com/jobguard/jobguard/middleware"
)

// Identity is what a request stands for, for ever (see Identified).
type Identity struct {
	// Name is unique per tenant and kind, e.g. "order:<tenant>:<order id>"; the claim's key is
	// "<prefix>:{<name>}", a slot of its own.
	Name string
	// Fingerprint is the content the name is bound to (see Fingerprint).
	Fingerprint string
	// Field is the request field that carries the name, for the 409 answer (e.g. "order_id").
	Field string
	// What names it for people, e.g. "order o1".
	What string
}

// Fingerprint is a fixed-size digest of a content's fields: 32 hex digits of SHA-256.
func Fingerprint(fields ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(fields, "\x00")))
	return hex.EncodeToString(sum[:16])
}

// ClaimState is what claiming an identity found.
type ClaimState string

// The claim states.
const (
	// ClaimCreated: the identity was unclaimed; it is now bound to the caller's content and job.
	ClaimCreated ClaimState = "created"
	// ClaimSame: it was claimed before with the same content.
	ClaimSame ClaimState = "same"
	// ClaimConflict: it was claimed before with other content; nothing was written.
	ClaimConflict ClaimState = "conflict"
)

// Claim is the outcome of ClaimIdentity.
type Claim struct {
	Key   string
	State ClaimState
	// JobID is the job the claim names: the caller's own when it created the claim (a retried
	// call included), the first claimant's otherwise.
	JobID string
}

// Ours reports whether the claim was created by the caller whose job id is jobID.
func (c Claim) Ours(jobID string) bool { return c.State != ClaimConflict && c.JobID == jobID }

var (
	identityClaim   = jobstore.NewScript(scripts.Read("identity_claim.lua")) // past_deadline
	identityRelease = mustScript("identity_release.lua")
)

// IdentityKey is the key of an identity's claim.
func IdentityKey(locks *locking.Client, id Identity) (string, error) {
	if err := locking.ValidateResource(id.Name); err != nil {
		return "", fmt.Errorf("tasks: identity: %w", err)
	}
	return locks.Tag(id.Name), nil
}

// ClaimIdentity binds id to its fingerprint and jobID unless it is bound already, in one round
// trip, and says which. The claim never expires (live data, like applied-operation records).
// deadline is the caller's in Redis's clock (engine.Stack.WriteDeadline; 0 none): a claim that
// reaches a stalled Redis after it writes nothing and is ErrClaimExpired.
func ClaimIdentity(ctx context.Context, locks *locking.Client, id Identity, jobID string, deadline int64) (Claim, error) {
	key, err := IdentityKey(locks, id)
	if err != nil {
		return Claim{}, err
	}
	return claimOf(key, id, identityClaim.Run(ctx, locks.Redis(), []string{key}, id.Fingerprint, jobID, deadline))
}

// ClaimRequest is one claim of ClaimIdentities: ID for the job JobID.
type ClaimRequest struct {
	ID    Identity
	JobID string
}

// ClaimIdentities is ClaimIdentity for each of reqs, in their order, in one round trip (one per
// master on a cluster) instead of one each: a bulk or a workflow of 1,000 orders. Each request
// gets its own claim or error, at the same index.
func ClaimIdentities(ctx context.Context, locks *locking.Client, reqs []ClaimRequest, deadline int64) ([]Claim, []error) {
	claims, errs := make([]Claim, len(reqs)), make([]error, len(reqs))
	keys := make([]string, len(reqs))
	var pending []int
	for i, r := range reqs {
		if keys[i], errs[i] = IdentityKey(locks, r.ID); errs[i] == nil {
			pending = append(pending, i)
		}
	}
	cmds := make([]*redis.Cmd, len(reqs))
	send := func(which []int) {
		pipe := locks.Redis().Pipeline()
		for _, i := range which {
			cmds[i] = identityClaim.EvalSha(ctx, pipe, []string{keys[i]}, reqs[i].ID.Fingerprint, reqs[i].JobID, deadline)
		}
		_, _ = pipe.Exec(ctx) // each command's own error is read below
	}
	send(pending)
	// A server that does not have the script yet ran none of its claims: loaded, they go again,
	// in order (a claim is told its outcome only once it ran).
	var missing []int
	for _, i := range pending {
		if err := cmds[i].Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			missing = append(missing, i)
		}
	}
	if len(missing) > 0 {
		if err := identityClaim.Load(ctx, locks.Redis()).Err(); err != nil {
			for _, i := range missing {
				errs[i] = fmt.Errorf("tasks: claim %s: %w", reqs[i].ID.What, err)
			}
		} else {
			send(missing)
		}
	}
	for _, i := range pending {
		if errs[i] == nil {
			claims[i], errs[i] = claimOf(keys[i], reqs[i].ID, cmds[i])
		}
	}
	return claims, errs
}

// claimOf reads the claim script's answer for id at key.
func claimOf(key string, id Identity, cmd *redis.Cmd) (Claim, error) {
	res, err := cmd.StringSlice()
	if err != nil {
		return Claim{}, fmt.Errorf("tasks: claim %s: %w", id.What, err)
	}
	if len(res) != 2 {
		return Claim{}, fmt.Errorf("tasks: claim %s: unexpected reply %q", id.What, res)
	}
	c := Claim{Key: key, State: ClaimState(res[0]), JobID: res[1]}
	if res[0] == "expired" {
		return Claim{}, fmt.Errorf("tasks: claim %s: %w", id.What, ErrClaimExpired)
	}
	switch c.State {
	case ClaimCreated, ClaimSame, ClaimConflict:
		return c, nil
	}
	return Claim{}, fmt.Errorf("tasks: claim %s: unexpected reply %q", id.What, res)
}

// ReleaseIdentity removes a claim that jobID created, after its request was answered "nothing was
// kept"; a claim of another request or job stays. It reports whether it removed the claim.
func ReleaseIdentity(ctx context.Context, locks *locking.Client, c Claim, jobID string) (bool, error) {
	n, err := identityRelease.Run(ctx, locks.Redis(), []string{c.Key}, jobID).Int()
	if err != nil {
		return false, fmt.Errorf("tasks: release identity claim: %w", err)
	}
	return n == 1, nil
}

// ErrClaimExpired: the claim reached Redis after its caller's deadline and wrote nothing.
var ErrClaimExpired = errors.New("tasks: identity claim past its deadline")

// ErrIdentityConflict: the job's identity is claimed by other content (a job created before
// claims existed, or around the API); it fails for good.
var ErrIdentityConflict = errors.New("tasks: identity claimed by other content")

// CheckIdentity is what a handler runs before the effect of an Identified job: it creates the
// claim when it is missing and fails the job for good (Permanent, "<what> conflicts with an
// earlier request") when another content holds it.
func CheckIdentity(ctx context.Context, job *middleware.Run, id Identity) error {
	c, err := ClaimIdentity(ctx, job.Locks(), id, job.JobID(), 0)
	if err != nil {
		return err // transient: the next attempt checks again
	}
	if c.State == ClaimConflict {
		return middleware.Permanent(&conflictError{what: id.What})
	}
	return nil
}

type conflictError struct{ what string }

func (e *conflictError) Error() string        { return e.what + " conflicts with an earlier request" }
func (e *conflictError) Is(target error) bool { return target == ErrIdentityConflict }
