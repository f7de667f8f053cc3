package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Version is the message version every producer writes today.
const Version = 1

// Errors a decoder returns; callers branch on them with errors.Is to pick the
// DLQ error-type.
var (
	// ErrMalformed: the bytes are not a message of a known version (PARSING_ERROR).
	ErrMalformed = errors.New("malformed message")
	// ErrInvalid: a well-formed message whose fields break the contract (VALIDATION_ERROR).
	ErrInvalid = errors.New("invalid message")
)

// Kinds of registration events.
const (
	KindRegister = "register"
	KindLeave    = "leave"
	// KindComplete: the downstream service used the admission; its place is freed.
	KindComplete = "complete"
	// KindAbandon: the waiter neither polled nor held a stream for the
	// item's idleTimeout; the place is released (status ABANDONED). Published
	// by the scheduler's idle sweep.
	KindAbandon = "abandon"
	// KindDraw: the draw of a pre-queue (or of a random-mode window): every
	// register of the item pooled for a window up to Draw.Window is placed
	// in the order of sha256(seed || tokenId). Published by the scheduler
	// once the window closes; carries the revealed seed. TokenID and UserID
	// are empty.
	KindDraw = "draw"
)

// RegistrationEvent is a record of waitroom.registrations: a user joining or
// leaving an item's line, or completing an admission. Key: itemId.
type RegistrationEvent struct {
	V           int         `json:"v"`
	Kind        string      `json:"kind"`
	TokenID     string      `json:"tokenId"`
	ItemID      string      `json:"itemId"`
	UserID      string      `json:"userId"`
	RequestedAt int64       `json:"requestedAt"` // unix milliseconds, set by the API
	Client      *ClientMeta `json:"client,omitempty"`
	// Window is the draw window (its closing time, unix ms) a register
	// joins: the item's opensAt before the sale opens, the current window's
	// end in random mode; 0: first come, first served.
	Window int64 `json:"window,omitempty"`
	// Bypass is the operator-issued bypass code a register used.
	Bypass *BypassUse `json:"bypass,omitempty"`
	// Draw is the draw a KindDraw record performs.
	Draw *Draw `json:"draw,omitempty"`
	// Holder says what keys the place in the item's line (PlaceKey):
	// HolderToken, the registration's own token (its userId is a label the
	// client typed), or HolderUser, the userId (a site-signed assertion
	// proved it). Absent in records written before holders: the userId.
	Holder string `json:"holder,omitempty"`
}

// Holders: what keys a place (RegistrationEvent.Holder).
const (
	HolderToken = "token"
	HolderUser  = "user"
)

// PlaceKey is the key a registration's place is kept under in the item's
// line: its tokenId when holder is HolderToken, else its userId. A place
// keyed by its token belongs to whoever holds that token; only a proven
// userId is a key that a second registration of the same user can find.
func PlaceKey(holder, tokenID, userID string) string {
	if holder == HolderToken {
		return tokenID
	}
	return userID
}

// PlaceKey is the key of the place the record acts on (the package's PlaceKey).
func (e *RegistrationEvent) PlaceKey() string { return PlaceKey(e.Holder, e.TokenID, e.UserID) }

// BypassUse is what a register record says of the bypass code it used: the
// code's id and bound, so the consumer (and a rebuild) can count uses.
type BypassUse struct {
	Code      string `json:"code"`      // the code's id
	Count     int64  `json:"count"`     // how many registrations the code admits
	ExpiresAt int64  `json:"expiresAt"` // unix ms
}

// Draw is a revealed draw: Round of the item's committed hash chain.
// sha256 applied Round times to Seed gives Commit, the drawCommit the item
// published on waitroom.items before the window opened.
type Draw struct {
	Window int64  `json:"window"` // draws every register pooled for a window <= this (unix ms)
	Round  int64  `json:"round"`  // 1-based round of the hash chain
	Seed   string `json:"seed"`   // hex, 32 bytes
	Commit string `json:"commit"` // hex sha256, the item's drawCommit
}

