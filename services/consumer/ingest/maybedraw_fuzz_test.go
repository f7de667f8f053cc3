package ingest

import (
	"testing"

	"github.com/waitroom/waitroom/topics"
)

// FuzzMayBeDraw: every value that decodes as a draw record passes the
// pre-filter of firstDraw, or a draw would reach the batch path.
func FuzzMayBeDraw(f *testing.F) {
	f.Add([]byte(`{"v":1,"kind":"draw","itemId":"i","requestedAt":1,"draw":{"window":1,"round":1,"seed":"` +
		"0000000000000000000000000000000000000000000000000000000000000000" + `","commit":"` +
		"0000000000000000000000000000000000000000000000000000000000000000" + `"}}`))
	f.Add([]byte(`{"v":1,"kind":"\u0064raw","itemId":"i","draw":{}}`))
	f.Add([]byte(`{"v":1,"kind":"register","itemId":"i","userId":"u","tokenId":"t","requestedAt":1}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if ev, err := topics.DecodeRegistration(b); err == nil && ev.Kind == topics.KindDraw && !mayBeDraw(b) {
			t.Fatalf("a draw record the pre-filter misses: %q", b)
		}
	})
}
