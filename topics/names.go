package topics

import "strconv"

// Topic names. Every topic is keyed by itemId so one item's events keep their order.
const (
	// Registrations carries register and leave events; the order of one item's
	// records is the order of its line.
	Registrations = "waitroom.registrations"
	// Items carries item state (stock, enabled, admission policy); compacted.
	Items = "waitroom.items"
	// Admissions carries the scheduler's admission decisions, one record per item per tick.
	Admissions = "waitroom.admissions"
	// Blocks carries the operator's blocks (BlockState, key: the subject);
	// compacted, a tombstone lifts a block.
	Blocks = "waitroom.blocks"
)

// DLQ returns the dead-letter topic of a source topic.
func DLQ(source string) string { return source + ".dlq" }

// DLQ headers: why a record was dead-lettered and where it came from.
const (
	HeaderErrorType       = "error-type"
	HeaderError           = "error"
	HeaderSourceTopic     = "source-topic"
	HeaderSourcePartition = "source-partition"
	HeaderSourceOffset    = "source-offset"
	HeaderFailedAt        = "failed-at"
	HeaderAttempts        = "attempts"
	HeaderReplayedFrom    = "replayed-from"
)

// Values of the error-type header.
const (
	ErrorTypeParsing    = "PARSING_ERROR"
	ErrorTypeValidation = "VALIDATION_ERROR"
	ErrorTypeProcessing = "PROCESSING_ERROR"
)

// MaxIDLen is the longest itemId or userId accepted.
const MaxIDLen = 64

// ValidID reports whether s is a usable itemId or userId: 1..MaxIDLen characters
// of [A-Za-z0-9._:-]. The grammar keeps ids safe inside Redis hash tags and URLs.
func ValidID(s string) bool {
	if len(s) == 0 || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == ':' || c == '-') {
			return false
		}
	}
	return true
}

// IDRule describes ValidID for error messages.
var IDRule = "1-" + strconv.Itoa(MaxIDLen) + " characters of [A-Za-z0-9._:-]"

// ItemIDProblem says why s cannot name an item, or "" when it can. An itemId
// must be ValidID and must not be "view": an item's Redis keys are
// wr:{itemId}:… (queue.KeysFor), and wr:{view}:… are the view marker's own
// (view.AppliedKey is wr:{view}:applied, which the item's replay guard would
// share and deleting the item would remove). Every door an itemId comes in by
// asks this: the api, the admin API and the consumer of the items topic.
func ItemIDProblem(s string) string {
	switch {
	case !ValidID(s):
		return "itemId must be " + IDRule
	case s == ReservedItemID:
		return `itemId "` + s + `" is reserved: its Redis keys wr:{` + s + `}:… are the view marker's`
	}
	return ""
}

// ReservedItemID is the one ValidID that names no item (see ItemIDProblem).
const ReservedItemID = "view"
