package problem

import (
	"unicode/utf8"

	"github.com/jobguard/jobguard/internal/freetext"
)

// Bounds of what a problem repeats of the request: a path or a value can be as long as the server
// reads (kilobytes), and an answer, a log line or a CLI's terminal should not carry it back whole.
const (
	maxInstance = 256
	maxDetail   = 512
)

// echo is s as a problem may show it: every unprintable character escaped (a terminal that prints
// the detail shows ESC as \x1b instead of obeying it) and cut to at most max bytes on a rune
// boundary, marked with an ellipsis.
func echo(s string, max int) string {
	s = freetext.Escape(s)
	if len(s) <= max {
		return s
	}
	const more = "…"
	cut := max - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// EchoPath is a request path as an answer or a log line may repeat it (escaped, at most 256 bytes).
func EchoPath(path string) string { return echo(path, maxInstance) }
