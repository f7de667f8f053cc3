package composecheck

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md's settings table from the config structs")

// TestConfigDocIsCurrent fails when docs/configuration.md's settings table
// is not the one the config structs make: a variable a Config reads without
// a row, a row whose variable nothing reads, a wrong default or used-by.
// -update rewrites the table (meanings and notes kept).
func TestConfigDocIsCurrent(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	path := filepath.Join(root, "docs", "configuration.md")
	want, err := ConfigDoc(root, path)
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(want), 0o644))
		return
	}
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := 0; i < max(len(gl), len(wl)); i++ {
			var g, w string
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Errorf("docs/configuration.md line %d is stale (run `go test ./deploy/composecheck -run TestConfigDocIsCurrent -update`):\n have: %s\n want: %s", i+1, g, w)
				break
			}
		}
	}
}

// The table's rules, on a made-up config: a missing row, a row of a
// variable nobody reads, and a wrong default each fail.
func TestRenderTableRefusesStaleRows(t *testing.T) {
	settings := map[string]*Setting{
		"WR_A": {Key: "WR_A", Defaults: map[string]string{"api": "1s"}, UsedBy: []string{"api"}},
		"WR_B": {Key: "WR_B", Defaults: map[string]string{"api": "", "ctl": "x"}, UsedBy: []string{"api", "ctl"}},
	}
	doc := func(rows ...string) string {
		return "intro\n" + tableBegin + "\n" + tableHead + "\n" + strings.Join(rows, "\n") + "\n" + tableEnd + "\nrest\n"
	}
	render := func(d string) (string, error) {
		before, rows, after, err := ParseTable(d)
		require.NoError(t, err)
		table, err := RenderTable(rows, settings)
		return before + table + after, err
	}
	current := doc("| `WR_A` | `1s` | api | a's meaning |", "| `WR_B` | —; `x` (ctl) (off) | api, ctl | b's meaning |")
	got, err := render(current)
	require.NoError(t, err)
	require.Equal(t, current, got)

	_, err = render(doc("| `WR_A` | `1s` | api | a's meaning |"))
	require.ErrorContains(t, err, "WR_B (read by api, ctl) has no row")

	_, err = render(doc("| `WR_A` | `1s` | api | a |", "| `WR_B` | — | api | b |", "| `WR_GONE` | `1` | api | c |"))
	require.ErrorContains(t, err, "WR_GONE names a variable no config reads")

	got, err = render(doc("| `WR_A` | `2s` | api | a's meaning |", "| `WR_B` | — (api); `x` (ctl) (off) | api, ctl | b's meaning |"))
	require.NoError(t, err)
	require.NotEqual(t, doc("| `WR_A` | `2s` | api | a's meaning |", "| `WR_B` | — (api); `x` (ctl) (off) | api, ctl | b's meaning |"), got, "a wrong default is rewritten, so the doc differs")
	require.Contains(t, got, "| `WR_A` | `1s` | api | a's meaning |")

	got, err = render(doc("| `WR_A` |  |  | a new one |", "| `WR_B` | — | api | b |"))
	require.NoError(t, err, "a new row may leave its default and used-by to -update")
	require.Contains(t, got, "| `WR_A` | `1s` | api | a new one |")

	_, err = render(doc("| `WR_A` | `1s` | api |  |", "| `WR_B` | — | api | b |"))
	require.ErrorContains(t, err, "WR_A has no meaning")
}
