// Package locking gives resources leases with owner tokens, batched heartbeats and fencing tokens
// on Redis. It needs go-redis only and works on a single Redis, Sentinel and Redis Cluster.
//
// # What it guarantees
//
//   - Acquire is one script: SET NX PX with a fresh owner and INCR of the resource's fence
//     counter. Every acquisition gets a token greater than every earlier one of that resource. A
//     call retried by go-redis after a timeout returns the same token instead of drawing another.
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
//     ErrStaleToken, in the same script that writes. Token and owner (Lease.Fence) can be carried
//     to other stores, e.g. SQL "UPDATE ... WHERE fence_token < $1".
//   - Every key of one resource shares a hash tag ({resource}), so each script touches one slot
//     and runs unchanged on Redis Cluster.
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
