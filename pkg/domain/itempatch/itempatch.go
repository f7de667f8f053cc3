// Package itempatch is an operator's change to an item: the admin API's
// request bodies and `waitroomctl items set` both check and apply a Patch, so
// the bounds and the meaning of every field live in one place.
package itempatch

import (
	"fmt"
	"maps"
	"strings"

	"github.com/waitroom/waitroom/pkg/domain/pagetemplate"

	"github.com/waitroom/waitroom/topics"
)

// Bounds of an operator's change, tighter than the contract's
// (topics.ItemState.Validate) so a typo cannot open the floodgates.
const (
	MaxRate       = 100_000
	MaxActiveCap  = 10_000_000
	MaxTTLSeconds = 86_400
	MaxNameBytes  = 200
)

// NewItem is the state of an item a patch creates: enabled, unlimited stock,
// 10 admissions a second, at most 1000 admitted at once, 5 minute sessions.
func NewItem(id string) topics.ItemState {
	return topics.ItemState{ItemID: id, Name: id, Stock: topics.Unlimited, Enabled: true,
		Policy: topics.AdmissionPolicy{RatePerSecond: 10, MaxActive: 1000, SessionTTLSeconds: 300}}
}

// State changes an item's state (POST .../items/:itemId); nil fields stay.
type State struct {
	Name    *string `json:"name,omitempty"`
	Stock   *int64  `json:"stock,omitempty"` // topics.Unlimited (-1) or how many are left
	Enabled *bool   `json:"enabled,omitempty"`
	// Mode is the queue mode: fifo, passthrough, reject, random or auto (topics.Mode*).
	Mode *string `json:"mode,omitempty"`
	// RejectMessage is what registrations refused in reject mode are told.
	RejectMessage *string `json:"rejectMessage,omitempty"`
	// Notice is the operator's message to everyone waiting ("": cleared).
	Notice *string `json:"notice,omitempty"`
	// Template is the item's own waiting page ("": the install's), checked
	// by pagetemplate.Accept.
	Template *string `json:"template,omitempty"`
	// Templates are the item's own pages by language (pagetemplate.Languages):
	// a page sets that language's, "" removes it; languages not named stay.
	Templates map[string]string `json:"templates,omitempty"`
	// IdleTimeoutSeconds releases places idle that long (0: off).
	IdleTimeoutSeconds *int64 `json:"idleTimeoutSeconds,omitempty"`
	// PowDifficulty asks registrations for a proof-of-work of that many
	// leading zero bits (0: off).
	PowDifficulty *int `json:"powDifficulty,omitempty"`
	// OpensAt schedules the sale (unix ms; 0: open now) and
	// DrawWindowSeconds sets random mode's windows. Both need a draw
	// commitment, which the admin API adds (it holds the draw key).
	OpensAt           *int64 `json:"opensAt,omitempty"`
	DrawWindowSeconds *int64 `json:"drawWindowSeconds,omitempty"`
}

// Policy changes an item's admission policy (PUT .../items/:itemId/admission);
// nil fields stay. Paused stops admission and keeps the rate, so
// {"paused":false} alone resumes at the rate the item had.
type Policy struct {
	RatePerSecond     *float64 `json:"ratePerSecond,omitempty"`
	MaxActive         *int64   `json:"maxActive,omitempty"`
	SessionTTLSeconds *int64   `json:"sessionTTLSeconds,omitempty"`
	Paused            *bool    `json:"paused,omitempty"`
	// MinRate and MaxRate bound the steering controller's rate.
	MinRate *float64 `json:"minRate,omitempty"`
	MaxRate *float64 `json:"maxRate,omitempty"`
	// Steer sets the steering policy (docs/steering.md); Unsteer true
	// removes it (the item runs on its static policy alone).
	Steer   *topics.SteerPolicy `json:"steer,omitempty"`
	Unsteer *bool               `json:"unsteer,omitempty"`
}

// Patch is a change of both.
type Patch struct {
	State
	Policy
}

// Error names the field a patch cannot have and why.
type Error struct {
	Field   string // the JSON name: ratePerSecond, maxActive, ...
	Problem string
}

func (e *Error) Error() string { return e.Field + ": " + e.Problem }

func fieldErr(field, format string, a ...any) *Error {
	return &Error{Field: field, Problem: fmt.Sprintf(format, a...)}
}

