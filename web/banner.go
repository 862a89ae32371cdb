package web

import (
	"bytes"
	"html"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// asynqmon's pages link to jobguard's: the HTML asynqmon serves (its single page, for every path
// that is not an asset or its API) gets a small fixed banner right after <body>, linking to the
// logical queues (a sharded queue's shards summed), jobs, workflows and schedules pages. asynqmon
// is mounted, not forked, so its page is edited on the way out.

// bannerID is the banner's element id (tests find it by it).
const bannerID = "jobguard-banner"

// banner is the banner's HTML for the UI under root.
func banner(root string) []byte {
	r := html.EscapeString(root)
	return []byte(`<div id="` + bannerID + `" style="position:fixed;right:12px;bottom:12px;z-index:2147483647;` +
		`background:#263238;color:#fff;font:13px/1.4 system-ui,sans-serif;padding:6px 12px;border-radius:4px;` +
		`box-shadow:0 1px 4px rgba(0,0,0,.4)">jobguard: <a style="color:#80cbc4" href="` + r + `/logical-queues">Logical queues</a> · ` +
		`<a style="color:#80cbc4" href="` + r + `/jobs">Jobs</a> · ` +
		`<a style="color:#80cbc4" href="` + r + `/workflows">Workflows</a> · ` +
		`<a style="color:#80cbc4" href="` + r + `/schedules">Schedules</a></div>`)
}

// withBanner puts the banner into the HTML pages ui answers with.
func withBanner(ui fiber.Handler, root string) fiber.Handler {
	b := banner(root)
	return func(c *fiber.Ctx) error {
		if err := ui(c); err != nil {
			return err
		}
		if c.Method() != fiber.MethodGet || c.Response().StatusCode() != fiber.StatusOK ||
			!strings.HasPrefix(string(c.Response().Header.ContentType()), "text/html") {
			return nil
		}
		body := c.Response().Body()
		open := bytes.Index(body, []byte("<body"))
		if open < 0 {
			return nil
		}
		end := bytes.IndexByte(body[open:], '>')
		if end < 0 {
			return nil
		}
		at := open + end + 1
		out := make([]byte, 0, len(body)+len(b))
		out = append(append(append(out, body[:at]...), b...), body[at:]...)
		c.Response().SetBodyRaw(out)
		return nil
	}
}
