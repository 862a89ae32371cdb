package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jobguard/jobguard/app/cli"
	"github.com/jobguard/jobguard/app/config"
)

// unprintable are texts that act on a terminal: ESC and BEL (an OSC title sequence), NUL, VT,
// TAB, DEL, U+0085 (NEL), U+2028 and U+2029 (separators) and U+202E (right-to-left override).
var unprintable = []string{"\x1b]0;pwned\x07", "a\x00b", "a\vb", "a\tb", "a\x7fb", "a\u0085b", "a\u2028b", "a\u2029b", "file\u202Etxt.exe"}

// jobguard jobs show and list print what is stored escaped (data stored before the input rule,
// or written by a handler): no control or format character reaches the operator's terminal;
// --reason with one is refused by the API (exit 2).
func TestJobsTextOutputEscapesStoredText(t *testing.T) {
	t.Parallel()
	s := startAPI(t, nil)
	id := s.enqueue(t, "", "t1", "o-1")
	all := strings.Join(unprintable, " ")
	s.Redis().HSet(context.Background(), s.recordKey(t, id), "last_error", all, "progress_note", all, "progress", 5, "result", all, "type", "x\x1b[2Jy")
	at := map[string]string{"JOBGUARD_URL": s.url}
	code, out, errOut := run(t, at, "show", id)
	if code != 0 {
		t.Fatalf("show: exit %d %s", code, errOut)
	}
	_, listed, _ := run(t, at, "list")
	for _, bad := range []string{"\x1b", "\x07", "\x00", "\v", "\x7f", "\u0085", "\u2028", "\u2029", "\u202E"} {
		if strings.Contains(out, bad) || strings.Contains(listed, bad) {
			t.Errorf("printed %q raw:\n%q\n%q", bad, out, listed)
		}
	}
	if !strings.Contains(out, `\x1b]0;pwned\a`) || !strings.Contains(listed, `"x\x1b[2Jy"`) {
		t.Errorf("the escaped text is not shown:\n%s\n%s", out, listed)
	}
	for _, reason := range unprintable {
		if code, out, errOut := run(t, at, "cancel", id, "--reason", reason); code != cli.ExitUsage || out != "" || !strings.Contains(errOut, "reason") {
			t.Errorf("--reason %q: exit %d %q %q, want %d", reason, code, out, errOut, cli.ExitUsage)
		}
	}
	if code, _, _ := run(t, at, "show", id, "-o", "json"); code != 0 {
		t.Fatalf("the job was changed by a refused cancel")
	}
}

// With no URL the CLI asks the instance the server starts by default.
func TestDefaultHTTPAddrIsTheServers(t *testing.T) {
	t.Parallel()
	if got, want := cli.DefaultHTTPAddr, config.Defaults().HTTPAddr; got != want {
		t.Fatalf("cli.DefaultHTTPAddr %q, the server's default HTTP_ADDR %q", got, want)
	}
}
