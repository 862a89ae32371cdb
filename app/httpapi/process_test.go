package httpapi_test

import (
	"context"

	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app"
	"github.com/jobguard/jobguard/app/config"
	"github.com/jobguard/jobguard/app/httpapi"
)

// The API's tests run it in a whole process: app builds one and imports httpapi, so only this
// external test file may import app, and it hands app's constructors to the internal tests.
func init() {
	httpapi.SetProcess(func(ctx context.Context, cfg config.Config, role httpapi.Role, log zerolog.Logger) (httpapi.Process, error) {
		a, err := app.New(ctx, cfg, app.Role(role), log)
		if err != nil {
			return nil, err
		}
		return a, nil
	}, app.Main)
}
