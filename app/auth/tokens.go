// Package auth is how jobguard knows a caller: bearer tokens read from an Authorization header and
// looked up in a table of tenants (API_TOKENS, OPERATOR_TOKENS) in constant time. It imports
// nothing of the project.
package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"slices"
	"strings"
)

// Tokens holds API_TOKENS as SHA-256 digests and finds a presented token's tenant in a time
// that does not depend on which token matched or how much of one: every entry is compared with
// subtle.ConstantTimeCompare, with no early exit. Comparing digests makes every comparison the
// same length, so a token's length does not show either. Empty: the API is open.
type Tokens struct{ entries []tokenEntry }

type tokenEntry struct {
	sum    [sha256.Size]byte
	tenant string
}

// NewTokens is the table of tokens (token -> tenant).
func NewTokens(tokens map[string]string) Tokens {
	t := Tokens{}
	for tok, tenant := range tokens {
		t.entries = append(t.entries, tokenEntry{sum: sha256.Sum256([]byte(tok)), tenant: tenant})
	}
	slices.SortFunc(t.entries, func(a, b tokenEntry) int { return bytes.Compare(a.sum[:], b.sum[:]) })
	return t
}

// Open reports whether the table is empty: no token is asked for.
func (t Tokens) Open() bool { return len(t.entries) == 0 }

// Tenant is the tenant of token, and whether token is in the table.
func (t Tokens) Tenant(token string) (string, bool) {
	sum := sha256.Sum256([]byte(token))
	tenant, found := "", 0
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			tenant, found = e.tenant, 1
		}
	}
	return tenant, found == 1
}

// BearerToken is the token of an Authorization header of the Bearer scheme. The scheme is
// case-insensitive (RFC 9110 section 11.1) and followed by one or more spaces; the token
// (token68, RFC 6750 section 2.1) holds no blank and is compared exactly.
func BearerToken(h string) (string, bool) {
	scheme, rest, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok := strings.TrimLeft(rest, " ")
	if tok == "" || strings.ContainsAny(tok, " \t") {
		return "", false
	}
	return tok, true
}
