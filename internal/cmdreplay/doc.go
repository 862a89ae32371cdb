// Package cmdreplay records the Redis commands a real run sends (a go-redis hook) and replays
// them, with strings substituted, against one server: the saturation benchmark drives a
// redis-server to a full core with the exact command sequence of a job's life repeated for many
// distinct jobs (docs/SCALING.md, "A measured single master"). Only benchmarks import it.
package cmdreplay
