package testsupport

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// Browser starts headless Chromium for the test (make test installs it: scripts/ensure-deps.sh),
// stopped when the test ends, and returns its context, which ends after a minute. Under -short a
// machine without Chromium skips the test.
func Browser(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath(t)
	// Chromium keeps its singleton socket in a directory under TMPDIR, removed only on a clean
	// exit, and chromedp ends it with a kill: TMPDIR inside the test's directory removes it too.
	dir := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.Env("TMPDIR="+dir),
		chromedp.ExecPath(path), chromedp.UserDataDir(filepath.Join(dir, "profile")), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		// The UIs link web fonts; on a closed network their lookup must fail at once, not hang the load.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	t.Cleanup(func() { cancel(); cancelBrowser(); cancelAlloc() })
	return ctx
}

func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testing.Short() {
		t.Skip("no chromium; -short skips the browser tests")
	}
	t.Fatal("chromium is not installed (make test installs it: scripts/ensure-deps.sh)")
	return ""
}