// ClientMeta is what the API saw of the client, kept for audit and abuse review.
type ClientMeta struct {
	IP        string `json:"ip,omitempty"`
	UserAgent string `json:"userAgent,omitempty"`
}

// Validate checks the fields against the contract.
func (e *RegistrationEvent) Validate() error {
	switch {
	case e.Kind != KindRegister && e.Kind != KindLeave && e.Kind != KindComplete && e.Kind != KindAbandon && e.Kind != KindDraw:
		return fmt.Errorf("%w: kind %q is not register, leave, complete, abandon or draw", ErrInvalid, e.Kind)
	case !ValidID(e.ItemID):
		return fmt.Errorf("%w: itemId %q is not %s", ErrInvalid, e.ItemID, IDRule)
	case e.Kind == KindDraw:
		return e.validateDraw()
	case e.Draw != nil:
		return fmt.Errorf("%w: a %s record carries a draw", ErrInvalid, e.Kind)
	case !ValidID(e.UserID):
		return fmt.Errorf("%w: userId %q is not %s", ErrInvalid, e.UserID, IDRule)
	case !ValidID(e.TokenID):
		return fmt.Errorf("%w: tokenId %q is not %s", ErrInvalid, e.TokenID, IDRule)
	case e.RequestedAt <= 0:
		return fmt.Errorf("%w: requestedAt %d is not a positive unix-ms time", ErrInvalid, e.RequestedAt)
	case e.Window < 0:
		return fmt.Errorf("%w: window %d is negative", ErrInvalid, e.Window)
	case e.Holder != "" && e.Holder != HolderToken && e.Holder != HolderUser:
		return fmt.Errorf("%w: holder %q is not %q or %q", ErrInvalid, e.Holder, HolderToken, HolderUser)
	case e.Bypass != nil && e.Kind != KindRegister:
		return fmt.Errorf("%w: a %s record carries a bypass code", ErrInvalid, e.Kind)
	case e.Bypass != nil && (!ValidID(e.Bypass.Code) || e.Bypass.Count <= 0 || e.Bypass.ExpiresAt <= 0):
		return fmt.Errorf("%w: bypass needs a code (%s), a positive count and expiresAt", ErrInvalid, IDRule)
	}
	return nil
}

func (e *RegistrationEvent) validateDraw() error {
	d := e.Draw
	switch {
	case d == nil:
		return fmt.Errorf("%w: a draw record without its draw", ErrInvalid)
	case e.TokenID != "" || e.UserID != "" || e.Bypass != nil || e.Window != 0 || e.Holder != "":
		return fmt.Errorf("%w: a draw record names no token, user, holder, bypass or window", ErrInvalid)
	case d.Window <= 0:
		return fmt.Errorf("%w: draw window %d is not a positive unix-ms time", ErrInvalid, d.Window)
	case d.Round < 1 || d.Round > MaxDrawRounds:
		return fmt.Errorf("%w: draw round %d is not in 1..%d", ErrInvalid, d.Round, MaxDrawRounds)
	case !isHex32(d.Seed) || !isHex32(d.Commit):
		return fmt.Errorf("%w: draw seed and commit must be 64 hex characters", ErrInvalid)
	}
	return nil
}

