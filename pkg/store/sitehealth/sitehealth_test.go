package sitehealth_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/waitroom/waitroom/pkg/foundation/testenv"
	"github.com/waitroom/waitroom/pkg/store/sitehealth"
	"github.com/waitroom/waitroom/topics"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func good() sitehealth.Report {
	return sitehealth.Report{Instance: "web-1", WindowMs: 2000, BoundsMs: []float64{50, 100, 250}, Counts: []uint64{10, 5, 4, 1},
		Errors: 1, Arrivals: 3, ArrivalDelayMsSum: 3000, Active: 12}
}

func TestReportValidateRefusesWhatCannotBeRead(t *testing.T) {
	r := good()
	if err := r.Validate(topics.ValidID); err != nil {
		t.Fatalf("good report refused: %v", err)
	}
	for name, change := range map[string]func(*sitehealth.Report){
		"no instance":       func(r *sitehealth.Report) { r.Instance = "" },
		"window too short":  func(r *sitehealth.Report) { r.WindowMs = 10 },
		"window too long":   func(r *sitehealth.Report) { r.WindowMs = 120_000 },
		"counts mismatch":   func(r *sitehealth.Report) { r.Counts = r.Counts[:3] },
		"bounds unsorted":   func(r *sitehealth.Report) { r.BoundsMs = []float64{50, 40, 250} },
		"errors > requests": func(r *sitehealth.Report) { r.Errors = 21 },
		"negative active":   func(r *sitehealth.Report) { r.Active = -1 },
		"too many buckets": func(r *sitehealth.Report) {
			r.BoundsMs, r.Counts = make([]float64, sitehealth.MaxBuckets+1), make([]uint64, sitehealth.MaxBuckets+2)
			for i := range r.BoundsMs {
				r.BoundsMs[i] = float64(i + 1)
			}
		},
	} {
		r := good()
		change(&r)
		if err := r.Validate(topics.ValidID); !errors.Is(err, sitehealth.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
	s := r.Signal()
	if err := s.Problem(); err != nil || s.Requests != 20 || s.Quantile(0.5) != 50*time.Millisecond {
		t.Fatalf("signal %+v (%v): want 20 requests, median 50 ms", s, err)
	}
}

// Each instance's window counts once however often it is read; the active
// sessions add up over instances; the store holds at most MaxInstances.
func TestStoreAndFollowerCountEachWindowOnce(t *testing.T) {
	ctx := context.Background()
	st := sitehealth.NewStore(testenv.Redis(t))
	now := time.Now()
	put := func(inst string, at time.Time, active int64) {
		r := good()
		r.Instance, r.At, r.Active = inst, at.UnixMilli(), active
		if err := st.Put(ctx, "it", &r); err != nil {
			t.Fatal(err)
		}
	}
	put("a", now.Add(-time.Second), 10)
	put("b", now.Add(-time.Second), 7)
	f := sitehealth.NewFollower(30 * time.Second)
	read := func() []sitehealth.Report {
		rs, err := st.Read(ctx, "it", now)
		if err != nil {
			t.Fatal(err)
		}
		return rs
	}
	s := f.Next(read(), now)
	if s == nil || s.Requests != 40 || s.Active != 17 || s.Arrivals != 6 {
		t.Fatalf("first read: %+v, want both windows (40 requests, 17 active, 6 arrivals)", s)
	}
	again := f.Next(read(), now)
	if again != s {
		t.Fatalf("a second read of the same windows made a new signal %+v", again)
	}
	put("a", now, 12)
	s = f.Next(read(), now)
	if s.Requests != 20 || s.Active != 19 {
		t.Fatalf("after a's next window: %+v, want a's window alone (20) and 12+7 active", s)
	}
	for i := range sitehealth.MaxInstances - 2 {
		put(fmt.Sprintf("x%d", i), now, 1)
	}
	r := good()
	r.Instance, r.At = "one-too-many", now.UnixMilli()
	if err := st.Put(ctx, "it", &r); !errors.Is(err, sitehealth.ErrTooManyInstances) {
		t.Fatalf("instance %d: %v, want ErrTooManyInstances", sitehealth.MaxInstances+1, err)
	}
}
