package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"time"

	"github.com/jobguard/jobguard/internal/freetext"
)

// Text output prints what the API stored, some of it a tenant's or a handler's words: every value
// goes through shown, so a control or format character is printed escaped, never obeyed by the
// operator's terminal.

// shown is s as text output prints it: quoted and escaped when it holds an unprintable character.
func shown(s string) string { return freetext.Quote(s) }

// dash is s, or "-" for an empty column.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// when is t in UTC to the second, "" when the API sent none.
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

// writeRaw prints an answer as the API sent it, indented: --output json. JSON escapes every
// control character; a format character (U+202E) stays, as it is the API's own answer.
func writeRaw(w io.Writer, raw []byte) error {
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return err
	}
	b.WriteByte('\n')
	_, err := w.Write(b.Bytes())
	return err
}
