package draw_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/draw"
)

func TestChainVerifiesEveryRoundAndNoOther(t *testing.T) {
	root := draw.Root([]byte("key"), "item-1", "salt")
	const n = 5
	commit := draw.Commit(root, n)
	for i := int64(1); i <= n; i++ {
		s, err := draw.Seed(root, n, i)
		require.NoError(t, err)
		require.NoError(t, draw.Verify(s, i, commit), "round %d", i)
		require.ErrorIs(t, draw.Verify(s, i+1, commit), draw.ErrMismatch)
	}
	// Round 1's seed is sha256^(n-1)(root): one hash from the commit, by hand.
	s1, _ := draw.Seed(root, n, 1)
	b, _ := hex.DecodeString(s1)
	sum := sha256.Sum256(b)
	require.Equal(t, commit, hex.EncodeToString(sum[:]))
	_, err := draw.Seed(root, n, n+1)
	require.Error(t, err)
	require.NotEqual(t, commit, draw.Commit(draw.Root([]byte("key"), "item-1", "salt2"), n), "a new salt is a new chain")
	require.Error(t, draw.Verify("zz", 1, commit))
}

func TestOrderIsTheSortedKeysWhateverTheInputOrder(t *testing.T) {
	seed := draw.Commit([]byte("x"), 1)
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	got := slices.Clone(ids)
	require.NoError(t, draw.Order(seed, got))
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	require.NoError(t, draw.Order(seed, rev))
	require.Equal(t, got, rev)
	sb, _ := hex.DecodeString(seed)
	for i := 1; i < len(got); i++ {
		a, b := draw.Key(sb, got[i-1]), draw.Key(sb, got[i])
		require.Negative(t, slices.Compare(a[:], b[:]))
	}
	other := slices.Clone(ids)
	require.NoError(t, draw.Order(draw.Commit([]byte("y"), 1), other))
	require.NotEqual(t, got, other)
	require.True(t, errors.Is(draw.Verify(seed, 1, seed), draw.ErrMismatch))
}
