package app

import (
	"context"
	"fmt"
	"io"
	"log"
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

func newAsynqLogger(l zerolog.Logger) asynqLogger {
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
// App still open, so a closed App's writer (a finished test's, say) never receives one; before the
// first App and after the last, lines go to stderr as JSON. go-redis's lines name addresses,
// master names and errors: it never formats a password or a URL into them.
type processLogs struct {
	mu   sync.Mutex
	live []liveLog
}

type liveLog struct {
	owner *App
	log   zerolog.Logger
}

var (
	procLogs     processLogs
	procLogsOnce sync.Once
	stderrLog    = zerolog.New(os.Stderr).With().Timestamp().Logger()
)

// routeProcessLogs makes a's logger receive process-wide log lines until unrouteProcessLogs(a).
func routeProcessLogs(a *App) {
	procLogsOnce.Do(func() {
		redis.SetLogger(redisLogger{})
		log.SetFlags(0) // zerolog stamps the time
		log.SetPrefix("")
		log.SetOutput(stdLogWriter{})
	})
	procLogs.mu.Lock()
	defer procLogs.mu.Unlock()
	procLogs.live = append(procLogs.live, liveLog{a, a.log})
}

// unrouteProcessLogs stops sending those lines to a's logger; safe to call more than once.
func unrouteProcessLogs(a *App) {
	procLogs.mu.Lock()
	defer procLogs.mu.Unlock()
	for i, l := range procLogs.live {
		if l.owner == a {
			procLogs.live = append(procLogs.live[:i], procLogs.live[i+1:]...)
			return
		}
	}
}

func (p *processLogs) warn(component, msg string) {
	p.mu.Lock()
	defer p.mu.Unlock() // held while writing: unrouteProcessLogs waits for a line in flight
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

func asynqLevel(l zerolog.Level) asynq.LogLevel {
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
