package draw_test

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/draw"
)

func TestAuditFollowsTheRecords(t *testing.T) {
	root := draw.Root([]byte("k"), "i", "s")
	commit := draw.Commit(root, 3)
	s1, _ := draw.Seed(root, 3, 1)
	s2, _ := draw.Seed(root, 3, 2)
	a := draw.NewAudit(commit)
	a.Register("u1", "t1", 10)
	a.Register("u2", "t2", 10)
	a.Register("u2", "t2b", 10) // pooled already
	a.Register("u3", "t3", 10)
	a.Register("u4", "t4", 20)
	a.Register("u5", "t5", 0) // first come, first served
	a.Leave("u3")
	a.Draw(10, 1, s1, commit, 7)
	a.Draw(10, 1, s1, commit, 8) // a copy
	a.Draw(20, 1, s1, commit, 9) // a reused round
	a.Draw(20, 2, s2, commit, 10)
	require.Len(t, a.Draws, 3)
	want := []string{"t1", "t2"}
	require.NoError(t, draw.Order(s1, want))
	require.Equal(t, want, a.Draws[0].Order)
	require.NoError(t, a.Draws[0].Err)
	require.ErrorContains(t, a.Draws[1].Err, "drawn already")
	require.Equal(t, []string{"t4"}, a.Draws[2].Order)
	require.Empty(t, a.Pooled())
	a.Register("u6", "t6", 30)
	require.True(t, slices.Equal([]string{"t6"}, a.Pooled()))
}