// Empty reports a state change that changes nothing.
func (s *State) Empty() bool {
	return s.Name == nil && s.Stock == nil && s.Enabled == nil && s.Mode == nil && s.RejectMessage == nil && s.Notice == nil && s.Template == nil && len(s.Templates) == 0 &&
		s.IdleTimeoutSeconds == nil && s.PowDifficulty == nil && s.OpensAt == nil && s.DrawWindowSeconds == nil
}

// Check reports the first field out of bounds.
func (s *State) Check() *Error {
	switch {
	case s.Name != nil && len(*s.Name) > MaxNameBytes:
		return fieldErr("name", "longer than %d bytes", MaxNameBytes)
	case s.Stock != nil && *s.Stock < topics.Unlimited:
		return fieldErr("stock", "%d is below -1 (unlimited)", *s.Stock)
	case s.Mode != nil && (*s.Mode == "" || !topics.ValidMode(*s.Mode)):
		return fieldErr("mode", "%q is not fifo, passthrough, reject, random or auto", *s.Mode)
	case s.RejectMessage != nil && len(*s.RejectMessage) > topics.MaxRejectMessage:
		return fieldErr("rejectMessage", "longer than %d bytes", topics.MaxRejectMessage)
	case s.Notice != nil && len(*s.Notice) > topics.MaxNotice:
		return fieldErr("notice", "longer than %d bytes", topics.MaxNotice)
	case s.IdleTimeoutSeconds != nil && (*s.IdleTimeoutSeconds < 0 || *s.IdleTimeoutSeconds > topics.MaxIdleTimeoutSeconds):
		return fieldErr("idleTimeoutSeconds", "%d is not in 0..%d (0: off)", *s.IdleTimeoutSeconds, topics.MaxIdleTimeoutSeconds)
	case s.PowDifficulty != nil && (*s.PowDifficulty < 0 || *s.PowDifficulty > topics.MaxPowDifficulty):
		return fieldErr("powDifficulty", "%d is not in 0..%d (0: off)", *s.PowDifficulty, topics.MaxPowDifficulty)
	case s.OpensAt != nil && *s.OpensAt < 0:
		return fieldErr("opensAt", "%d is negative (unix ms; 0: open now)", *s.OpensAt)
	case s.DrawWindowSeconds != nil && (*s.DrawWindowSeconds < 0 || *s.DrawWindowSeconds > 86400):
		return fieldErr("drawWindowSeconds", "%d is not in 0..86400", *s.DrawWindowSeconds)
	}
	if s.Template != nil && *s.Template != "" {
		if _, err := pagetemplate.Accept(*s.Template, ""); err != nil {
			return fieldErr("template", "%v", err)
		}
	}
	return s.checkTemplates()
}

// checkTemplates checks the pages by language, in the order of
// pagetemplate.Languages (the first problem is the same every time).
func (s *State) checkTemplates() *Error {
	for lang := range s.Templates {
		if !pagetemplate.IsLanguage(lang) {
			return fieldErr("templates", "%q is not a language the room speaks (%s)", lang, strings.Join(pagetemplate.Languages(), ", "))
		}
	}
	for _, lang := range pagetemplate.Languages() {
		if src := s.Templates[lang]; src != "" {
			if _, err := pagetemplate.Accept(src, lang); err != nil {
				return fieldErr("templates", "%s: %v", lang, err)
			}
		}
	}
	return nil
}

// Apply returns it with the change.
func (s *State) Apply(it topics.ItemState) topics.ItemState {
	if s.Name != nil {
		it.Name = *s.Name
	}
	if s.Stock != nil {
		it.Stock = *s.Stock
	}
	if s.Enabled != nil {
		it.Enabled = *s.Enabled
	}
	if s.Mode != nil {
		it.Mode = *s.Mode
	}
	if s.RejectMessage != nil {
		it.RejectMessage = *s.RejectMessage
	}
	if s.Notice != nil {
		it.Notice = *s.Notice
	}
	if s.Template != nil {
		it.Template = *s.Template
	}
	if len(s.Templates) > 0 {
		ts := make(map[string]string, len(it.Templates)+len(s.Templates))
		maps.Copy(ts, it.Templates)
		for lang, src := range s.Templates {
			if src == "" {
				delete(ts, lang)
			} else {
				ts[lang] = src
			}
		}
		it.Templates = nil
		if len(ts) > 0 {
			it.Templates = ts
		}
	}
	if s.IdleTimeoutSeconds != nil {
		it.IdleTimeoutSeconds = *s.IdleTimeoutSeconds
	}
	if s.PowDifficulty != nil {
		it.PowDifficulty = *s.PowDifficulty
	}
	if s.OpensAt != nil {
		it.OpensAt = *s.OpensAt
	}
	if s.DrawWindowSeconds != nil {
		it.DrawWindowSeconds = *s.DrawWindowSeconds
	}
	return it
}

