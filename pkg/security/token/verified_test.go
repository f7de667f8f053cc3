package token

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rememberingSigner is an HS256 Signer that remembers verified tokens, on a
// clock the test moves.
func rememberingSigner(t *testing.T, n int) (*Signer, *time.Time) {
	now := time.Unix(1_800_000_000, 0)
	s := signers(t)[HS256].WithClock(func() time.Time { return now }).RememberVerified(n)
	return s, &now
}

func TestARememberedTokenAnswersWithoutItsSignatureCheck(t *testing.T) {
	s, _ := rememberingSigner(t, 64)
	q := Queue{TokenID: "tok1", ItemID: "item-1", UserID: "u:1", Holder: "token", Partition: 7, Offset: 12345}
	raw, err := s.IssueQueue(q, time.Hour)
	require.NoError(t, err)
	first, err := s.ParseQueue(raw)
	require.NoError(t, err)
	// With another key, only an answer from memory still verifies raw.
	other, err := NewHMAC([]byte("another-secret-another-secret-xx"), "k1")
	require.NoError(t, err)
	mac := s.mac
	s.mac = other.mac
	again, err := s.ParseQueue(raw)
	require.NoError(t, err, "the second parse answers from memory")
	assert.Equal(t, first, again)
	// A token never verified still goes through the (now failing) check.
	fresh, err := signers(t)[HS256].IssueQueue(Queue{TokenID: "tok2", ItemID: "item-1", UserID: "u:2"}, time.Hour)
	require.NoError(t, err)
	_, err = s.ParseQueue(fresh)
	assert.ErrorIs(t, err, ErrInvalid)
	s.mac = mac
}

func TestARememberedTokenStillExpires(t *testing.T) {
	s, now := rememberingSigner(t, 64)
	raw, err := s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Hour)
	require.NoError(t, err)
	_, err = s.ParseQueue(raw)
	require.NoError(t, err)
	*now = now.Add(time.Hour + leeway - time.Second)
	_, err = s.ParseQueue(raw)
	require.NoError(t, err, "within the leeway")
	*now = now.Add(time.Second)
	_, err = s.ParseQueue(raw)
	assert.ErrorIs(t, err, ErrExpired)
}

func TestARememberedTokenIsNotIssuedInTheFuture(t *testing.T) {
	s, now := rememberingSigner(t, 64)
	raw, err := s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Hour)
	require.NoError(t, err)
	_, err = s.ParseQueue(raw)
	require.NoError(t, err)
	*now = now.Add(-leeway - time.Second) // the clock stepped back past the leeway
	_, err = s.ParseQueue(raw)
	assert.ErrorIs(t, err, ErrInvalid)
}

func TestOnlyTheSameStringIsAnsweredFromMemory(t *testing.T) {
	s, _ := rememberingSigner(t, 64)
	raw, err := s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Hour)
	require.NoError(t, err)
	_, err = s.ParseQueue(raw)
	require.NoError(t, err)
	parts := strings.Split(raw, ".")
	other, err := s.IssueQueue(Queue{TokenID: "t2", ItemID: "j", UserID: "v"}, time.Hour)
	require.NoError(t, err)
	// Another token's claims under the remembered signature, and the
	// remembered claims with a byte more: both refused, as by the full check.
	for _, bad := range []string{
		parts[0] + "." + strings.Split(other, ".")[1] + "." + parts[2],
		parts[0] + "." + parts[1] + "x." + parts[2],
		" " + raw,
	} {
		_, err := s.ParseQueue(bad)
		assert.ErrorIs(t, err, ErrInvalid, bad)
	}
}

func TestRememberedTokensAreBounded(t *testing.T) {
	s, _ := rememberingSigner(t, 32)
	var raws []string
	for i := range 200 {
		raw, err := s.IssueQueue(Queue{TokenID: "t" + strings.Repeat("x", i%7) + string(rune('a'+i%26)), ItemID: "i", UserID: "u", Offset: int64(i)}, time.Hour)
		require.NoError(t, err)
		raws = append(raws, raw)
		q, err := s.ParseQueue(raw)
		require.NoError(t, err)
		assert.Equal(t, int64(i), q.Offset)
	}
	n := 0
	for i := range s.seen.shards {
		n += len(s.seen.shards[i].m)
	}
	assert.LessOrEqual(t, n, 32)
	for i, raw := range raws { // forgotten or not, each answers as before
		q, err := s.ParseQueue(raw)
		require.NoError(t, err)
		assert.Equal(t, int64(i), q.Offset)
	}
}

// A remembered token's Slot is handed out with it, the same one at every read
// of exactly that token within its expiry; a token with another's claims
// under its signature, an expired one, or one a Signer does not remember
// gets none.
func TestASlotIsHandedOutOnlyWithItsOwnToken(t *testing.T) {
	s, now := rememberingSigner(t, 64)
	raw, err := s.IssueQueue(Queue{TokenID: "t", ItemID: "i", UserID: "u"}, time.Hour)
	require.NoError(t, err)
	_, slot, err := s.ParseQueueSlot(raw)
	require.NoError(t, err)
	require.NotNil(t, slot, "a verified token's slot")
	slot.Store("record of t")
	_, again, err := s.ParseQueueSlot(raw)
	require.NoError(t, err)
	assert.Same(t, slot, again)
	assert.Equal(t, "record of t", again.Load())

	other, err := s.IssueQueue(Queue{TokenID: "t2", ItemID: "i", UserID: "v"}, time.Hour)
	require.NoError(t, err)
	parts := strings.Split(raw, ".")
	_, bad, err := s.ParseQueueSlot(parts[0] + "." + strings.Split(other, ".")[1] + "." + parts[2])
	assert.ErrorIs(t, err, ErrInvalid)
	assert.Nil(t, bad)
	_, fresh, err := s.ParseQueueSlot(other)
	require.NoError(t, err)
	require.NotNil(t, fresh)
	assert.Nil(t, fresh.Load(), "another token's slot is its own")

	plain := signers(t)[HS256].WithClock(func() time.Time { return *now })
	_, none, err := plain.ParseQueueSlot(raw)
	require.NoError(t, err)
	assert.Nil(t, none, "a Signer that remembers nothing hands out no slot")

	*now = now.Add(time.Hour + leeway)
	_, late, err := s.ParseQueueSlot(raw)
	assert.ErrorIs(t, err, ErrExpired)
	assert.Nil(t, late)
}

// BenchmarkParseQueueRemembered is a status poll's parse of a token the
// Signer verified before (BenchmarkParseQueue: the full parse).
func BenchmarkParseQueueRemembered(b *testing.B) {
	s := signers(b)[HS256].RememberVerified(64)
	raw, _ := s.IssueQueue(Queue{TokenID: "01JD4Q6Y8X2T0Z5K3M7N9P1R2S", ItemID: "concert-2026", UserID: "user-123456", Partition: 3, Offset: 1234567}, time.Hour)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.ParseQueue(raw); err != nil {
			b.Fatal(err)
		}
	}
}
