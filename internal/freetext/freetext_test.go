package freetext

import (
	"errors"
	"strings"
	"testing"
)

func TestCheckQuoteEscape(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"", "customer called", "Kunde rief an — 客户来电", "emoji 🙂 and accents é"} {
		if err := Check(ok); err != nil || Quote(ok) != ok || Escape(ok) != ok {
			t.Errorf("%q: Check %v, Quote %q, Escape %q", ok, err, Quote(ok), Escape(ok))
		}
	}
	for bad, esc := range map[string]string{
		"\x1b]0;x\x07": `\x1b]0;x\a`, "a\x00b": `a\x00b`, "a\vb": `a\vb`, "a\tb": `a\tb`, "a\nb": `a\nb`, "a\x7fb": `a\x7fb`,
		"a\u0085b": `a\u0085b`, "a\u2028b": `a\u2028b`, "a\u2029b": `a\u2029b`, "x\u202Ey": `x\u202ey`, "a\u200Db": `a\u200db`,
		"a\xffb": `a\xffb`,
	} {
		err := Check(bad)
		if !errors.Is(err, ErrUnprintable) || Check(err.Error()) != nil { // the error never carries the character
			t.Errorf("%q: Check %v", bad, err)
		}
		if got := Escape(bad); got != esc {
			t.Errorf("Escape(%q) = %q, want %q", bad, got, esc)
		}
		if q := Quote(bad); Check(q) != nil || !strings.HasPrefix(q, `"`) {
			t.Errorf("Quote(%q) = %q", bad, q)
		}
	}
}
