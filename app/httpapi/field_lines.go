package httpapi

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/problem"
)

// fasthttp keeps one value of a header that a request sends on several lines (the first
// Authorization, the last Content-Type, Content-Length or Host) and reads a body as chunked when
// Transfer-Encoding has any coding, whatever Content-Length says. A proxy in front may have
// checked or framed by the other line, so such a request is refused before anything reads it,
// from the raw header lines the parser kept. A body whose length is ambiguous also closes the
// connection (RFC 9112 section 6.3): the bytes after it are not read as another request.

// singleFields are the request headers that carry one value (RFC 9110 section 5.3: a field that
// is not a list cannot be sent on several lines). Idempotency-Key has its own answer
// (idempotencyKeyOf); Transfer-Encoding and Content-Length are framing (framingError).
var singleFields = []string{fiber.HeaderAuthorization, fiber.HeaderContentType, fiber.HeaderHost, "Last-Event-ID", fiber.HeaderXRequestID}

// fieldLines refuses a request whose body length is ambiguous (400 malformed_request, connection
// closed) or that repeats a single-valued header (400 naming it). Details name fields, never
// their values (an Authorization's is a secret).
func fieldLines(c *fiber.Ctx) error {
	counts := map[string]int{}
	var te []string
	for _, line := range bytes.Split(c.Request().Header.RawHeaders(), []byte("\n")) {
		name, value, ok := bytes.Cut(bytes.TrimSuffix(line, []byte("\r")), []byte(":"))
		if !ok || len(name) == 0 || name[0] == ' ' || name[0] == '\t' {
			continue // the blank line, or a folded line's continuation (the parser refuses those)
		}
		key := http.CanonicalHeaderKey(string(name))
		counts[key]++
		if key == fiber.HeaderTransferEncoding {
			te = append(te, strings.TrimSpace(string(value)))
		}
	}
	if err := framingError(counts, te); err != nil {
		c.Context().SetConnectionClose()
		return err
	}
	for _, f := range singleFields {
		if n := counts[http.CanonicalHeaderKey(f)]; n > 1 {
			return problem.BadField(f, f+" is sent on several lines; it takes one value")
		}
	}
	return c.Next()
}

// framingError is the answer to a request whose body length two readers could take differently:
// Transfer-Encoding with Content-Length, a transfer coding other than chunked alone (fasthttp reads
// any as chunked), or Content-Length on several lines.
func framingError(counts map[string]int, te []string) error {
	malformed := func(field, detail string) error {
		return &problem.HTTPError{Status: http.StatusBadRequest, Code: problem.CodeMalformedRequest, Field: field, Detail: detail}
	}
	switch {
	case len(te) > 0 && counts[fiber.HeaderContentLength] > 0:
		return malformed(fiber.HeaderTransferEncoding, "Transfer-Encoding and Content-Length together leave the body's length ambiguous; send one of them")
	case len(te) > 1 || (len(te) == 1 && !strings.EqualFold(te[0], "chunked")):
		return malformed(fiber.HeaderTransferEncoding, "the only Transfer-Encoding this server reads is chunked, once")
	case counts[fiber.HeaderContentLength] > 1:
		return malformed(fiber.HeaderContentLength, "Content-Length is sent on several lines; it takes one value")
	}
	return nil
}
