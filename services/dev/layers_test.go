package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const pkgPrefix = "github.com/waitroom/waitroom/pkg/"

// layerRank orders pkg/'s layer folders (docs/architecture.md, "Layers"): a
// package imports packages of its own folder and of lower ranks only, and
// topics/. Folders of one rank do not import each other.
var layerRank = map[string]int{
	"foundation": 0, // config, retry, jsonstr, testenv: no waitroom import but topics
	"security":   1, // tokens, bypass codes, assertions: crypto on bytes
	"domain":     2, // the line's rules: no gin, no Redis, no Kafka
	"store":      3, // the Redis line and its scripts
	"kafka":      3, // Kafka plumbing: client options, read to end, tables, DLQ
	"web":        3, // the HTTP shell, the one Abort
	"redisview":  4, // the view family: marker and watcher, rebuild, retention, snapshots
	"app":        5, // the service skeleton
}

// knownDebt are the imports against the layers that remain, each with why;
// the list only shrinks.
var knownDebt = map[string]string{}

// domainForbidden are the libraries no domain package imports.
var domainForbidden = []string{"github.com/gin-gonic/gin", "github.com/redis/go-redis", "github.com/twmb/franz-go"}

// pkgImports is every package of the pkg module (tests left out) with its
// imports, by path below pkg/.
func pkgImports(t *testing.T) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = "../../pkg"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	m := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		m[strings.TrimPrefix(f[0], pkgPrefix)] = f[1:]
	}
	return m
}

// TestPkgImportsFollowTheLayers fails on an import against the layers: a
// lower layer importing a higher one, two folders of one rank importing each
// other, or a package outside the layer folders.
func TestPkgImportsFollowTheLayers(t *testing.T) {
	pkgs := pkgImports(t)
	require.GreaterOrEqual(t, len(pkgs), 20, "packages found in pkg/")
	for p, imports := range pkgs {
		layer, _, _ := strings.Cut(p, "/")
		rank, ok := layerRank[layer]
		if !assert.True(t, ok, "pkg/%s is in no layer folder (%v)", p, layerRank) {
			continue
		}
		for _, imp := range imports {
			dep, ok := strings.CutPrefix(imp, pkgPrefix)
			if !ok {
				continue
			}
			depLayer, _, _ := strings.Cut(dep, "/")
			if depLayer == layer || layerRank[depLayer] < rank {
				continue
			}
			if _, debt := knownDebt[p+" -> "+dep]; debt {
				continue
			}
			t.Errorf("pkg/%s (%s) imports pkg/%s (%s): a layer imports only its own folder and lower ones", p, layer, dep, depLayer)
		}
	}
	for edge := range knownDebt {
		from, to, _ := strings.Cut(edge, " -> ")
		assert.Contains(t, pkgs[from], pkgPrefix+to, "known debt %q is paid: remove it from knownDebt", edge)
	}
}

// TestDomainCompilesNoFrameworkOrClient checks everything the domain
// compiles, its imports and theirs (topics/ and pkg/foundation included): the
// line's rules build without gin, go-redis or franz-go.
func TestDomainCompilesNoFrameworkOrClient(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}`, "./domain/...")
	cmd.Dir = "../../pkg"
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go list: %s", out)
	checked := 0
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(l)
		checked++
		for _, dep := range f[1:] {
			for _, lib := range domainForbidden {
				assert.False(t, dep == lib || strings.HasPrefix(dep, lib+"/"), "%s compiles %s", f[0], dep)
			}
		}
	}
	assert.GreaterOrEqual(t, checked, 3, "domain packages found")
}
