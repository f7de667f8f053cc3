package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const servicesPrefix = "github.com/waitroom/waitroom/services/"

// TestNoServiceImportsAnother checks the import graph: what two services
// share lives in pkg/ or topics/, so no service's packages, tests included,
// import another service's. The dev stack (this module) is the one exception:
// it runs every service in one process.
func TestNoServiceImportsAnother(t *testing.T) {
	dirs, err := filepath.Glob("../*/go.mod")
	require.NoError(t, err)
	checked := 0
	for _, mod := range dirs {
		svc := filepath.Base(filepath.Dir(mod))
		if svc == "dev" {
			continue
		}
		t.Run(svc, func(t *testing.T) {
			cmd := exec.Command("go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", "./...")
			cmd.Dir = filepath.Dir(mod)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "go list: %s", out)
			own := servicesPrefix + svc
			var foreign []string
			for _, p := range strings.Fields(string(out)) {
				if strings.HasPrefix(p, servicesPrefix) && p != own && !strings.HasPrefix(p, own+"/") && !strings.HasPrefix(p, own+".") {
					foreign = append(foreign, p)
				}
			}
			assert.Empty(t, foreign, "services/%s (or its tests) imports another service's packages", svc)
			gomod, err := os.ReadFile(mod)
			require.NoError(t, err)
			for _, l := range strings.Split(string(gomod), "\n") {
				if strings.Contains(l, servicesPrefix) && !strings.HasPrefix(strings.TrimSpace(l), "module ") {
					t.Errorf("%s requires or replaces another service's module: %s", mod, strings.TrimSpace(l))
				}
			}
			assert.Contains(t, string(out), own, "go list saw the module's own packages")
		})
		checked++
	}
	assert.GreaterOrEqual(t, checked, 5, "services found under services/")
}
