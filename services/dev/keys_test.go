package main

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/domain/registration"
)

const seed = "dGVzdC1vbmx5LWVkMjU1MTktc2VlZC0zMi1ieXRlcyE=" // a valid Ed25519 seed, not the published one

// TestNoDevKeysOutsideTheDevStack builds the api and the notifier and starts
// them as a deployment would, without keys or with the built-in ones pasted
// into the environment: each must refuse to start, with one line naming the
// variable, before it connects to anything. Only the dev stack (DevKeys, set
// in code) may run on the built-in keys.
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
				says    string
			}{
				{nil, "WR_TOKEN_KEY", " is not set"},
				{[]string{"WR_TOKEN_KEY=" + strings.Repeat("k", 32)}, "WR_ADMISSION_KEY", " is not set"},
				// The published keys, pasted into the environment.
				{[]string{"WR_TOKEN_KEY=" + registration.DevTokenKey, "WR_ADMISSION_KEY=" + seed},
					"WR_TOKEN_KEY", " is a development key published in waitroom's source"},
				{[]string{"WR_TOKEN_KEY=" + strings.Repeat("k", 32), "WR_ADMISSION_KEY=" + registration.DevAdmissionKey},
					"WR_ADMISSION_KEY", " is a development key published in waitroom's source"},
			} {
				cmd := exec.Command(exe)
				cmd.Env = c.env // nothing else: not even the dev stack's switch, which no variable sets
				out, err := cmd.CombinedOutput()
				var exit *exec.ExitError
				require.True(t, errors.As(err, &exit), "started without %s: %v\n%s", c.missing, err, out)
				assert.Equal(t, 1, exit.ExitCode())
				lines := strings.Split(strings.TrimSpace(string(out)), "\n")
				require.Len(t, lines, 1, "one line: %s", out)
				assert.True(t, strings.HasPrefix(lines[0], "waitroom-"+svc+": "+c.missing+c.says), lines[0])
			}
		})
	}
}
