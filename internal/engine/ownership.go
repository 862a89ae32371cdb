package engine

// Several jobguard applications may share one Redis, each under its own key prefix, with the same
// task type names and asynq queue names: asynq's keys and its inspector are not prefixed, so a
// walker of asynq's queues sees the other applications' deliveries too. A delivery names the
// prefix of the application that made it, and a walker that deletes or redelivers touches only
// its own (a delivery without the header, enqueued before it existed, is not proven to be).

// HeaderPrefix is the key prefix (Config.Prefix) of the application whose job a delivery is.
const HeaderPrefix = "jobguard-prefix"

// owns reports whether a delivery with headers is one of this stack's jobs: it names a job and
// this stack's prefix.
func (s *Stack) owns(headers map[string]string) bool {
	return headers[HeaderPrefix] == s.cfg.Prefix && ValidJobID(headers[HeaderJobID])
}
