// Package chaos is jobguard's fault-injection suite: real processes, a real Redis with AOF, a fake
// upstream and a loopback proxy that adds latency and partitions. Run it with make chaos.
package chaos
