// Package locking gives resources leases with owner tokens, batched heartbeats and fencing tokens
// on Redis. It needs go-redis only and works on a single Redis, Sentinel and Redis Cluster.
//
// # What it guarantees
//
//   - Acquire is one script: SET NX PX with a fresh owner and INCR of the resource's fence
//     counter. Every acquisition gets a token greater than every earlier one of that resource. A
//     call retried by go-redis after a timeout returns the same token instead of drawing another.
//     With WithTokenFloor the token is also greater than a token a target has already seen, even
//     when the counter expired or was lost.
//   - Renew and Release compare the owner inside Redis: a stale owner can neither extend nor delete
//     a newer lease.
//   - A lease is trusted for its TTL minus a safety margin, measured on the monotonic clock from
//     before the request was sent (Lease.ValidFor, Lease.Expired).
//   - A Keeper renews every lease a process holds in batches: one pipelined round trip per tick per
//     Redis node. The first refused or failed renewal, or the end of the lease's validity without a
//     renewal, cancels the work's context with ErrLeaseLost as its cause (context.Cause); a
//     renewal that got an error instead of an answer is ErrRenewFailed, which wraps ErrLeaseLost.
//   - A fenced write (FencedScript, SetFields, SetValue) stores the highest token, and its owner,
//     that wrote the target, and rejects a lower token, or the same token from another owner, with
//     ErrStaleToken, in the same script that writes. A lease's fence (Lease.Fence) also carries the
//     resource's fence counter: its writes are refused once a newer token was drawn for the
//     resource, on every target, before the newer holder writes any. Token and owner (Lease.Fence) can be carried
//     to other stores, e.g. SQL "UPDATE ... WHERE fence_token < $1".
//   - Every key of one resource shares a hash tag ({resource}), so each script touches one slot
//     and runs unchanged on Redis Cluster.
//
// # The protocol as a fragment
//
// The protocol is written once, as local Lua functions in scripts/protocol.lua; every script of
// this package is a short body after it. Another package's script that needs a lease or a fence in
// the same round trip as its own writes (a job's start or finish) is built the same way, with
// NewProtocolScript(body) or NewFencedScript(body), and calls the functions with its own KEYS and
// ARGV values instead of spelling the key or field names:
//
//	lease_acquire(lease_key, fence_key, owner, ttl_ms, fence_ttl_ms, floor) -> true, token, fresh | false, remaining_ms
//	lease_renew(lease_key, owner, ttl_ms) -> bool
//	lease_release(lease_key, owner) -> bool
//	lease_holder(lease_key) -> owner | false
//	heartbeat_stamp(hash_key, field, now_ms) -> bool
//	fence_last(fence_key) -> last token drawn, 0 when none
//	fence_seen(record_key) -> highest token that wrote the record, 0 when none
//	fence_check(record_key, token, owner) -> nil when the fence may write, else the current token
//	fence_record(record_key, token, owner)
//
// They keep the guarantees above: lease_acquire draws one token per acquisition (fresh is false for
// the same owner's retry, which gets the current token) and never one at or below floor;
// lease_renew and lease_release act for the owner only; fence_check writes nothing and refuses a
// lower token or the same token from another owner; a refusal writes nothing. The script's keys
// (LeaseKey, FenceKey, records under Key) must share the resource's hash tag, which is what lets it
// run on Redis Cluster. The functions are locals: nothing leaks into Redis's global Lua state
// (Redis 7 refuses scripts that create globals), and a body's own locals may shadow them. The
// fragment adds about 5 KB to a script's text; EVALSHA sends only its SHA.
//
// # What it does not guarantee
//
// A lease is not proof of exclusivity. A process can pause (GC, SIGSTOP, a VM migration) past its
// lease, and a Redis failover with asynchronous replication can lose a lease that was granted.
// In both cases two holders may briefly believe they hold the resource. The fence is what keeps
// the older one from overwriting the newer one's state; the lease only gives liveness. Fence
// counters of long-lived resources never expire; a per-resource fence TTL (WithFenceTTL) is for
// resources that die with their job, and must outlive every target holding one of their tokens.
package locking