// Empty reports a policy change that changes nothing.
func (p *Policy) Empty() bool {
	return p.RatePerSecond == nil && p.MaxActive == nil && p.SessionTTLSeconds == nil && p.Paused == nil &&
		p.MinRate == nil && p.MaxRate == nil && p.Steer == nil && p.Unsteer == nil
}

// Check reports the first field out of bounds.
func (p *Policy) Check() *Error {
	switch {
	case p.RatePerSecond != nil && (*p.RatePerSecond < 0 || *p.RatePerSecond > MaxRate):
		return fieldErr("ratePerSecond", "%v is not in 0..%d (0 admits nobody)", *p.RatePerSecond, MaxRate)
	case p.MaxActive != nil && (*p.MaxActive < 0 || *p.MaxActive > MaxActiveCap):
		return fieldErr("maxActive", "%d is not in 0..%d (0 means no cap)", *p.MaxActive, MaxActiveCap)
	case p.SessionTTLSeconds != nil && (*p.SessionTTLSeconds < 1 || *p.SessionTTLSeconds > MaxTTLSeconds):
		return fieldErr("sessionTTLSeconds", "%d is not in 1..%d", *p.SessionTTLSeconds, MaxTTLSeconds)
	case p.MinRate != nil && (*p.MinRate < 0 || *p.MinRate > MaxRate):
		return fieldErr("minRate", "%v is not in 0..%d", *p.MinRate, MaxRate)
	case p.MaxRate != nil && (*p.MaxRate < 0 || *p.MaxRate > MaxRate):
		return fieldErr("maxRate", "%v is not in 0..%d", *p.MaxRate, MaxRate)
	case p.Steer != nil && p.Unsteer != nil && *p.Unsteer:
		return fieldErr("unsteer", "cannot set steer and remove it in one change")
	}
	return nil
}

// Apply returns cur with the change. Resuming (paused false) an item whose
// rate is 0 is refused unless the change gives a rate: it would admit nobody.
func (p *Policy) Apply(cur topics.AdmissionPolicy) (topics.AdmissionPolicy, *Error) {
	if err := p.Check(); err != nil {
		return cur, err
	}
	next := cur
	if p.RatePerSecond != nil {
		next.RatePerSecond = *p.RatePerSecond
	}
	if p.MaxActive != nil {
		next.MaxActive = *p.MaxActive
	}
	if p.SessionTTLSeconds != nil {
		next.SessionTTLSeconds = *p.SessionTTLSeconds
	}
	if p.Paused != nil {
		next.Paused = *p.Paused
		if !next.Paused && next.RatePerSecond == 0 {
			return cur, fieldErr("ratePerSecond", "resuming at rate 0 admits nobody: give ratePerSecond above 0 with paused false")
		}
	}
	if p.MinRate != nil {
		next.MinRate = *p.MinRate
	}
	if p.MaxRate != nil {
		next.MaxRate = *p.MaxRate
	}
	if p.Steer != nil {
		st := *p.Steer
		next.Steer = &st
	}
	if p.Unsteer != nil && *p.Unsteer {
		next.Steer = nil
	}
	if next.MinRate > next.MaxRate && next.MaxRate > 0 {
		return cur, fieldErr("minRate", "%v is above maxRate %v", next.MinRate, next.MaxRate)
	}
	if next.Steer != nil {
		probe := topics.ItemState{ItemID: "x", Version: 1, Policy: next}
		if err := probe.Validate(); err != nil {
			return cur, fieldErr("steer", "%v", err)
		}
	}
	return next, nil
}

// Empty reports a patch that changes nothing.
func (p *Patch) Empty() bool { return p.State.Empty() && p.Policy.Empty() }

// Check reports the first field out of bounds.
func (p *Patch) Check() *Error {
	if err := p.State.Check(); err != nil {
		return err
	}
	return p.Policy.Check()
}

// Apply returns it with the whole change.
func (p *Patch) Apply(it topics.ItemState) (topics.ItemState, *Error) {
	pol, err := p.Policy.Apply(it.Policy)
	if err != nil {
		return it, err
	}
	it = p.State.Apply(it)
	it.Policy = pol
	return it, nil
}
