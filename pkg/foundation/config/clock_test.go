package config

import (
	"testing"
	"time"
)

// A process's clock is the machine's moved by its offset, either way.
func TestClockIsTheMachinesMovedByItsOffset(t *testing.T) {
	for _, off := range []time.Duration{0, 1500 * time.Millisecond, -90 * time.Second} {
		before := time.Now()
		got := Clock{Offset: off}.Now()
		after := time.Now()
		if got.Before(before.Add(off)) || got.After(after.Add(off)) {
			t.Fatalf("offset %s: now %s, want within [%s, %s]", off, got, before.Add(off), after.Add(off))
		}
	}
}

// WR_CLOCK_OFFSET sets it; unset, the clock is the machine's.
func TestClockOffsetFromTheEnvironment(t *testing.T) {
	type cfg struct{ Clock Clock }
	t.Setenv("WR_CLOCK_OFFSET", "-2.5s")
	c, err := Load[cfg]()
	if err != nil {
		t.Fatal(err)
	}
	if c.Clock.Offset != -2500*time.Millisecond {
		t.Fatalf("offset %s, want -2.5s", c.Clock.Offset)
	}
}
