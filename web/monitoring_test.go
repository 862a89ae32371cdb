package web

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/gofiber/fiber/v2"
	"github.com/hibiken/asynq"

	"github.com/jobguard/jobguard/internal/redistest"
	"github.com/jobguard/jobguard/internal/testsupport"
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

// The UI really renders in a browser under /monitoring/, talks to its API under the same root and
// lists the queue a task was enqueued to, all on the shared client.
func TestBrowserRendersQueues(t *testing.T) {
	t.Parallel()
	ctx := testsupport.Browser(t)
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
