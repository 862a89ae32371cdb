package httpapi

import (
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/gofiber/fiber/v2"

	"github.com/jobguard/jobguard/app/problem"
)

// A request no route matched is 405 with Allow when a route of the same app serves its path for
// other methods (RFC 9110 section 15.5.6), else 404. Fiber v2 answers 405 only when nothing in
// its stack matched, and the 404 fallback (a Use route) always matches, so the fallback looks the
// path up in the app's route table itself.
//
// Patterns count as the path existing: DELETE /jobs/abc is 405 (GET /jobs/:id serves any id),
// whether or not job abc exists. One family is exempt: POST /jobs/<segment> is the enqueue route
// of the task type <segment>, so a POST to an unknown type is 404 ("no such task type"), not 405.

// enqueueFamily is the pattern of the enqueue routes (one per task type, api.routes).
const enqueueFamily = "/jobs/:type"

// fallback is the last handler of f: 405 for a known path with the wrong method, else notFound.
// The route table is read at the first request, once every route is added.
func fallback(f *fiber.App) fiber.Handler {
	table := sync.OnceValue(func() []routeMethods { return routeTable(f) })
	return func(c *fiber.Ctx) error {
		path := c.Path()
		if c.Method() == http.MethodPost && matchPattern(enqueueFamily, path) {
			return notFound(c)
		}
		allow := allowedMethods(table(), path)
		if len(allow) == 0 {
			return notFound(c)
		}
		c.Locals(localUnmatched, true)
		c.Set(fiber.HeaderAllow, strings.Join(allow, ", "))
		return &problem.HTTPError{Status: http.StatusMethodNotAllowed, Code: problem.CodeMethodNotAllowed,
			Detail: c.Method() + " is not a method of " + path + "; it takes " + strings.Join(allow, ", ")}
	}
}

// routeMethods is a route pattern and the methods its routes take, in fiber.DefaultMethods' order.
type routeMethods struct {
	pattern string
	methods []string
}

// routeTable groups f's routes (middleware left out) by pattern.
func routeTable(f *fiber.App) []routeMethods {
	var out []routeMethods
	for _, r := range f.GetRoutes(true) {
		i := slices.IndexFunc(out, func(m routeMethods) bool { return m.pattern == r.Path })
		if i < 0 {
			out = append(out, routeMethods{pattern: r.Path})
			i = len(out) - 1
		}
		if !slices.Contains(out[i].methods, r.Method) {
			out[i].methods = append(out[i].methods, r.Method)
		}
	}
	for i := range out {
		slices.SortFunc(out[i].methods, func(a, b string) int {
			return slices.Index(fiber.DefaultMethods, a) - slices.Index(fiber.DefaultMethods, b)
		})
	}
	return out
}

// allowedMethods are the methods of every pattern that matches path, nil when none does.
func allowedMethods(table []routeMethods, path string) []string {
	var allow []string
	for _, r := range table {
		if !matchPattern(r.pattern, path) {
			continue
		}
		for _, m := range r.methods {
			if !slices.Contains(allow, m) {
				allow = append(allow, m)
			}
		}
	}
	slices.SortFunc(allow, func(a, b string) int {
		return slices.Index(fiber.DefaultMethods, a) - slices.Index(fiber.DefaultMethods, b)
	})
	return allow
}

// matchPattern says whether path matches a route pattern as Fiber's default router does for the
// patterns this app registers: segments compared without case, ":name" matching one non-empty
// segment, "*" the rest of the path, and a trailing slash ignored (StrictRouting is off).
func matchPattern(pattern, path string) bool {
	ps := strings.Split(strings.TrimSuffix(pattern, "/"), "/")
	xs := strings.Split(strings.TrimSuffix(path, "/"), "/")
	for i, p := range ps {
		if p == "*" {
			return true
		}
		if i >= len(xs) {
			return false
		}
		switch {
		case strings.HasPrefix(p, ":"):
			if xs[i] == "" {
				return false
			}
		case !strings.EqualFold(p, xs[i]):
			return false
		}
	}
	return len(xs) == len(ps)
}
