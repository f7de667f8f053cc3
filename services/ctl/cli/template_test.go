package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/kafka/itemcache"
	"go.uber.org/zap"
)

// --template-file sends the item's own page, checked first: a page with a
// script of its own is a usage error naming the line, and nothing is sent.
func TestItemsSetTemplateFile(t *testing.T) {
	brokers := testenv.Kafka(t, 1)
	env := []string{"WR_KAFKA_BROKERS=" + strings.Join(brokers, ",")}
	dir := t.TempDir()
	good := filepath.Join(dir, "good.html")
	bad := filepath.Join(dir, "bad.html")
	const page = `<html lang="{{.Lang}}"><title>{{.ItemName}}</title><body><h1>{{.ItemName}}</h1>{{.Position}}{{.Room}}</body></html>`
	require.NoError(t, os.WriteFile(good, []byte(page), 0o644))
	require.NoError(t, os.WriteFile(bad, []byte("<body>\n<script>x()</script>{{.Room}}</body>"), 0o644))

	r := runBin(t, env, "items", "set", "shoes", "--template-file", bad)
	require.Equal(t, ExitUsage, r.code, r)
	assert.Contains(t, r.stderr, "--template-file line 2: <script> is not allowed")

	r = runBin(t, env, "items", "set", "shoes", "--template-file", good)
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("waiting-page:  the item's own template (%d bytes)", len(page)))
	cache, err := itemcache.New([]kgo.Opt{kgo.SeedBrokers(brokers...)}, zap.NewNop())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	go func() { _ = cache.Run(ctx) }()
	require.NoError(t, cache.Sync(ctx))
	s, ok := cache.Get("shoes")
	require.True(t, ok)
	assert.Equal(t, page, s.Template)
	assert.EqualValues(t, 1, s.Version, "the refused page was never sent")

	// A page per language, beside the item's page; one that names another
	// language, or has no title, is refused before anything is sent.
	ko := filepath.Join(dir, "ko.html")
	const koPage = `<html lang="ko"><title>대기실</title><body><h1>{{.ItemName}}</h1>{{.Position}}{{.Room}}</body></html>`
	require.NoError(t, os.WriteFile(ko, []byte(koPage), 0o644))
	r = runBin(t, env, "items", "set", "shoes", "--template-lang", "ja="+ko)
	require.Equal(t, ExitUsage, r.code, r)
	assert.Contains(t, r.stderr, `--template-lang ja: line 1: <html lang="ko"> in the template for "ja"`)
	r = runBin(t, env, "items", "set", "shoes", "--template-lang", "ko="+ko, "--template-lang", "de="+good)
	require.Equal(t, ExitOK, r.code, r)
	assert.Contains(t, r.stdout, fmt.Sprintf("waiting-page ko:  the item's own template in ko (%d bytes)", len(koPage)))
	require.Eventually(t, func() bool { s, _ := cache.Get("shoes"); return s.Version == 2 }, 10*time.Second, 20*time.Millisecond)
	s, _ = cache.Get("shoes")
	assert.Equal(t, map[string]string{"ko": koPage, "de": page}, s.Templates)
	assert.Equal(t, page, s.Template, "the item's page stays")
	r = runBin(t, env, "items", "set", "shoes", "--template-lang", "de=")
	require.Equal(t, ExitOK, r.code, r)
	require.Eventually(t, func() bool { s, _ := cache.Get("shoes"); return s.Version == 3 }, 10*time.Second, 20*time.Millisecond)
	s, _ = cache.Get("shoes")
	assert.Equal(t, map[string]string{"ko": koPage}, s.Templates, "de= removes the German page only")
}
