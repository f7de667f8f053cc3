package promote_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/security/bypass"
	"github.com/waitroom/waitroom/services/scheduler/promote"
)

// A deployed scheduler refuses an admin token under 32 bytes; only the dev
// stack (DevKeys, set in code) runs on its short built-in one.
func TestConfigAdminToken(t *testing.T) {
	base, err := config.Defaults[promote.Config]()
	if err != nil {
		t.Fatal(err)
	}
	base.Kafka.Brokers, base.Redis.Addr = []string{"127.0.0.1:9092"}, "127.0.0.1:6379"
	if !base.ConsoleSecureCookie || base.ConsoleSessionTTL != 8*time.Hour || base.DevKeys {
		t.Fatalf("defaults: secure %v, ttl %s, dev keys %v; want true, 8h, false", base.ConsoleSecureCookie, base.ConsoleSessionTTL, base.DevKeys)
	}
	for _, c := range []struct {
		name    string
		token   string
		dev     bool
		ttl     time.Duration
		refused string // "" accepted, else a part of the error
	}{
		{"unset: the admin API refuses everyone", "", false, time.Hour, ""},
		{"32 bytes", strings.Repeat("k", 32), false, time.Hour, ""},
		{"31 bytes", strings.Repeat("k", 31), false, time.Hour, "WR_ADMIN_TOKEN must be at least 32 bytes, not 31"},
		{"the dev stack's token outside the dev stack", "dev-admin-token", false, time.Hour, "WR_ADMIN_TOKEN must be at least 32 bytes"},
		{"the dev stack's token on the dev stack", "dev-admin-token", true, time.Hour, ""},
		{"no session time", strings.Repeat("k", 32), false, 0, "WR_CONSOLE_SESSION_TTL must be positive"},
	} {
		cfg := base
		cfg.AdminToken, cfg.DevKeys, cfg.ConsoleSessionTTL = c.token, c.dev, c.ttl
		err := cfg.Validate()
		switch {
		case c.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.refused)
		}
	}
}

// The bypass and draw keys published in the source (the dev stack's) are
// refused outside the dev stack, pasted into the environment or not.
func TestConfigRefusesPublishedKeys(t *testing.T) {
	base, err := config.Defaults[promote.Config]()
	if err != nil {
		t.Fatal(err)
	}
	base.Kafka.Brokers, base.Redis.Addr = []string{"127.0.0.1:9092"}, "127.0.0.1:6379"
	for name, set := range map[string]func(*promote.Config){
		"WR_BYPASS_KEY": func(c *promote.Config) { c.BypassKey = bypass.DevKey },
		"WR_DRAW_KEY":   func(c *promote.Config) { c.DrawKey = draw.DevKey },
	} {
		cfg := base
		set(&cfg)
		if err := cfg.Validate(); !errors.Is(err, config.ErrPublishedKey) || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: %v, want it refused as published", name, err)
		}
		cfg.DevKeys = true
		if err := cfg.Validate(); err != nil {
			t.Errorf("%s on the dev stack: %v", name, err)
		}
	}
}
