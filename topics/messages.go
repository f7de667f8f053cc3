package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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
}

// ClientMeta is what the API saw of the client, kept for audit and abuse review.
type ClientMeta struct {
	IP        string `json:"ip,omitempty"`
	UserAgent string `json:"userAgent,omitempty"`
}

// Validate checks the fields against the contract.
func (e *RegistrationEvent) Validate() error {
	switch {
	case e.Kind != KindRegister && e.Kind != KindLeave && e.Kind != KindComplete:
		return fmt.Errorf("%w: kind %q is not register, leave or complete", ErrInvalid, e.Kind)
	case !ValidID(e.ItemID):
		return fmt.Errorf("%w: itemId %q is not %s", ErrInvalid, e.ItemID, IDRule)
	case !ValidID(e.UserID):
		return fmt.Errorf("%w: userId %q is not %s", ErrInvalid, e.UserID, IDRule)
	case !ValidID(e.TokenID):
		return fmt.Errorf("%w: tokenId %q is not %s", ErrInvalid, e.TokenID, IDRule)
	case e.RequestedAt <= 0:
		return fmt.Errorf("%w: requestedAt %d is not a positive unix-ms time", ErrInvalid, e.RequestedAt)
	}
	return nil
}

// DecodeRegistration decodes and validates a registrations record value.
func DecodeRegistration(b []byte) (RegistrationEvent, error) {
	var e RegistrationEvent
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
	Version       int64  `json:"version"`
	UpdatedAt     int64  `json:"updatedAt"` // unix milliseconds
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
)

// MaxRejectMessage bounds ItemState.RejectMessage.
const MaxRejectMessage = 300

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
	case "", ModeFIFO, ModePassthrough, ModeReject:
		return true
	}
	return false
}

// SoldOut reports whether nothing is left to sell.
func (s *ItemState) SoldOut() bool { return s.Stock == 0 }

// Validate checks the fields against the contract.
func (s *ItemState) Validate() error {
	switch {
	case !ValidID(s.ItemID):
		return fmt.Errorf("%w: itemId %q is not %s", ErrInvalid, s.ItemID, IDRule)
	case len(s.Name) > 200:
		return fmt.Errorf("%w: name longer than 200 bytes", ErrInvalid)
	case s.Stock < Unlimited:
		return fmt.Errorf("%w: stock %d is below -1 (unlimited)", ErrInvalid, s.Stock)
	case s.Version <= 0:
		return fmt.Errorf("%w: version %d is not positive", ErrInvalid, s.Version)
	case !ValidMode(s.Mode):
		return fmt.Errorf("%w: mode %q is not fifo, passthrough or reject", ErrInvalid, s.Mode)
	case len(s.RejectMessage) > MaxRejectMessage:
		return fmt.Errorf("%w: rejectMessage longer than %d bytes", ErrInvalid, MaxRejectMessage)
	case s.Policy.RatePerSecond < 0 || s.Policy.RatePerSecond > 1e6:
		return fmt.Errorf("%w: ratePerSecond %v is not in 0..1000000", ErrInvalid, s.Policy.RatePerSecond)
	case s.Policy.MaxActive < 0:
		return fmt.Errorf("%w: maxActive %d is negative", ErrInvalid, s.Policy.MaxActive)
	case s.Policy.SessionTTLSeconds < 0 || s.Policy.SessionTTLSeconds > 86400:
		return fmt.Errorf("%w: sessionTTLSeconds %d is not in 0..86400", ErrInvalid, s.Policy.SessionTTLSeconds)
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
	Kind     string   `json:"kind,omitempty"` // "" (a tick) or KindEpochClaim
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
}

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
	if a.Kind != "" && a.Kind != KindEpochClaim {
		return fmt.Errorf("%w: admission kind %q is not empty or %q", ErrInvalid, a.Kind, KindEpochClaim)
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
