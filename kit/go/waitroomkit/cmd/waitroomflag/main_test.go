package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// A flag the command signs is the one a kit reads: its items, its default,
// verified with the key -public prints.
func TestSignedFlagIsReadByTheKit(t *testing.T) {
	seed := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	var pubOut, flagOut bytes.Buffer
	if err := run([]string{"-public"}, seed, &pubOut, time.Now()); err != nil {
		t.Fatal(err)
	}
	pub, err := base64.StdEncoding.DecodeString(strings.TrimSpace(pubOut.String()))
	if err != nil || len(pub) != ed25519.PublicKeySize {
		t.Fatalf("public key %q: %v", pubOut.String(), err)
	}
	if err := run([]string{"-item", "concert=paused", "-item", "merch=open,through", "-default", "open"}, seed, &flagOut, time.Now()); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "flag.jws")
	if err := os.WriteFile(path, flagOut.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	kit, err := waitroomkit.New("http://127.0.0.1:1", waitroomkit.WithFlag(path, pub, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	defer kit.Close()
	if err := kit.RefreshFlag(context.Background()); err != nil {
		t.Fatal(err)
	}
	f, _ := kit.CurrentFlag()
	if f.Items["concert"].Off != waitroomkit.OffPaused || f.Items["merch"] != (waitroomkit.ItemFlag{FailMode: "open", Off: "through"}) ||
		f.Default.FailMode != waitroomkit.FailOpen {
		t.Fatalf("flag read back: %+v", f)
	}
	for _, bad := range [][]string{{"-item", "concert=maybe"}, {"-item", "=paused"}, {"-default", "sideways"}} {
		if err := run(bad, seed, &bytes.Buffer{}, time.Now()); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
	if err := run(nil, "c2hvcnQ=", &bytes.Buffer{}, time.Now()); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Errorf("a short key: %v", err)
	}
}
