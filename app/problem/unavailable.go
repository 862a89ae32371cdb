package problem

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"syscall"

	"github.com/gofiber/fiber/v2"
	"github.com/redis/go-redis/v9"

	"github.com/jobguard/jobguard/internal/engine"
)

// UnavailableRetryAfter is the Retry-After of a 503 (and of a bulk answer with an item refused for
// a 5xx): long enough that a stalled Redis is not hammered by every client at once, short enough
// for a failover.
const UnavailableRetryAfter = "2"

// unavailableDetail is the fixed text of a 503 caused by Redis; the cause stays in the log.
const unavailableDetail = "Redis did not answer in time; nothing was changed by this request, retry later"

// redisBusyPrefixes are Redis's own answers for "not now": loading a dump, no reachable master,
// a cluster without coverage, a replica that cannot take writes, a script running too long.
var redisBusyPrefixes = []string{"LOADING", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "READONLY", "BUSY", "NOREPLICAS"}

// dependencyDown reports whether err means Redis did not answer (in time), as opposed to a fault
// of the request or of jobguard: those are 503 with Retry-After, not 500.
func dependencyDown(err error) bool {
	var ne net.Error
	switch {
	case err == nil:
		return false
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, engine.ErrNotAccepted),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, redis.ErrClosed),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &ne):
		return true
	}
	for _, p := range redisBusyPrefixes {
		if redis.HasErrorPrefix(err, p) {
			return true
		}
	}
	return false
}

// setRetryAfter gives a 503 its Retry-After unless the handler chose one.
func setRetryAfter(c *fiber.Ctx, status int) {
	if status == http.StatusServiceUnavailable && len(c.Response().Header.Peek(fiber.HeaderRetryAfter)) == 0 {
		c.Set(fiber.HeaderRetryAfter, UnavailableRetryAfter)
	}
}
