package auth

import "testing"

// Two well-formed tokens, as app's tests use.
const (
	tokenA = "token-a-0123456789"
	tokenB = "token-b-0123456789"
)

// Tokens finds each configured token's tenant and nothing for any other string.
func TestTokenTable(t *testing.T) {
	t.Parallel()
	tt := NewTokens(map[string]string{tokenA: "t1", tokenB: "t2"})
	for tok, want := range map[string]string{tokenA: "t1", tokenB: "t2", "": "", "token-a": "", tokenA + " ": "", "TOKEN-A-0123456789": ""} {
		if got, ok := tt.Tenant(tok); got != want || ok != (want != "") {
			t.Errorf("tenant(%q) = %q %v, want %q", tok, got, ok, want)
		}
	}
}
