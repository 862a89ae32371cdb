// Package observe is what a jobguard process says about itself: its logger (and the routing of
// asynq's, go-redis's and the standard library's lines into it), its Prometheus registry with
// asynq's queue gauges, and the OpenTelemetry exporter. The HTTP server's own metrics and spans
// are the HTTP layer's, registered here as collectors. It may import app/config and the library;
// nothing else of app.
package observe

import (
	"context"
	"fmt"
	"io"
	stdlog "log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/rs/zerolog"

	"github.com/jobguard/jobguard/app/config"
)

// timeFormatOnce sets zerolog's process-wide time format once: writing it on every NewLogger
// raced with loggers already writing in other goroutines.
var timeFormatOnce sync.Once

// NewLogger builds the process logger: JSON lines by default, coloured console lines for humans.
func NewLogger(cfg config.Config, w io.Writer) zerolog.Logger {
	if cfg.LogFormat == config.LogConsole {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	timeFormatOnce.Do(func() { zerolog.TimeFieldFormat = time.RFC3339Nano })
	return zerolog.New(w).Level(cfg.LogLevel).With().Timestamp().Logger()
}

// asynqLogger routes asynq's own log lines into zerolog with component=asynq.
type asynqLogger struct{ log zerolog.Logger }

// AsynqLogger is l as asynq.Config.Logger.
func AsynqLogger(l zerolog.Logger) asynq.Logger {
	return asynqLogger{l.With().Str("component", "asynq").Logger()}
}

func (a asynqLogger) Debug(args ...any) { a.log.Debug().Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.log.Info().Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.log.Warn().Msg(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.log.Error().Msg(fmt.Sprint(args...)) }

// Fatal logs without exiting: the process's own shutdown path decides how it ends.
func (a asynqLogger) Fatal(args ...any) { a.log.WithLevel(zerolog.FatalLevel).Msg(fmt.Sprint(args...)) }

// processLogs routes the lines of loggers that are process-wide, go-redis's (redis.SetLogger)
// and the standard library's log package (asynqmon writes there), into zerolog as warn events
// with component=redis or component=stdlog. They are hooked once, and each line goes to the newest
// owner still routed, so a closed App's writer (a finished test's, say) never receives one; before the
// first owner and after the last, lines go to stderr as JSON. go-redis's lines name addresses,
// master names and errors: it never formats a password or a URL into them.
type processLogs struct {
	mu   sync.Mutex
	live []liveLog
}

type liveLog struct {
	owner any // a pointer: the App whose logger this is
	log   zerolog.Logger
}

var (
	procLogs     processLogs
	procLogsOnce sync.Once
	stderrLog    = zerolog.New(os.Stderr).With().Timestamp().Logger()
)

// RouteProcessLogs makes log receive process-wide log lines until UnrouteProcessLogs(owner);
// owner is a pointer that names the route (the App).
func RouteProcessLogs(owner any, log zerolog.Logger) {
	procLogsOnce.Do(func() {
		redis.SetLogger(redisLogger{})
		stdlog.SetFlags(0) // zerolog stamps the time
		stdlog.SetPrefix("")
		stdlog.SetOutput(stdLogWriter{})
	})
	procLogs.mu.Lock()
	defer procLogs.mu.Unlock()
	procLogs.live = append(procLogs.live, liveLog{owner, log})
}

// UnrouteProcessLogs stops sending those lines to owner's logger; safe to call more than once.
func UnrouteProcessLogs(owner any) {
	procLogs.mu.Lock()
	defer procLogs.mu.Unlock()
	for i, l := range procLogs.live {
		if l.owner == owner {
			procLogs.live = append(procLogs.live[:i], procLogs.live[i+1:]...)
			return
		}
	}
}

func (p *processLogs) warn(component, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock() // held while writing: UnrouteProcessLogs waits for a line in flight
	l := &stderrLog
	if n := len(p.live); n > 0 {
		l = &p.live[n-1].log
	}
	l.Warn().Str("component", component).Msg(strings.TrimSpace(msg))
}

// redisLogger is go-redis's internal.Logging.
type redisLogger struct{}

func (redisLogger) Printf(_ context.Context, format string, v ...any) {
	procLogs.warn("redis", fmt.Sprintf(format, v...))
}

// stdLogWriter is the standard log package's output: one Write per line.
type stdLogWriter struct{}

func (stdLogWriter) Write(p []byte) (int, error) {
	procLogs.warn("stdlog", string(p))
	return len(p), nil
}

// AsynqLevel is the asynq log level of a zerolog level.
func AsynqLevel(l zerolog.Level) asynq.LogLevel {
	switch {
	case l <= zerolog.DebugLevel:
		return asynq.DebugLevel
	case l == zerolog.InfoLevel:
		return asynq.InfoLevel
	case l == zerolog.WarnLevel:
		return asynq.WarnLevel
	default:
		return asynq.ErrorLevel
	}
}
