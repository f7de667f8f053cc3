package admin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"

	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/topics"
)

// WithDrawKey lets the server commit items to draw seeds (WR_DRAW_KEY): a
// patch that schedules a sale (opensAt) or sets random mode gets a new
// commitment when the item has none or has used its chain up.
func (s *Server) WithDrawKey(key []byte) *Server {
	s.drawKey = key
	return s
}

// commit adds a draw commitment to it when it needs one: a new hash chain
// (a fresh public salt, draw.DefaultRounds rounds unless it has a count),
// whose head is published with the item before any window opens. Without a
// key the change is refused (409): nobody could reveal the seeds.
func (s *Server) commit(ctx context.Context, it topics.ItemState) (topics.ItemState, int, *RequestError) {
	if it.OpensAt <= 0 && it.Mode != topics.ModeRandom {
		return it, 0, nil
	}
	if it.DrawCommit != "" && it.DrawRounds > 0 {
		_, round, commit, err := s.line.LastDraw(ctx, it.ItemID)
		if err != nil {
			return it, http.StatusServiceUnavailable, &RequestError{Code: "UNAVAILABLE", Message: "could not read the item's last draw; retry shortly"}
		}
		if commit != it.DrawCommit || round < it.DrawRounds {
			return it, 0, nil // the chain has rounds left
		}
	}
	if len(s.drawKey) == 0 {
		return it, http.StatusConflict, &RequestError{Code: "DRAWS_DISABLED",
			Message: "opensAt and random mode need a draw commitment, and this scheduler has no WR_DRAW_KEY to make one"}
	}
	var salt [16]byte
	_, _ = rand.Read(salt[:])
	it.DrawSalt = hex.EncodeToString(salt[:])
	it.DrawRounds = draw.DefaultRounds
	it.DrawCommit = draw.Commit(draw.Root(s.drawKey, it.ItemID, it.DrawSalt), it.DrawRounds)
	return it, 0, nil
}
