package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
	"github.com/waitroom/waitroom/topics"
)

// StateFields are the field/value pairs of an item's state hash (without
// its version): what ApplyItem stores and a rebuild of the view writes.
func StateFields(s topics.ItemState) []any {
	return []any{
		"name", s.Name,
		"stock", strconv.FormatInt(s.Stock, 10),
		"enabled", strconv.FormatBool(s.Enabled),
		"ratePerSecond", strconv.FormatFloat(s.Policy.RatePerSecond, 'f', -1, 64),
		"maxActive", strconv.FormatInt(s.Policy.MaxActive, 10),
		"sessionTTLSeconds", strconv.FormatInt(s.Policy.SessionTTLSeconds, 10),
		"paused", strconv.FormatBool(s.Policy.Paused),
		"mode", s.ModeOf(),
		"rejectMessage", s.RejectMessage,
		"notice", s.Notice,
		"template", s.Template,
		"templates", templatesField(s.Templates),
		"opensAt", strconv.FormatInt(s.OpensAt, 10),
		"drawWindowSeconds", strconv.FormatInt(s.DrawWindowSeconds, 10),
		"drawCommit", s.DrawCommit,
		"drawRounds", strconv.FormatInt(s.DrawRounds, 10),
		"drawSalt", s.DrawSalt,
		"idleTimeoutSeconds", strconv.FormatInt(s.IdleTimeoutSeconds, 10),
		"powDifficulty", strconv.Itoa(s.PowDifficulty),
		"updatedAt", strconv.FormatInt(s.UpdatedAt, 10),
		"minRate", strconv.FormatFloat(s.Policy.MinRate, 'f', -1, 64),
		"maxRate", strconv.FormatFloat(s.Policy.MaxRate, 'f', -1, 64),
		"steer", steerField(s.Policy.Steer),
	}
}

// templatesField is an item's templates by language as one hash field: a
// JSON object, "" for none (so a state without them clears the field).
func templatesField(ts map[string]string) string {
	if len(ts) == 0 {
		return ""
	}
	b, _ := json.Marshal(ts) // strings always marshal
	return string(b)
}

// steerField is a steering policy as the state hash keeps it: its JSON, ""
// for none.
func steerField(p *topics.SteerPolicy) string {
	if p == nil {
		return ""
	}
	return string(topics.Encode(p))
}

// ApplyItem stores an item's state from waitroom.items when its version is
// newer than the stored one; applied is false for a stale or repeated version.
func (l *Line) ApplyItem(ctx context.Context, s topics.ItemState) (applied bool, err error) {
	args := append([]any{strconv.FormatInt(s.Version, 10)}, StateFields(s)...)
	k := KeysFor(s.ItemID)
	n, err := applyItemScript.Run(ctx, l.rdb, []string{k.State, k.Changes}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("apply item %s v%d: %w", s.ItemID, s.Version, err)
	}
	return n == 1, nil
}

// DeleteItem removes an item's state (a tombstone on waitroom.items).
func (l *Line) DeleteItem(ctx context.Context, item string) error {
	if err := l.rdb.Del(ctx, KeysFor(item).State).Err(); err != nil {
		return fmt.Errorf("delete item %s: %w", item, err)
	}
	return nil
}

// Item reads an item's stored state; ok is false when none is stored.
func (l *Line) Item(ctx context.Context, item string) (s topics.ItemState, ok bool, err error) {
	m, err := l.rdb.HGetAll(ctx, KeysFor(item).State).Result()
	if err != nil && err != redis.Nil {
		return s, false, fmt.Errorf("read item %s: %w", item, err)
	}
	if len(m) == 0 {
		return s, false, nil
	}
	s = topics.ItemState{V: topics.Version, ItemID: item, Name: m["name"]}
	var perr error
	parse := func(k string, bits int) int64 {
		v, err := strconv.ParseInt(m[k], 10, bits)
		if err != nil && perr == nil {
			perr = fmt.Errorf("field %s: %w", k, err)
		}
		return v
	}
	s.Version = parse("version", 64)
	s.Stock = parse("stock", 64)
	s.Policy.MaxActive = parse("maxActive", 64)
	s.Policy.SessionTTLSeconds = parse("sessionTTLSeconds", 64)
	s.UpdatedAt = parse("updatedAt", 64)
	// Fields added later read as 0 from a state stored before them.
	opt := func(k string, bits int) int64 {
		if m[k] == "" {
			return 0
		}
		return parse(k, bits)
	}
	s.OpensAt = opt("opensAt", 64)
	s.DrawWindowSeconds = opt("drawWindowSeconds", 64)
	s.DrawCommit = m["drawCommit"]
	s.DrawRounds = opt("drawRounds", 64)
	s.DrawSalt = m["drawSalt"]
	s.IdleTimeoutSeconds = opt("idleTimeoutSeconds", 64)
	s.PowDifficulty = int(opt("powDifficulty", 32))
	s.Enabled = m["enabled"] == "true"
	s.Policy.Paused = m["paused"] == "true"
	if mode := m["mode"]; mode != topics.ModeFIFO {
		s.Mode = mode // fifo reads back as "", as it was published
	}
	s.RejectMessage, s.Notice, s.Template = m["rejectMessage"], m["notice"], m["template"]
	if ts := m["templates"]; ts != "" {
		if err := json.Unmarshal([]byte(ts), &s.Templates); err != nil && perr == nil {
			perr = fmt.Errorf("field templates: %w", err)
		}
	}
	if s.Policy.RatePerSecond, err = strconv.ParseFloat(m["ratePerSecond"], 64); err != nil && perr == nil {
		perr = fmt.Errorf("field ratePerSecond: %w", err)
	}
	optRate := func(k string) float64 {
		v, err := strconv.ParseFloat(m[k], 64)
		if err != nil && m[k] != "" && perr == nil {
			perr = fmt.Errorf("field %s: %w", k, err)
		}
		return v
	}
	s.Policy.MinRate, s.Policy.MaxRate = optRate("minRate"), optRate("maxRate")
	if m["steer"] != "" {
		s.Policy.Steer = new(topics.SteerPolicy)
		if err := json.Unmarshal([]byte(m["steer"]), s.Policy.Steer); err != nil && perr == nil {
			perr = fmt.Errorf("field steer: %w", err)
		}
	}
	if perr != nil {
		return s, false, fmt.Errorf("read item %s: %w", item, perr)
	}
	return s, true, nil
}
