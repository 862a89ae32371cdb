// Package redact keeps configuration secrets out of text that leaves the process (errors shown to
// tenants, log lines, asynq's stored errors, span statuses). A URL keeps its scheme, host and path;
// its userinfo is removed entirely and every query value becomes Placeholder. url.URL.Redacted is
// not enough: it hides the password only, not the user name or the query.
package redact

import (
	"regexp"
	"strings"
)

// Placeholder replaces every query value (and a query item without a value).
const Placeholder = "REDACTED"

// urlRe finds URLs in free text: a scheme, "://", then everything up to a space, a quote or an
// angle bracket (the characters *url.Error and %q put around a URL).
var urlRe = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>` + "`" + `]+`)

// URL returns raw with its userinfo removed, every query value replaced by Placeholder and its
// fragment dropped. It works on the text, so a URL that url.Parse refuses (the usual reason it
// ends up in an error) is redacted too. Anything after "://" up to the last '@' before the query
// counts as userinfo, even past a '/': a password may hold one unescaped.
func URL(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	}
	rest, _, _ = strings.Cut(rest, "#")
	beforeQuery, query, hasQuery := strings.Cut(rest, "?")
	if at := strings.LastIndexByte(beforeQuery, '@'); at >= 0 {
		beforeQuery = beforeQuery[at+1:]
	}
	var b strings.Builder
	if ok {
		b.WriteString(scheme)
		b.WriteString("://")
	}
	b.WriteString(beforeQuery)
	if hasQuery {
		b.WriteByte('?')
		for i, item := range strings.Split(query, "&") {
			if i > 0 {
				b.WriteByte('&')
			}
			if name, _, ok := strings.Cut(item, "="); ok {
				b.WriteString(name)
				b.WriteByte('=')
			}
			b.WriteString(Placeholder)
		}
	}
	return b.String()
}

// String redacts every URL that carries userinfo, a query or a fragment in s (see URL); other
// text, and URLs without any of those, are left as they are.
func String(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	return urlRe.ReplaceAllStringFunc(s, func(u string) string {
		if !strings.ContainsAny(u, "@?#") {
			return u
		}
		return URL(u)
	})
}

// Error returns err with its text redacted by String; errors.Is and errors.As still see err.
// A nil err stays nil, and an err whose text needs nothing is returned as it is.
func Error(err error) error {
	if err == nil {
		return nil
	}
	text := err.Error()
	clean := String(text)
	if clean == text {
		return err
	}
	return &redacted{text: clean, err: err}
}

type redacted struct {
	text string
	err  error
}

func (e *redacted) Error() string { return e.text }
func (e *redacted) Unwrap() error { return e.err }
