package stack_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The Node.js verifier docs/integrating.md gives to a non-Go site, run as
// printed against the real api's JWKS: an admitted token verifies; another
// item's, a queue token and a forged signature are refused.
func TestTheDocsNodeVerifierAgainstTheAPI(t *testing.T) {
	node, err := exec.LookPath("node")
	require.NoError(t, err, "node is installed by make test's deps (scripts/test-deps.list)")
	doc, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "integrating.md"))
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(doc), "## Verifying in another language")
	require.True(t, ok, "docs/integrating.md has its verifier section")
	_, rest, ok = strings.Cut(rest, "```js\n")
	require.True(t, ok)
	src, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	script := filepath.Join(t.TempDir(), "waitroom-verify.mjs")
	require.NoError(t, os.WriteFile(script, []byte(src), 0o644))

	e := newEnv(t, policy("tix", 50, 10, 60), policy("other", 50, 10, 60))
	e.start()
	admission := e.admit("tix", "nina")
	queueTok, _ := e.register("other", "omar")
	run := func(token, item string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, node, script, token, item)
		cmd.Env = append(os.Environ(), "WAITROOM_URL="+e.stack.APIURL)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(admission, "tix")
	require.NoError(t, err, "%s", out)
	assert.Contains(t, out, "nina")
	for name, c := range map[string]struct{ token, item, says string }{
		"another item":       {admission, "other", "another item"},
		"a queue token":      {queueTok.Token, "other", "algorithm"},
		"a forged signature": {admission[:strings.LastIndexByte(admission, '.')+1] + strings.Repeat("A", 86), "tix", "signature"},
	} {
		out, err := run(c.token, c.item)
		assert.Error(t, err, "%s: accepted: %s", name, out)
		assert.Contains(t, out, c.says, name)
	}
}
