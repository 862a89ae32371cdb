package httpapi

import (
	"encoding/json"
	"strings"
	"testing"
)

// unprintable are texts that pass a "one line" rule and still act on a terminal or a page: ESC
// and BEL (an OSC title sequence), NUL, VT, TAB, DEL, U+0085 (NEL), U+2028 (line separator) and
// U+202E (right-to-left override).
var unprintable = []string{"\x1b]0;pwned\x07", "a\x00b", "a\vb", "a\tb", "a\x7fb", "a\u0085b", "a\u2028b", "a\u2029b", "file\u202Etxt.exe"}

// A cancel reason with a control or format character is 400 naming reason, and the job is not
// cancelled; text in any script passes.
func TestCancelReasonRefusesControlAndFormatCharacters(t *testing.T) {
	t.Parallel()
	r := startApp(t, RoleAPI, twoTenants) // no worker: the job stays queued
	resp, body := post(t, r, "/jobs/reserve-stock", `{"tenant_id":"t1","order_id":"o-1","sku":"s-1","quantity":2}`, bearer(tokenA)...)
	var a jobAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || resp.StatusCode != 202 {
		t.Fatalf("enqueue: %d %s", resp.StatusCode, body)
	}
	auth := append(bearer(tokenA), "Content-Type", "application/json")
	for _, reason := range unprintable {
		b, _ := json.Marshal(cancelRequest{Reason: reason})
		resp, body := post(t, r, "/jobs/"+a.JobID+"/cancel", string(b), auth...)
		if resp.StatusCode != 400 {
			t.Errorf("reason %q: %d %s, want 400", reason, resp.StatusCode, body)
			continue
		}
		if p := decodeProblem(t, resp, body); p.Field != "reason" || !strings.Contains(p.Detail, "U+") {
			t.Errorf("reason %q: %+v, want field reason and the character's code point", reason, p)
		}
	}
	waitJob(t, r, a.JobID, "queued", bearer(tokenA)...)
	resp, body = post(t, r, "/jobs/"+a.JobID+"/cancel", `{"reason":"Kunde rief an — 客户来电"}`, auth...)
	if resp.StatusCode != 200 {
		t.Fatalf("a printable reason: %d %s", resp.StatusCode, body)
	}
}
