package seal

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func key(t *testing.T) (string, []byte) {
	t.Helper()
	b := make([]byte, KeySize)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b), b
}

func TestSealOpensWithItsKeyOnly(t *testing.T) {
	t.Parallel()
	a64, _ := key(t)
	b64, _ := key(t)
	ringA, err := Parse("a:" + a64)
	if err != nil {
		t.Fatal(err)
	}
	plain := []byte(`{"secret":"PLAINTEXT-MARKER"}`)
	ad := AD("job1", "payload")
	v, err := ringA.Seal(plain, ad)
	if err != nil {
		t.Fatal(err)
	}
	if !Sealed(v) || strings.Contains(v, "PLAINTEXT") || KeyID(v) != "a" {
		t.Fatalf("sealed value %q", v)
	}
	if got, err := ringA.Open(v, ad); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open: %q, %v", got, err)
	}
	// Rotation: b current, a still opens.
	ringBA, err := Parse("b:" + b64 + ",a:" + a64)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ringBA.Open(v, ad); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("open with the rotated ring: %q, %v", got, err)
	}
	if !ringBA.Stale(v, true) || ringA.Stale(v, true) {
		t.Fatal("stale: a value of key a is stale for ring b,a only")
	}
	vb, _ := ringBA.Seal(plain, ad)
	if KeyID(vb) != "b" {
		t.Fatalf("new values are sealed with %q", KeyID(vb))
	}
	cases := []struct {
		name string
		ring *Ring
		v    string
		ad   []byte
		want error
	}{
		{"key removed", mustParse(t, "b:"+b64), v, ad, ErrUnknownKey},
		{"no ring", nil, v, ad, ErrNoRing},
		{"wrong key under the same id", mustParse(t, "a:"+b64), v, ad, ErrCorrupt},
		{"moved to another job", ringA, v, AD("job2", "payload"), ErrCorrupt},
		{"moved to another field", ringA, v, AD("job1", "result"), ErrCorrupt},
		{"truncated", ringA, v[:len(v)-4], ad, ErrCorrupt},
		{"garbage", ringA, Prefix + "!!!", ad, ErrCorrupt},
	}
	for _, c := range cases {
		_, err := c.ring.Open(c.v, c.ad)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if got, err := ringA.Open("plain", ad); err != nil || string(got) != "plain" {
		t.Fatalf("plaintext: %q, %v", got, err)
	}
}

func mustParse(t *testing.T, s string) *Ring {
	t.Helper()
	r, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseErrorsNeverQuoteAKey(t *testing.T) {
	t.Parallel()
	good, _ := key(t)
	short := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	for _, spec := range []string{"", "nocolon" + good, "a:" + short, "a:" + good + ",a:" + good, "bad id!:" + good, "a:%%%" + good[3:]} {
		_, err := Parse(spec)
		if err == nil {
			t.Errorf("%q parsed", spec)
			continue
		}
		for _, secret := range []string{good, short, good[3:]} {
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q quotes a key", err)
			}
		}
	}
}

func TestRingPrintsIDsOnly(t *testing.T) {
	t.Parallel()
	k64, raw := key(t)
	r := mustParse(t, "k1:"+k64)
	holder := struct{ R *Ring }{r}
	for _, f := range []string{"%v", "%+v", "%#v", "%s", "%x"} {
		out := fmt.Sprintf(f, holder)
		if strings.Contains(out, k64) || bytes.Contains([]byte(out), raw) || strings.Contains(out, fmt.Sprintf("%x", raw)) || !strings.Contains(out, "k1") {
			t.Errorf("%s: %q", f, out)
		}
	}
}

func TestParseFileReadsLines(t *testing.T) {
	t.Parallel()
	a64, _ := key(t)
	b64, _ := key(t)
	p := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(p, []byte("# current first\nb:"+b64+"\n\na:"+a64+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := ParseFile(p)
	if err != nil || r.Current() != "b" || len(r.IDs()) != 2 {
		t.Fatalf("%v, %v", r, err)
	}
}
