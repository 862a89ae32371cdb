package app

import (
	"fmt"
	"io"
	"time"

	"github.com/hibiken/asynq"
	"github.com/rs/zerolog"
)

// NewLogger builds the process logger: JSON lines by default, coloured console lines for humans.
func NewLogger(cfg Config, w io.Writer) zerolog.Logger {
	if cfg.LogFormat == LogConsole {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	zerolog.TimeFieldFormat = time.RFC3339Nano
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
