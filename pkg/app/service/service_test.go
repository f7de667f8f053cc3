package service

import (
	"testing"

	"github.com/waitroom/waitroom/pkg/foundation/config"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// The start-up line prints the log format the logger uses, not the one the
// environment (or its default) asked for.
func TestStartLinePrintsTheLogFormatInUse(t *testing.T) {
	type cfg struct {
		Addr string `env:"WR_X_ADDR"`
		Key  string `env:"WR_X_KEY" secret:"true"`
		Log  config.Log
	}
	c := cfg{Addr: ":1", Key: "s3cret", Log: config.Log{Level: "info", Format: "json"}}
	core, logs := observer.New(zapcore.InfoLevel)
	zap.New(core).Info("starting", startFields(c, config.Log{Level: "debug", Format: "console"}))
	got := logs.All()[0].ContextMap()["config"].(map[string]any)
	for k, want := range map[string]any{"WR_LOG_FORMAT": "console", "WR_LOG_LEVEL": "debug", "WR_X_ADDR": ":1", "WR_X_KEY": "***"} {
		if got[k] != want {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
}
