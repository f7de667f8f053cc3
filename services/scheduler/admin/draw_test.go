package admin_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/draw"
	"github.com/waitroom/waitroom/services/scheduler/admin"
	"github.com/waitroom/waitroom/topics"
)

// Scheduling a sale commits the item to a new hash chain whose round-1 seed
// the scheduler's key reveals; a later change keeps the commitment; without
// a key the change is refused, naming why.
func TestScheduledSaleGetsADrawCommitment(t *testing.T) {
	key := []byte("admin-test-draw-key-0123456789")
	e := newEnv(t, fakes{drawKey: key})
	var v admin.ItemView
	code, ed := call(t, http.MethodPost, e.url+admin.Prefix+"/items/sale", "Bearer "+token, `{"opensAt":1900000000000}`, &v)
	require.Equal(t, http.StatusOK, code, "%+v", ed)
	require.Equal(t, int64(1900000000000), v.OpensAt)
	require.Equal(t, int64(draw.DefaultRounds), v.DrawRounds)
	require.NotEmpty(t, v.DrawSalt)
	seed, err := draw.Seed(draw.Root(key, "sale", v.DrawSalt), v.DrawRounds, 1)
	require.NoError(t, err)
	require.NoError(t, draw.Verify(seed, 1, v.DrawCommit))
	stored, ok, err := e.line.Item(e.ctx(), "sale")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, v.DrawCommit, stored.DrawCommit)

	var again admin.ItemView
	code, _ = call(t, http.MethodPost, e.url+admin.Prefix+"/items/sale", "Bearer "+token, `{"mode":"random","drawWindowSeconds":30}`, &again)
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, v.DrawCommit, again.DrawCommit, "a commitment with rounds left stays")
	require.Equal(t, topics.ModeRandom, again.Mode)

	// Another item, fresh: a new salt, so a new chain.
	var other admin.ItemView
	code, _ = call(t, http.MethodPost, e.url+admin.Prefix+"/items/other", "Bearer "+token, `{"mode":"random"}`, &other)
	require.Equal(t, http.StatusOK, code)
	require.NotEqual(t, v.DrawCommit, other.DrawCommit)

	nokey := newEnv(t, fakes{})
	code, ed = call(t, http.MethodPost, nokey.url+admin.Prefix+"/items/sale", "Bearer "+token, `{"opensAt":1900000000000}`, nil)
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, "DRAWS_DISABLED", ed.Code)
}
