package cli

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/jobguard/jobguard/internal/redact"
)

// DefaultHTTPAddr is the server's HTTP_ADDR default (config.Defaults; TestDefaultHTTPAddrIsTheServers
// keeps the two equal): with no URL given, the CLI asks the instance jobguard starts by default.
const DefaultHTTPAddr = "127.0.0.1:8080"

// errBadTarget is a URL or token the CLI cannot use; its message names the flag and the variable,
// never the token.
var errBadTarget = errors.New("cli: bad target")

// target is where a command sends its requests, and the token it sends.
type target struct {
	base  *url.URL
	token string
}

// resolveTarget picks the base URL (the flag, else JOBGUARD_URL, else the loopback address of
// HTTP_ADDR's port) and the token (the flag, else JOBGUARD_TOKEN).
func resolveTarget(env Env, flagURL, flagToken string) (target, error) {
	raw := firstSet(flagURL, env.get("JOBGUARD_URL"))
	if raw == "" {
		addr := firstSet(env.get("HTTP_ADDR"), DefaultHTTPAddr)
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return target{}, fmt.Errorf("%w: HTTP_ADDR %q is not host:port; set --url or JOBGUARD_URL", errBadTarget, addr)
		}
		raw = "http://" + net.JoinHostPort("127.0.0.1", port)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// redact: a URL may carry a password or a query the operator did not mean to show.
		return target{}, fmt.Errorf("%w: --url/JOBGUARD_URL %q is not an http:// or https:// URL", errBadTarget, redact.URL(raw))
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawQuery, u.Fragment = "", ""
	token := firstSet(flagToken, env.get("JOBGUARD_TOKEN"))
	if !headerSafe(token) {
		return target{}, fmt.Errorf("%w: --token/JOBGUARD_TOKEN holds a character an HTTP header cannot carry", errBadTarget)
	}
	if len(token) > maxToken {
		return target{}, fmt.Errorf("%w: --token/JOBGUARD_TOKEN is %d bytes, more than a jobguard server reads in a request header (%d)",
			errBadTarget, len(token), maxToken)
	}
	return target{base: u, token: token}, nil
}

// shown is the base URL as messages print it: no userinfo, no query.
func (t target) shown() string { return redact.URL(t.base.String()) }

func firstSet(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

// maxToken is the longest token the CLI sends: the server reads a request's header into 4 KB
// (Fiber's default read buffer) and answers a larger one 431, closing the connection while a long
// header is still being written, which a client sees as a broken pipe rather than an answer.
const maxToken = 3 << 10

// headerSafe says whether token can be sent as a bearer token: visible ASCII, no space (RFC 6750's
// b64token is narrower; the server compares exactly, so anything it could hold is let through).
func headerSafe(token string) bool {
	for i := 0; i < len(token); i++ {
		if token[i] <= ' ' || token[i] >= 0x7f {
			return false
		}
	}
	return true
}
