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
	exps := func(n int) []int64 {
		out := make([]int64, n)
		for i := range out {
			out[i] = 1_800_000_000_000 + int64(i*i)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		ids  []string
		max  int
		exps []int64
	}{
		{"none", nil, 1000, nil},
		{"one", ids(1, "tok-%d"), 1000, nil},
		{"fits", ids(20, "tok-%d"), 100_000, nil},
		{"100k at the default", ids(100_000, "01JD4ZQ7K1%016d"), MaxAdmissionEventBytes, nil},
		{"tight", ids(1000, "t%d"), 200, nil},
		{"escaped", ids(500, "a<b>&\"%d\\"), 1000, nil},
		{"below one id", ids(5, "token-%d"), 10, nil},
		{"with expiries", ids(5000, "tok-%d"), 10_000, exps(5000)},
		{"100k with expiries", ids(100_000, "01JD4ZQ7K1%016d"), MaxAdmissionEventBytes, exps(100_000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ev := base
			ev.Admitted, ev.ExpiresAt = tc.ids, tc.exps
			parts := SplitAdmission(ev, tc.max)
			require.NotEmpty(t, parts)
			var all []string
			var allExps []int64
			for i, p := range parts {
				b := Encode(&p)
				if len(p.Admitted) > 1 {
					assert.LessOrEqual(t, len(b), tc.max, "part %d", i)
				}
				if i+1 < len(parts) { // as full as it can be: one more id would not fit
					q := p
					q.Admitted = append(slices.Clone(p.Admitted), parts[i+1].Admitted[0])
					if tc.exps != nil {
						q.ExpiresAt = append(slices.Clone(p.ExpiresAt), parts[i+1].ExpiresAt[0])
					}
					assert.Greater(t, len(Encode(&q)), tc.max, "part %d", i)
				}
				back, err := DecodeAdmission(b)
				require.NoError(t, err)
				assert.Equal(t, base.Head, back.Head)
				assert.Equal(t, base.Epoch, back.Epoch)
				all = append(all, p.Admitted...)
				allExps = append(allExps, p.ExpiresAt...)
			}
			assert.Equal(t, len(tc.ids), len(all))
			assert.Equal(t, tc.exps, allExps, "every expiry with its id")
			if len(tc.ids) > 0 {
				assert.Equal(t, tc.ids, all, "every id once, in order")
			}
			if tc.name == "100k at the default" {
				assert.Greater(t, len(parts), 2, "100,000 ids of 26 bytes are about 3 MB")
			}
		})
	}
}
