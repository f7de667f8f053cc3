package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
	"github.com/waitroom/waitroom/pkg/store/sitehealth"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
)

// The kit's health reports must pass the api's signal route, which takes
// a window of 100 ms to 1 min (sitehealth.MaxWindow): the kit reports every
// interval up to a minute (WithReportEvery), and a window is the time since
// the last report, so a tick a few milliseconds late, or a first report a
// while after the meter was made, is a little longer than the interval.
func TestTheKitsHealthReportsPassTheSignalRoute(t *testing.T) {
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	api := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(api.Close)
	kit, err := waitroomkit.New(api.URL, waitroomkit.WithClock(clock))
	require.NoError(t, err)
	t.Cleanup(func() { _ = kit.Close() })

	// What the api's signal handler does with a body before keeping it.
	room := func(r waitroomkit.SignalReport) error {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		var got sitehealth.Report
		if e := httpserver.DecodeJSON(b, &got); e != nil {
			return fmt.Errorf("%s: %s", e.Code, e.Message)
		}
		return got.Validate(topics.ValidID)
	}

	h := kit.Health("gig", "token", waitroomkit.WithInstance("web-1"), waitroomkit.WithReportEvery(time.Minute))
	h.Observe(20*time.Millisecond, false, waitroomkit.Admission{})
	advance(90 * time.Second) // Run started a while after the meter
	require.NoError(t, room(h.Report()), "the first report, 90 s after the meter was made")
	for _, late := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 250 * time.Millisecond} {
		h.Observe(20*time.Millisecond, false, waitroomkit.Admission{})
		advance(time.Minute + late)
		require.NoError(t, room(h.Report()), "a one-minute tick %s late", late)
	}
	advance(time.Millisecond)
	require.NoError(t, room(h.Report()), "a report right after another")
}
