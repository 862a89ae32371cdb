package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"time"

	"github.com/jobguard/jobguard/internal/freetext"
)

// requestTimeout bounds one command's request: the server's own REQUEST_TIMEOUT (default 10 s)
// answers first, so this is for a server that does not answer at all.
const requestTimeout = 30 * time.Second

// maxAnswer bounds what is read of an answer (a page of 200 jobs is far below it).
const maxAnswer = 8 << 20

// client sends a command's requests to its target.
type client struct {
	target
	http *http.Client
}

func newClient(t target) *client {
	return &client{target: t, http: &http.Client{
		Timeout: requestTimeout,
		// A redirect is not followed: the token would go with it to wherever it points.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// call sends method path?query with body (JSON, when not nil) and decodes a 2xx answer into out
// (when not nil), returning its raw body too. path is escaped already (jobPath). Any other answer
// is an *apiError; no answer is an *unreachableError.
func (c *client) call(ctx context.Context, method, path string, query url.Values, body, out any) ([]byte, error) {
	u := c.base.String() + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("cli: cannot make a request to %s", c.shown()) // err would repeat the URL whole
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "jobguard-cli")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, &unreachableError{base: c.shown(), err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, &unreachableError{base: c.shown(), err: err}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, newAPIError(resp, raw)
	}
	if out != nil {
		if !isJSON(resp.Header.Get("Content-Type")) {
			return nil, fmt.Errorf("%w: %s answered %s with %q, not JSON (is --url a jobguard API?)", errNotJobguard, c.shown(), freetext.Escape(resp.Status), resp.Header.Get("Content-Type"))
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return nil, fmt.Errorf("%w: the answer of %s %s is not the JSON the CLI knows: %v", errNotJobguard, method, path, err)
		}
	}
	return raw, nil
}

// jobPath is /jobs/{id} followed by suffix: the id escaped as one segment, whatever it holds (the
// API answers 404 for one that is not a job id).
func jobPath(id, suffix string) string { return "/jobs/" + url.PathEscape(id) + suffix }

// errNotJobguard is an answer that is not the API's: another server on the port, a proxy's page.
var errNotJobguard = errors.New("cli: not a jobguard answer")

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || mt == problemType)
}
