// Package freetext is the rule for text that people type and other people read: a cancel reason,
// a progress note, a result, an error. Such text reaches terminals (jobguard jobs get) and pages,
// where a control character (ESC, BEL: a title or clipboard escape), a line or paragraph separator
// or a format character (the U+202E override that shows "exe.txt" as "txt.exe") acts instead of
// showing. Input is checked with Check; text already stored is shown through Quote.
package freetext

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrUnprintable: the text holds a control or format character, a line or paragraph separator, or
// bytes that are not UTF-8.
var ErrUnprintable = errors.New("freetext: unprintable character")

// unprintable says whether r acts rather than shows: Unicode categories Cc (C0, DEL, C1), Cf
// (format: bidi overrides, zero-width joiners), Zl and Zp (line and paragraph separators).
func unprintable(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// Check is nil when s is one line of printable text; otherwise an ErrUnprintable that names the
// first offending character by code point and byte offset (never the character itself).
func Check(s string) error {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				return fmt.Errorf("%w: byte %d is not UTF-8", ErrUnprintable, i)
			}
		}
		if unprintable(r) {
			return fmt.Errorf("%w: U+%04X at byte %d", ErrUnprintable, r, i)
		}
	}
	return nil
}

// Quote is s as it may be printed: s itself when Check passes, else strconv.Quote's form of it
// (quoted, every unprintable character escaped), so stored text that predates the rule, or that a
// handler wrote, is shown and not obeyed.
func Quote(s string) string {
	if Check(s) == nil {
		return s
	}
	return strconv.Quote(s)
}

// Escape is s with every unprintable character written as its escape (\x1b, \u202e), and no
// quotes added: for text a program produced (an error, a result) that is stored, not refused.
func Escape(s string) string {
	if Check(s) == nil {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError:
			if _, n := utf8.DecodeRuneInString(s[i:]); n == 1 {
				fmt.Fprintf(&b, `\x%02x`, s[i])
				continue
			}
			b.WriteRune(r)
		case unprintable(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}
