package app

import (
	_ "embed"

	"github.com/gofiber/fiber/v2"
)

// openAPIDoc is the OpenAPI 3.1 description of the HTTP API, written by hand. Every response of
// the app's tests is validated against it (openapi_check_test.go), so it cannot drift from the code.
//
//go:embed openapi.json
var openAPIDoc []byte

// openAPIPath serves openAPIDoc, without a token: it tells nothing a client could not learn.
const openAPIPath = "/openapi.json"

func openAPIRoute(f *fiber.App) {
	f.Get(openAPIPath, func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(openAPIDoc)
	})
}
