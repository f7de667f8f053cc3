package topics

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Snapshots carries periodic snapshots of each item's line (SnapshotHead,
// key: itemId; SnapshotChunk, key: SnapshotChunkKey); compacted. A rebuild
// loads an item's latest complete snapshot and replays only the records after
// it.
const Snapshots = "waitroom.snapshots"

// SnapshotHead closes one snapshot of an item's line: written after every
// chunk of its generation, so a head names a complete snapshot unless chunks
// were lost. It holds the line's counters and small sets; the places are in
// the chunks.
type SnapshotHead struct {
	V      int    `json:"v"`
	ItemID string `json:"itemId"`
	// Gen names the snapshot; its chunks carry it.
	Gen     string `json:"gen"`
	Chunks  int    `json:"chunks"`
	Entries int    `json:"entries"` // places over all chunks
	TakenAt int64  `json:"takenAt"` // unix ms
	// Applied is the item's own applied offsets (partition -> highest
	// applied offset of waitroom.registrations) in the snapshot: an admission
	// decided at exactly these offsets may or may not be in it, one decided
	// before them is.
	Applied map[int32]int64 `json:"applied"`
	// Through: every record of the item on waitroom.registrations at or
	// before these offsets (partition -> offset) is in the snapshot; the
	// rebuild replays the item's records after them.
	Through map[int32]int64 `json:"through"`
	Seq     int64           `json:"seq"`
	Head    int64           `json:"head"`
	// The line's small keys as stored: the last draw, bypass code uses,
	// counters (abandoned), the express places (tokenId -> seq) and the pace
	// window's ticks ("ms:n").
	Drawn   map[string]string `json:"drawn,omitempty"`
	Bypass  map[string]string `json:"bypass,omitempty"`
	Stats   map[string]string `json:"stats,omitempty"`
	Express map[string]int64  `json:"express,omitempty"`
	Paced   []string          `json:"paced,omitempty"`
}

// SnapshotChunk is one part of a snapshot's places (at most about 900 KB).
type SnapshotChunk struct {
	V       int             `json:"v"`
	ItemID  string          `json:"itemId"`
	Gen     string          `json:"gen"`
	Index   int             `json:"index"`
	Entries []SnapshotEntry `json:"entries"`
}

// SnapshotEntry is one place as linesnap shows it: state (line.State:
// WAITING, ADMITTED, POOLED, LATE, GONE, LEFT, ABANDONED, COMPLETED), token,
// place key (user; "" for a token no user points at) and the state's number:
// the seq of a WAITING place, the admission expiry (unix ms) of an ADMITTED
// one, the draw window of a POOLED one, the offset a LATE one is queued by.
type SnapshotEntry struct {
	State string `json:"s"`
	Token string `json:"t"`
	User  string `json:"u,omitempty"`
	Num   int64  `json:"n,omitempty"`
}

// SnapshotChunkKey is the key of chunk i of generation gen of item's
// snapshot: each generation's chunks have keys of their own, so writing one
// never overwrites the chunks of the snapshot the latest head names.
func SnapshotChunkKey(item, gen string, i int) string {
	return item + "#" + gen + "#" + strconv.Itoa(i)
}

// ParseSnapshotKey tells a head's key (chunk false: the itemId) from a
// chunk's (item, gen and index).
func ParseSnapshotKey(key string) (item, gen string, i int, chunk bool) {
	parts := strings.Split(key, "#")
	if len(parts) != 3 {
		return key, "", 0, false
	}
	n, err := strconv.Atoi(parts[2])
	if err != nil {
		return key, "", 0, false
	}
	return parts[0], parts[1], n, true
}

// DecodeSnapshotHead decodes and checks a head.
func DecodeSnapshotHead(b []byte) (SnapshotHead, error) {
	var h SnapshotHead
	if err := json.Unmarshal(b, &h); err != nil {
		return h, fmt.Errorf("%w: snapshot head: %v", ErrInvalid, err)
	}
	if !ValidID(h.ItemID) || h.Gen == "" || h.Chunks < 0 || h.Entries < 0 {
		return h, fmt.Errorf("%w: snapshot head of %q: bad item, gen or counts", ErrInvalid, h.ItemID)
	}
	return h, nil
}

// DecodeSnapshotChunk decodes and checks a chunk.
func DecodeSnapshotChunk(b []byte) (SnapshotChunk, error) {
	var c SnapshotChunk
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: snapshot chunk: %v", ErrInvalid, err)
	}
	if !ValidID(c.ItemID) || c.Gen == "" || c.Index < 0 {
		return c, fmt.Errorf("%w: snapshot chunk of %q: bad item, gen or index", ErrInvalid, c.ItemID)
	}
	return c, nil
}
