package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoDevKeysOutsideTheDevStack builds the api and the notifier and starts
// them as a deployment would, without keys: each must refuse to start, with
// one line naming the missing variable, before it connects to anything. Only
// the dev stack (DevKeys, set in code) may run on the built-in keys.
func TestNoDevKeysOutsideTheDevStack(t *testing.T) {
	bin := t.TempDir()
	for _, svc := range []string{"api", "notifier"} {
		t.Run(svc, func(t *testing.T) {
			exe := filepath.Join(bin, "waitroom-"+svc)
			build := exec.Command("go", "build", "-o", exe, "github.com/waitroom/waitroom/services/"+svc)
			out, err := build.CombinedOutput()
			require.NoError(t, err, "go build: %s", out)
			for _, c := range []struct {
				env     []string
				missing string
			}{
				{nil, "WR_TOKEN_KEY"},
				{[]string{"WR_TOKEN_KEY=" + strings.Repeat("k", 32)}, "WR_ADMISSION_KEY"},
			} {
				cmd := exec.Command(exe)
				cmd.Env = c.env // nothing else: not even the dev stack's switch, which no variable sets
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				require.True(t, errors.As(err, &exit), "started without %s: %v\n%s", c.missing, err, out)
				assert.Equal(t, 1, exit.ExitCode())
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				require.Len(t, lines, 1, "one line: %s", out)
				assert.True(t, strings.HasPrefix(lines[0], "waitroom-"+svc+": "+c.missing+" is not set"), lines[0])
			}
		})
	}
}
