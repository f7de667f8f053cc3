package service

import (
	"fmt"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewLogger returns the zap logger every waitroom process uses: at level ("debug", "info", "warn", "error") writing
// JSON, or human-readable lines when format is "console".
func NewLogger(level, format, service string) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, fmt.Errorf("log level %q: %w", level, err)
	}
	c := zap.NewProductionConfig()
	if format == "console" {
		c = zap.NewDevelopmentConfig()
		c.EncoderConfig.EncodeLevel = zapcore.CapitalColorLevelEncoder
		c.DisableStacktrace = true
	}
	c.Level = zap.NewAtomicLevelAt(lvl)
	c.Sampling = nil
	c.EncoderConfig.TimeKey = "ts"
	c.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	log, err := c.Build()
	if err != nil {
		return nil, fmt.Errorf("build logger: %w", err)
	}
	if service != "" {
		log = log.With(zap.String("service", service))
	}
	return log, nil
}