// isHex32 reports 64 lower-case hex characters (32 bytes).
func isHex32(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// DecodeRegistration decodes and validates a registrations record value.
func DecodeRegistration(b []byte) (RegistrationEvent, error) {
	var e RegistrationEvent
	if decodeRegistrationFast(b, &e) && e.V == Version {
		return e, e.Validate()
	}
	e = RegistrationEvent{}
	if err := decodeStrict(b, &e, &e.V); err != nil {
		return RegistrationEvent{}, err
	}
	return e, e.Validate()
}

// AdmissionPolicy says how fast and how many people an item lets through.
type AdmissionPolicy struct {
	// RatePerSecond is how many people are admitted per second; 0 admits nobody.
	RatePerSecond float64 `json:"ratePerSecond"`
	// MaxActive caps how many admitted people may be active at once; 0 means no cap.
	MaxActive int64 `json:"maxActive"`
	// SessionTTLSeconds is how long an admission lasts.
	SessionTTLSeconds int64 `json:"sessionTTLSeconds"`
	// Paused stops admission and keeps RatePerSecond for when it resumes.
	// Omitted when false, so unpaused states read the same as before.
	Paused bool `json:"paused,omitempty"`
	// MinRate and MaxRate bound the ramp rate (people per second) the
	// steering controller may set; Steer needs MaxRate > 0. The controller
	// never admits faster than MaxRate, nor than RatePerSecond.
	MinRate float64 `json:"minRate,omitempty"`
	MaxRate float64 `json:"maxRate,omitempty"`
	// Steer, when set, lets the scheduler pace the item by the protected
	// site's health signal (pkg/domain/steer): its effective target is published
	// as KindSteer admission records, and promote admits within the smaller
	// of it and this policy.
	Steer *SteerPolicy `json:"steer,omitempty"`
}

// SteerPolicy is the operator's intent for an item's steering controller.
type SteerPolicy struct {
	// TargetP95Ms is the site's p95 latency to stay under.
	TargetP95Ms int64 `json:"targetP95Ms"`
	// MaxErrorRatio: a share of failed requests above it shrinks the
	// target (0: 0.05).
	MaxErrorRatio float64 `json:"maxErrorRatio,omitempty"`
	// OnSignalLost is SteerHold (the default: keep the last effective
	// target) or SteerStatic (this policy alone until the signal returns).
	OnSignalLost string `json:"onSignalLost,omitempty"`
	// Mode is SteerOn (the default), SteerAdvise (decide and publish,
	// apply nothing) or SteerLock (hold the target where it is).
	Mode string `json:"mode,omitempty"`
}

// Values of SteerPolicy's fields.
const (
	SteerHold   = "hold"
	SteerStatic = "static"
	SteerOn     = "steer"
	SteerAdvise = "advise"
	SteerLock   = "lock"
)

// validate checks a steering policy against the rates that bound it.
func (p *SteerPolicy) validate(pol AdmissionPolicy) error {
	switch {
	case p.TargetP95Ms <= 0 || p.TargetP95Ms > 600_000:
		return fmt.Errorf("%w: steer.targetP95Ms %d is not in 1..600000", ErrInvalid, p.TargetP95Ms)
	case p.MaxErrorRatio < 0 || p.MaxErrorRatio > 1:
		return fmt.Errorf("%w: steer.maxErrorRatio %v is not in 0..1", ErrInvalid, p.MaxErrorRatio)
	case p.OnSignalLost != "" && p.OnSignalLost != SteerHold && p.OnSignalLost != SteerStatic:
		return fmt.Errorf("%w: steer.onSignalLost %q is not hold or static", ErrInvalid, p.OnSignalLost)
	case p.Mode != "" && p.Mode != SteerOn && p.Mode != SteerAdvise && p.Mode != SteerLock:
		return fmt.Errorf("%w: steer.mode %q is not steer, advise or lock", ErrInvalid, p.Mode)
	case pol.MaxRate <= 0:
		return fmt.Errorf("%w: steer needs maxRate above 0", ErrInvalid)
	}
	return nil
}

// Admitting reports whether the policy lets anyone in: not paused, a rate above 0.
func (p AdmissionPolicy) Admitting() bool { return !p.Paused && p.RatePerSecond > 0 }

// Unlimited is the Stock of an item without a stock limit.
const Unlimited = -1

// ItemState is a record of waitroom.items (compacted): the whole state of an
// item as the product service (or an operator override) publishes it. Key:
// itemId; a nil value (tombstone) deletes the item. A consumer applies a state
// only when its Version is higher than the one it holds.
type ItemState struct {
	V       int             `json:"v"`
	ItemID  string          `json:"itemId"`
	Name    string          `json:"name"`
	Stock   int64           `json:"stock"` // Unlimited (-1) or how many are left
	Enabled bool            `json:"enabled"`
	Policy  AdmissionPolicy `json:"policy"`
	// Mode is how the item's line works (ModeFIFO when empty); changing it
	// is an item update like any other.
	Mode string `json:"mode,omitempty"`
	// RejectMessage is what a registration refused in ModeReject is told
	// (and the waiting page shows); empty: a default sentence.
	RejectMessage string `json:"rejectMessage,omitempty"`
	// Notice is the operator's message to everyone waiting for the item
	// ("the show starts 20 minutes late"): every open page shows it within
	// seconds (the notifier's notice event), every poller with its next
	// status; empty: none.
	Notice string `json:"notice,omitempty"`
	// Template is the item's own waiting page (HTML with placeholders,
	// checked by pkg/domain/pagetemplate when set); empty: the install's page.
	Template string `json:"template,omitempty"`
	// Templates are the item's own waiting pages by language (ko, ja…: a
	// language the room speaks), each checked like Template: a reader in
	// that language sees it, any other reader Template.
	Templates map[string]string `json:"templates,omitempty"`
	// OpensAt (unix ms, 0: open now) schedules the sale: registrations
	// before it are pre-queued and placed by a draw at OpensAt.
	OpensAt int64 `json:"opensAt,omitempty"`
	// DrawWindowSeconds is how long each lottery window of ModeRandom lasts
	// (0: DefaultDrawWindowSeconds).
	DrawWindowSeconds int64 `json:"drawWindowSeconds,omitempty"`
	// DrawCommit is the hex sha256 commitment to the item's draw seeds: the
	// head of a hash chain of DrawRounds seeds, published before any window
	// opens (see Draw). Required with OpensAt or ModeRandom.
	DrawCommit string `json:"drawCommit,omitempty"`
	DrawRounds int64  `json:"drawRounds,omitempty"`
	// DrawSalt is the public salt of the commitment (new with each), so a
	// new chain never reuses an old root (pkg/domain/draw.Root).
	DrawSalt string `json:"drawSalt,omitempty"`
	// IdleTimeoutSeconds (0: off) releases a waiting place whose holder
	// neither polled nor held a stream for that long (status ABANDONED).
	IdleTimeoutSeconds int64 `json:"idleTimeoutSeconds,omitempty"`
	// PowDifficulty (0: off) is the leading zero bits of the proof-of-work a
	// registration must carry.
	PowDifficulty int   `json:"powDifficulty,omitempty"`
	Version       int64 `json:"version"`
	UpdatedAt     int64 `json:"updatedAt"` // unix milliseconds
}

// Queue modes of an item.
const (
	// ModeFIFO (the default): first registered, first admitted, at the
	// item's rate and within its maxActive.
	ModeFIFO = "fifo"
	// ModePassthrough admits everyone at the next tick, whatever the rate
	// and maxActive: the room is off, yet every registration still goes
	// through the line and is counted, so switching back to fifo (or
	// lowering the rate) turns the room on without a deploy.
	ModePassthrough = "passthrough"
	// ModeReject refuses new registrations with RejectMessage; the people
	// already in line keep their places.
	ModeReject = "reject"
	// ModeRandom is a lottery over windows of DrawWindowSeconds: each
	// window's registrations are placed by a committed-seed draw when it
	// closes, behind everyone placed before.
	ModeRandom = "random"
	// ModeAuto is fifo that stays invisible while the item has room: a
	// registration made through the kit (RegisterRequest's auto) is answered
	// with the admission itself when the line is empty and the scheduler
	// admits it within the api's short wait, so the visitor goes straight on
	// to the site; once a line forms, everyone new goes behind it and waits
	// on the page, in order, until the line drains.
	ModeAuto = "auto"
)

// Bounds of the fairness fields.
const (
	MaxDrawRounds            = 1_000_000
	DefaultDrawWindowSeconds = 60
	MaxPowDifficulty         = 28
	MaxIdleTimeoutSeconds    = 86_400
)

// MaxRejectMessage bounds ItemState.RejectMessage, and MaxNotice ItemState.Notice.
const (
	MaxRejectMessage = 300
	MaxNotice        = 300
	// MaxTemplate bounds ItemState.Template (pagetemplate.MaxSize).
	MaxTemplate = 16 << 10
	// MaxTemplateLanguages bounds how many languages ItemState.Templates has.
	MaxTemplateLanguages = 8
)

// templatesProblem says what is wrong with an item's templates by language
// ("": nothing): too many, a key that is no language's base tag, an empty or
// oversized page.
func templatesProblem(ts map[string]string) string {
	if len(ts) > MaxTemplateLanguages {
		return fmt.Sprintf("templates for %d languages; at most %d", len(ts), MaxTemplateLanguages)
	}
	for lang, src := range ts {
		if len(lang) < 2 || len(lang) > 3 || strings.Trim(lang, "abcdefghijklmnopqrstuvwxyz") != "" {
			return fmt.Sprintf("templates: %q is not a language (ko, ja…)", lang)
		}
		if src == "" || len(src) > MaxTemplate {
			return fmt.Sprintf("templates: %s is empty or longer than %d bytes", lang, MaxTemplate)
		}
	}
	return ""
}

// ModeOf is the item's mode, ModeFIFO when unset.
func (s *ItemState) ModeOf() string {
	if s.Mode == "" {
		return ModeFIFO
	}
	return s.Mode
}

// ValidMode reports a known queue mode ("" is fifo).
func ValidMode(m string) bool {
	switch m {
	case "", ModeFIFO, ModePassthrough, ModeReject, ModeRandom, ModeAuto:
		return true
	}
	return false
}

// SoldOut reports whether nothing is left to sell.
func (s *ItemState) SoldOut() bool { return s.Stock == 0 }

// Validate checks the fields against the contract.
func (s *ItemState) Validate() error {
	switch {
	case ItemIDProblem(s.ItemID) != "":
		return fmt.Errorf("%w: %s", ErrInvalid, ItemIDProblem(s.ItemID))
	case len(s.Name) > 200:
		return fmt.Errorf("%w: name longer than 200 bytes", ErrInvalid)
	case s.Stock < Unlimited:
		return fmt.Errorf("%w: stock %d is below -1 (unlimited)", ErrInvalid, s.Stock)
	case s.Version <= 0:
		return fmt.Errorf("%w: version %d is not positive", ErrInvalid, s.Version)
	case !ValidMode(s.Mode):
		return fmt.Errorf("%w: mode %q is not fifo, passthrough, reject, random or auto", ErrInvalid, s.Mode)
	case len(s.RejectMessage) > MaxRejectMessage:
		return fmt.Errorf("%w: rejectMessage longer than %d bytes", ErrInvalid, MaxRejectMessage)
	case len(s.Notice) > MaxNotice:
		return fmt.Errorf("%w: notice longer than %d bytes", ErrInvalid, MaxNotice)
	case len(s.Template) > MaxTemplate:
		return fmt.Errorf("%w: template longer than %d bytes", ErrInvalid, MaxTemplate)
	case templatesProblem(s.Templates) != "":
		return fmt.Errorf("%w: %s", ErrInvalid, templatesProblem(s.Templates))
	case s.OpensAt < 0:
		return fmt.Errorf("%w: opensAt %d is negative", ErrInvalid, s.OpensAt)
	case s.DrawWindowSeconds < 0 || s.DrawWindowSeconds > 86400:
		return fmt.Errorf("%w: drawWindowSeconds %d is not in 0..86400", ErrInvalid, s.DrawWindowSeconds)
	case (s.OpensAt > 0 || s.Mode == ModeRandom) && (!isHex32(s.DrawCommit) || s.DrawRounds < 1 || s.DrawRounds > MaxDrawRounds):
		return fmt.Errorf("%w: opensAt or random mode needs drawCommit (64 hex) and drawRounds in 1..%d", ErrInvalid, MaxDrawRounds)
	case len(s.DrawSalt) > 64:
		return fmt.Errorf("%w: drawSalt longer than 64 bytes", ErrInvalid)
	case s.DrawCommit != "" && !isHex32(s.DrawCommit):
		return fmt.Errorf("%w: drawCommit is not 64 hex characters", ErrInvalid)
	case s.IdleTimeoutSeconds < 0 || s.IdleTimeoutSeconds > MaxIdleTimeoutSeconds:
		return fmt.Errorf("%w: idleTimeoutSeconds %d is not in 0..%d", ErrInvalid, s.IdleTimeoutSeconds, MaxIdleTimeoutSeconds)
	case s.PowDifficulty < 0 || s.PowDifficulty > MaxPowDifficulty:
		return fmt.Errorf("%w: powDifficulty %d is not in 0..%d", ErrInvalid, s.PowDifficulty, MaxPowDifficulty)
	case s.Policy.RatePerSecond < 0 || s.Policy.RatePerSecond > 1e6:
		return fmt.Errorf("%w: ratePerSecond %v is not in 0..1000000", ErrInvalid, s.Policy.RatePerSecond)
	case s.Policy.MaxActive < 0:
		return fmt.Errorf("%w: maxActive %d is negative", ErrInvalid, s.Policy.MaxActive)
	case s.Policy.SessionTTLSeconds < 0 || s.Policy.SessionTTLSeconds > 86400:
		return fmt.Errorf("%w: sessionTTLSeconds %d is not in 0..86400", ErrInvalid, s.Policy.SessionTTLSeconds)
	case s.Policy.MinRate < 0 || s.Policy.MaxRate < 0 || s.Policy.MaxRate > 1e6 || s.Policy.MinRate > s.Policy.MaxRate && s.Policy.MaxRate > 0:
		return fmt.Errorf("%w: minRate %v and maxRate %v must satisfy 0 <= minRate <= maxRate <= 1000000", ErrInvalid, s.Policy.MinRate, s.Policy.MaxRate)
	case s.Policy.Steer != nil:
		return s.Policy.Steer.validate(s.Policy)
	}
	return nil
}

// DecodeItem decodes and validates an items record value.
func DecodeItem(b []byte) (ItemState, error) {
	var s ItemState
	if err := decodeStrict(b, &s, &s.V); err != nil {
		return ItemState{}, err
	}
	return s, s.Validate()
}

// AdmissionEvent is a record of waitroom.admissions: what one scheduler tick did
// to one item. Key: itemId.
//
// An event of Kind KindEpochClaim admits nobody: a new scheduler leader
// publishes it (ItemID EpochClaimItem) before its first promote, so the
// highest epoch ever used can be read back from the topic after Redis lost
// its counter.
type AdmissionEvent struct {
	V        int      `json:"v"`
	Kind     string   `json:"kind,omitempty"` // "" (a tick), KindEpochClaim or KindSteer
	ItemID   string   `json:"itemId"`
	Admitted []string `json:"admitted"` // tokenIds, in admission order
	// ExpiresAt is the admission expiry (unix ms) of each of Admitted, same
	// order; a rebuild of the view restores them exactly. Empty in events
	// written before it existed.
	ExpiresAt []int64 `json:"expiresAt,omitempty"`
	Head      int64   `json:"head"` // highest sequence admitted so far
	Waiting   int64   `json:"waiting"`
	Active    int64   `json:"active"`
	Epoch     int64   `json:"epoch"` // the leader's fencing epoch
	At        int64   `json:"at"`    // unix milliseconds
	// Applied is the item's applied offsets of waitroom.registrations
	// (partition -> offset of the last record applied) when the scheduler
	// decided these admissions: a rebuild applies the event right after
	// those records, where it happened. Absent in events written before it
	// existed (a rebuild then places them by time: the first registration
	// of the item stamped after At comes after them).
	Applied map[int32]int64 `json:"applied,omitempty"`
	// Steer is the decision a KindSteer event records.
	Steer *SteerDecision `json:"steer,omitempty"`
}

// KindSteer marks an admission event that admits nobody and records the
// steering controller's decision for the item: its effective target, which
// promote admits within (the smaller of it and the item's policy), and the
// signal it followed. A rebuild of the view restores the last one.
const KindSteer = "steer"

// SteerDecision is one decision of an item's steering controller.
type SteerDecision struct {
	Target int64   `json:"target"` // the concurrency target: sessions the site should hold
	Rate   float64 `json:"rate"`   // the ramp rate, people per second, within minRate..maxRate
	// Allow is how many more people promote may admit from the line (the
	// target's headroom, no-shows counted); HeadLimit is the item's head
	// when it was decided plus Allow: promote admits nobody past it.
	Allow     int64 `json:"allow"`
	HeadLimit int64 `json:"headLimit"`
	// Static: the signal is lost and the item runs on its policy alone;
	// Advice: advise-only, nothing applied. Either way promote ignores it.
	Static bool   `json:"static,omitempty"`
	Advice bool   `json:"advice,omitempty"`
	Reason string `json:"reason"`
	// The signal it followed.
	P95Ms       float64 `json:"p95Ms"`
	ErrorRatio  float64 `json:"errorRatio"`
	SiteActive  int64   `json:"siteActive"`
	ShowRatio   float64 `json:"showRatio"`
	DelayMs     int64   `json:"delayMs"`
	SignalAgeMs int64   `json:"signalAgeMs"`
}

// Applies reports whether promote admits within the decision.
func (d *SteerDecision) Applies() bool { return !d.Static && !d.Advice }

// Validate checks the fields against the contract.
func (a *AdmissionEvent) Validate() error {
	if !ValidID(a.ItemID) {
		return fmt.Errorf("%w: itemId %q is not %s", ErrInvalid, a.ItemID, IDRule)
	}
	if a.Head < 0 || a.Waiting < 0 || a.Active < 0 {
		return fmt.Errorf("%w: negative head or count", ErrInvalid)
	}
	if len(a.ExpiresAt) != 0 && len(a.ExpiresAt) != len(a.Admitted) {
		return fmt.Errorf("%w: %d expiries for %d admitted", ErrInvalid, len(a.ExpiresAt), len(a.Admitted))
	}
	if a.Kind != "" && a.Kind != KindEpochClaim && a.Kind != KindSteer {
		return fmt.Errorf("%w: admission kind %q is not empty, %q or %q", ErrInvalid, a.Kind, KindEpochClaim, KindSteer)
	}
	if (a.Kind == KindSteer) != (a.Steer != nil) {
		return fmt.Errorf("%w: a steer decision belongs to a %q event alone", ErrInvalid, KindSteer)
	}
	if d := a.Steer; d != nil && (len(a.Admitted) > 0 || d.Target < 0 || d.Allow < 0 || d.HeadLimit < 0 || d.Rate < 0 || len(d.Reason) > 200) {
		return fmt.Errorf("%w: a steer event admits nobody; its target, allow, headLimit and rate are not negative", ErrInvalid)
	}
	for p, off := range a.Applied {
		if p < 0 || off < 0 {
			return fmt.Errorf("%w: applied offset %d of partition %d", ErrInvalid, off, p)
		}
	}
	return nil
}

// DecodeAdmission decodes and validates an admissions record value.
func DecodeAdmission(b []byte) (AdmissionEvent, error) {
	var a AdmissionEvent
	if err := decodeStrict(b, &a, &a.V); err != nil {
		return AdmissionEvent{}, err
	}
	return a, a.Validate()
}

// KindEpochClaim marks an admission event that only claims a leader epoch.
const KindEpochClaim = "epoch"

// EpochClaimItem is the ItemID (and key) of epoch-claim events; followers
// skip events of KindEpochClaim whatever item they name.
const EpochClaimItem = "_scheduler"

// Encode marshals a message; the message types above never fail to marshal.
func Encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("topics: encoding %T: %v", v, err)) // unreachable: plain structs
	}
	return b
}

// decodeStrict decodes into (whose version field is v) with unknown fields
// refused. The common case is one pass; only a failure probes the version, so
// a future version is reported as such rather than as an unknown field.
func decodeStrict(b []byte, into any, v *int) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err := dec.Decode(into)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the message")
	}
	if err == nil && *v == Version {
		return nil
	}
	var probe struct {
		V *int `json:"v"`
	}
	if json.Unmarshal(b, &probe) == nil {
		switch {
		case probe.V == nil:
			return fmt.Errorf("%w: no version field \"v\"", ErrMalformed)
		case *probe.V != Version:
			return fmt.Errorf("%w: unsupported version %d", ErrMalformed, *probe.V)
		}
	}
	return fmt.Errorf("%w: %v", ErrMalformed, err)
}
