package sse

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/pkg/domain/registration"
)

// Event types a stream sends.
const (
	EventPending   = "pending"
	EventPreQueue  = "pre_queue"
	EventPosition  = "position"
	EventAdmitted  = "admitted"
	EventSoldOut   = "sold_out"
	EventClosed    = "closed"
	EventExpired   = "expired"
	EventLeft      = "left"
	EventCompleted = "completed"
	EventRejected  = "rejected"
	// EventAbandoned: the place was released idle (ABANDONED).
	EventAbandoned = "abandoned"
	// EventDuplicate: another token of the same proven user holds the place
	// (DUPLICATE); the api's status answer resumes it with a new token.
	EventDuplicate = "duplicate"
	// EventNotice: the operator's message to everyone waiting, {"notice"}
	// ("" when cleared); sent at connect when there is one, then on change.
	EventNotice = "notice"
)

// eventOf names the event of each status (registration's vocabulary).
var eventOf = map[string]string{
	registration.StatusPending: EventPending, registration.StatusWaiting: EventPosition,
	registration.StatusAdmitted: EventAdmitted, registration.StatusSoldOut: EventSoldOut,
	registration.StatusClosed: EventClosed, registration.StatusExpired: EventExpired,
	registration.StatusLeft: EventLeft, registration.StatusCompleted: EventCompleted,
	registration.StatusRejected:  EventRejected,
	registration.StatusAbandoned: EventAbandoned,
	registration.StatusPreQueue:  EventPreQueue,
	registration.StatusDuplicate: EventDuplicate,
}

var eventTypes = []string{EventPending, EventPreQueue, EventPosition, EventAdmitted, EventSoldOut, EventClosed, EventExpired, EventLeft, EventCompleted, EventRejected, EventAbandoned, EventDuplicate, EventNotice}

var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .2, .3, .5, 1, 2, 5}

// Metrics of the notifier.
type Metrics struct {
	streams    prometheus.Gauge
	refused    map[string]prometheus.Counter  // by reason, resolved once
	delivered  map[string]prometheus.Counter  // by event type, resolved once
	latency    map[string]prometheus.Observer // by event type (position, admitted), resolved once
	lag        prometheus.Histogram
	replaced   prometheus.Counter
	writeFails prometheus.Counter
	// cursorOpens counts the streams opened from a valid cursor (no Redis read).
	cursorOpens prometheus.Counter
	records     prometheus.Counter
	badRecords  prometheus.Counter
	stale       prometheus.CounterFunc
}

// NewMetrics registers the notifier's metrics on reg; hub feeds the stale
// events counter.
func NewMetrics(reg prometheus.Registerer, hub *Hub) *Metrics {
	delivered := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waitroom_notifier_events_delivered_total", Help: "SSE events written to streams, by type.",
	}, []string{"type"})
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waitroom_notifier_streams_refused_total",
		Help: "Streams refused before they opened, by the cap that refused them: token and address (429 TOO_MANY_STREAMS), notifier (503 NOTIFIER_FULL), open_rate (503 NOTIFIER_BUSY).",
	}, []string{"reason"})
	m := &Metrics{
		refused: map[string]prometheus.Counter{},
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "waitroom_notifier_open_streams", Help: "SSE streams open on this notifier.",
		}),
		delivered: map[string]prometheus.Counter{},
		latency:   map[string]prometheus.Observer{},
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "waitroom_notifier_admission_lag_seconds",
			Help:    "From an admission event's time (the scheduler's tick) to this notifier reading it from waitroom.admissions (the scheduler's and Kafka's share of the delivery latency).",
			Buckets: latencyBuckets,
		}),
		replaced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_notifier_updates_replaced_total",
			Help: "Item updates a stream skipped because a newer one arrived before it wrote (slow client: latest state, no backlog).",
		}),
		writeFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_notifier_write_errors_total", Help: "Streams ended by a failed or timed-out write (dead or stuck clients).",
		}),
		cursorOpens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_notifier_cursor_opens_total", Help: "Streams opened from the cursor in Last-Event-ID, without a Redis read (the others read the status).",
		}),
		records: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_notifier_admission_records_total", Help: "Records read from waitroom.admissions.",
		}),
		badRecords: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "waitroom_notifier_admission_records_undecodable_total", Help: "Records of waitroom.admissions that could not be decoded (skipped).",
		}),
		stale: prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "waitroom_notifier_admission_events_stale_total", Help: "Admission events behind the item's head (replays, late events of a previous leader): ignored.",
		}, func() float64 { return float64(hub.Stale()) }),
	}
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "waitroom_notifier_delivery_latency_seconds",
		Help:    "From an admission event's time (the scheduler's tick) to writing what it changed to a stream, by event type (position, admitted).",
		Buckets: latencyBuckets,
	}, []string{"type"})
	for _, t := range eventTypes {
		m.delivered[t] = delivered.WithLabelValues(t)
		m.latency[t] = latency.WithLabelValues(t)
	}
	for _, r := range refusedReasons {
		m.refused[r] = refused.WithLabelValues(r)
	}
	reg.MustRegister(m.streams, refused, delivered, latency, m.lag, m.replaced, m.writeFails, m.cursorOpens, m.records, m.badRecords, m.stale)
	return m
}
