package topics

import (
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitAdmission(t *testing.T) {
	ids := func(n int, f string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf(f, i)
		}
		return out
	}
	base := AdmissionEvent{V: Version, ItemID: "drop-1", Head: 123456, Waiting: 99, Active: 100000, Epoch: 7, At: 1_800_000_000_000}
	for _, tc := range []struct {
		name string
		ids  []string
		max  int
	}{
		{"none", nil, 1000},
		{"one", ids(1, "tok-%d"), 1000},
		{"fits", ids(20, "tok-%d"), 100_000},
		{"100k at the default", ids(100_000, "01JD4ZQ7K1%016d"), MaxAdmissionEventBytes},
		{"tight", ids(1000, "t%d"), 200},
		{"escaped", ids(500, "a<b>&\"%d\\"), 1000},
		{"below one id", ids(5, "token-%d"), 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := base
			ev.Admitted = tc.ids
			parts := SplitAdmission(ev, tc.max)
			require.NotEmpty(t, parts)
			var all []string
			for i, p := range parts {
				b := Encode(&p)
				if len(p.Admitted) > 1 {
					assert.LessOrEqual(t, len(b), tc.max, "part %d", i)
				}
				if i+1 < len(parts) { // as full as it can be: one more id would not fit
					q := p
					q.Admitted = append(slices.Clone(p.Admitted), parts[i+1].Admitted[0])
					assert.Greater(t, len(Encode(&q)), tc.max, "part %d", i)
				}
				back, err := DecodeAdmission(b)
				require.NoError(t, err)
				assert.Equal(t, base.Head, back.Head)
				assert.Equal(t, base.Epoch, back.Epoch)
				all = append(all, p.Admitted...)
			}
			assert.Equal(t, len(tc.ids), len(all))
			if len(tc.ids) > 0 {
				assert.Equal(t, tc.ids, all, "every id once, in order")
			}
			if tc.name == "100k at the default" {
				assert.Greater(t, len(parts), 2, "100,000 ids of 26 bytes are about 3 MB")
			}
		})
	}
}
