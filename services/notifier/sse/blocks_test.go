package sse_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/kafka/blocklist"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
)

// A blocked user's stream is refused 403 BLOCKED with the reason (the page
// then reads its status: BLOCKED); another user's opens. The notifier reads
// the blocks topic before it is ready.
func TestStreamRefusedForABlockedUser(t *testing.T) {
	w := newWorld(t)
	w.setItem("b", -1, true, topics.AdmissionPolicy{RatePerSecond: 0, MaxActive: 1, SessionTTLSeconds: 60})
	regs := w.register("b", 2)
	rec, err := blocklist.Record(topics.BlockState{Subject: "user:" + regs[1].UserID, Reason: "ticket bot", At: time.Now().UnixMilli()})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, w.prod.ProduceSync(ctx, rec).FirstErr())

	nt := w.notifier(time.Second, 0)
	get := func(tok string) (int, []byte) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, nt.eventsURL("b", tok), nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return resp.StatusCode, nil // a stream: not read to its end
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	code, body := get(regs[1].Token)
	require.Equal(t, http.StatusForbidden, code, "%s", body)
	var eb httpserver.ErrorBody
	require.NoError(t, json.Unmarshal(body, &eb))
	assert.Equal(t, "BLOCKED", eb.Error.Code)
	assert.Contains(t, eb.Error.Message, "ticket bot")
	code, _ = get(regs[0].Token)
	assert.Equal(t, http.StatusOK, code, "another user's stream opens")
}
