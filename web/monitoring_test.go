package web

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestMountRefusesAnUnprotectedPublicUI(t *testing.T) {
	t.Parallel()
	db := redistest.NewDB(t)
	err := Mount(fiber.New(), db.Client, Monitoring{Loopback: false})
	if !errors.Is(err, ErrUnprotected) {
		t.Fatalf("got %v, want ErrUnprotected", err)
	}
	if err := Mount(fiber.New(), db.Client, Monitoring{User: "u", Password: "p"}); err != nil {
		t.Fatalf("with credentials: %v", err)
	}
}

func chromiumPath(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if testing.Short() {
		t.Skip("no chromium; -short skips the browser test")
	}
	t.Fatal("chromium is not installed (make test installs it: apt-get install -y chromium)")
	return ""
}

// The UI really renders in a browser under /monitoring/, talks to its API under the same root and
// lists the queue a task was enqueued to, all on the shared client.
func TestBrowserRendersQueues(t *testing.T) {
	t.Parallel()
	browser := chromiumPath(t)
	db := redistest.NewDB(t)
	const queue = "browser-probe"
	client := asynq.NewClientFromRedisClient(db.Client)
	if _, err := client.Enqueue(asynq.NewTask("probe", nil), asynq.Queue(queue)); err != nil {
		t.Fatal(err)
	}
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	if err := Mount(app, db.Client, Monitoring{Loopback: true}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = app.Listener(ln) }()
	defer func() { _ = app.Shutdown() }()

	userData := t.TempDir()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser),
		chromedp.UserDataDir(userData),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		// The UI links web fonts; on a closed network their lookup must fail at once, not hang the load.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 60*time.Second)
	defer cancel()

	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+ln.Addr().String()+"/monitoring/")); err != nil {
		t.Fatalf("browser: %v", err)
	}
	// The queues table is drawn by the UI's JavaScript from /monitoring/api/queues.
	cell, err := chromedp.Run(ctx, chromedp.Poll[string](`(() => {
		const td = [...document.querySelectorAll("table td, table th")].find(td => td.textContent.trim() === "`+queue+`");
		return td ? td.textContent.trim() : "";
	})()`, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second)))
	if err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string]("document.body.innerText"))
		t.Fatalf("browser: queue %q never listed: %v\npage text: %.2000s", queue, err, text)
	}
	title, err := chromedp.Run(ctx, chromedp.Title())
	if err != nil {
		t.Fatal(err)
	}
	if cell != queue || !strings.Contains(strings.ToLower(title), "asynq") {
		t.Fatalf("page title %q, queue cell %q", title, cell)
	}
}
