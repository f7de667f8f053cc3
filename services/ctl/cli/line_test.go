package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/queue"
)

func TestLineSnapshotAndDiffAsAUser(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	l := queue.New(rdb)
	require.NoError(t, l.Load(ctx))
	var ops []queue.Op
	for i := range 5 {
		ops = append(ops, queue.Op{Kind: queue.OpRegister, ItemID: "gig", TokenID: fmt.Sprint("t", i), UserID: fmt.Sprint("u", i), Offset: int64(i)})
	}
	_, err := l.Apply(ctx, ops)
	require.NoError(t, err)
	addr := rdb.Options().Addr
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "c.jsonl")

	r := runBin(t, []string{"WR_REDIS_ADDR=" + addr}, "line", "snapshot", "gig", "-f", a)
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, "5 tokens of gig (seq 5, head 0)")
	r = runBin(t, nil, "line", "snapshot", "gig", "--redis", addr, "--file", b)
	require.Equal(t, ExitOK, r.code, r)

	r = runBin(t, nil, "line", "diff", a, b)
	require.Equal(t, ExitOK, r.code, r)
	assert.Equal(t, "same: 5 tokens of gig\n", r.stdout)

	// u2 leaves: the diff names exactly what moved.
	_, err = l.Apply(ctx, []queue.Op{{Kind: queue.OpLeave, ItemID: "gig", TokenID: "t2", UserID: "u2", Offset: 5}})
	require.NoError(t, err)
	r = runBin(t, []string{"WR_REDIS_ADDR=" + addr}, "line", "snapshot", "gig")
	require.Equal(t, ExitOK, r.code, r)
	require.NoError(t, os.WriteFile(c, []byte(r.stdout), 0o600))
	r = runBin(t, nil, "line", "diff", a, c)
	require.Equal(t, ExitFailure, r.code, r)
	assert.Equal(t, []string{
		"applied[0]: 4 -> 5",
		"token t2: WAITING seq=3 position=3 user=u2 -> LEFT user=u2",
		"token t3: WAITING seq=4 position=4 user=u3 -> WAITING seq=4 position=3 user=u3",
		"token t4: WAITING seq=5 position=5 user=u4 -> WAITING seq=5 position=4 user=u4",
	}, strings.Split(strings.TrimSpace(r.stdout), "\n"))
	assert.Contains(t, r.stderr, "the snapshots differ: 4 differences")

	r = runBin(t, nil, "-o", "json", "line", "diff", a, c)
	require.Equal(t, ExitFailure, r.code, r)
	assert.Contains(t, r.stdout, `"same": false`)

	// Errors are exit 2: a missing file, a file that is no snapshot.
	r = runBin(t, nil, "line", "diff", a, filepath.Join(dir, "nope"))
	require.Equal(t, ExitUsage, r.code, r)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "junk"), []byte("hello\n"), 0o600))
	r = runBin(t, nil, "line", "diff", filepath.Join(dir, "junk"), a)
	require.Equal(t, ExitUsage, r.code, r)
	r = runBin(t, nil, "line", "diff", a)
	require.Equal(t, ExitUsage, r.code, r)
}
