package bypass_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/security/bypass"
)

const seed = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="

func TestIssueVerify(t *testing.T) {
	priv, err := bypass.ParsePrivate(seed)
	if err != nil {
		t.Fatal(err)
	}
	pubS, _ := bypass.PublicOf(seed)
	pub, err := bypass.ParsePublic(pubS)
	if err != nil {
		t.Fatal(err)
	}
	now := time.UnixMilli(1_800_000_000_000)
	c, raw, err := bypass.Issue(priv, "concert", 3, time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := bypass.Verify(pub, "concert", raw, now.Add(time.Minute))
	if err != nil || got != c {
		t.Fatalf("verify: %+v %v, want %+v", got, err, c)
	}
	_, otherPriv, _ := ed25519.GenerateKey(nil)
	_, forged, _ := bypass.Issue(otherPriv, "concert", 3, time.Hour, now)
	// Raising the count re-encodes the body: the signature no longer holds.
	dot := strings.IndexByte(raw[len(bypass.Prefix):], '.') + len(bypass.Prefix)
	body, _ := base64.RawURLEncoding.DecodeString(raw[len(bypass.Prefix):dot])
	more := bypass.Prefix + base64.RawURLEncoding.EncodeToString([]byte(strings.Replace(string(body), "|3|", "|300|", 1))) + raw[dot:]
	for _, tc := range []struct {
		name, item, code string
		at               time.Time
		reason           string
	}{
		{"another key", "concert", forged, now, bypass.ReasonSignature},
		{"count raised", "concert", more, now, bypass.ReasonSignature},
		{"another item", "other", raw, now, bypass.ReasonItem},
		{"expired", "concert", raw, now.Add(time.Hour), bypass.ReasonExpired},
		{"garbage", "concert", "hello", now, bypass.ReasonMalformed},
		{"truncated", "concert", raw[:len(raw)-3], now, bypass.ReasonSignature},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := bypass.Verify(pub, tc.item, tc.code, tc.at)
			var be *bypass.Error
			if !errors.As(err, &be) || be.Reason != tc.reason {
				t.Fatalf("got %v, want %s", err, tc.reason)
			}
		})
	}
	for _, tc := range []struct {
		item  string
		count int64
		ttl   time.Duration
	}{{"a b", 1, time.Hour}, {"x", 0, time.Hour}, {"x", bypass.MaxCount + 1, time.Hour}, {"x", 1, 0}, {"x", 1, bypass.MaxTTL + time.Second}} {
		if _, _, err := bypass.Issue(priv, tc.item, tc.count, tc.ttl, now); err == nil {
			t.Errorf("Issue(%q, %d, %s) passed", tc.item, tc.count, tc.ttl)
		}
	}
}

func FuzzVerify(f *testing.F) {
	priv, _ := bypass.ParsePrivate(seed)
	_, raw, _ := bypass.Issue(priv, "concert", 3, time.Hour, time.Now())
	f.Add(raw)
	f.Add("wrb1..")
	pub := priv.Public().(ed25519.PublicKey)
	f.Fuzz(func(t *testing.T, code string) {
		c, err := bypass.Verify(pub, "concert", code, time.Now())
		if err == nil && (c.Item != "concert" || c.Count < 1) {
			t.Fatalf("accepted %+v", c)
		}
	})
}
