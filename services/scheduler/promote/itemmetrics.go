package promote

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/topics"
)

// itemMetrics are the leader's per-item figures of its last tick (one series
// per item with a line: items are a catalogue, not users). A replica that
// stops leading drops them, so the leader's are the only ones.
type itemMetrics struct {
	admitted        *prometheus.CounterVec
	waiting, active *prometheus.GaugeVec
	seen            map[string]bool // items of the last tick
}

func newItemMetrics(reg prometheus.Registerer) *itemMetrics {
	m := &itemMetrics{
		admitted: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_scheduler_item_admitted_total",
			Help: "People admitted, by item (counted by the leader that admitted them)."}, []string{"item"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "waitroom_scheduler_item_waiting",
			Help: "People in an item's line after the leader's last tick."}, []string{"item"}),
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "waitroom_scheduler_item_active",
			Help: "An item's live admissions after the leader's last tick."}, []string{"item"}),
		seen: map[string]bool{},
	}
	reg.MustRegister(m.admitted, m.waiting, m.active)
	return m
}

// observe sets an item's figures from its tick.
func (m *itemMetrics) observe(item string, admitted int, waiting, active int64, now map[string]bool) {
	// Added to even at 0: a line that never admits anyone must have a
	// series for the alert to see its rate is 0.
	m.admitted.WithLabelValues(item).Add(float64(admitted))
	m.waiting.WithLabelValues(item).Set(float64(waiting))
	m.active.WithLabelValues(item).Set(float64(active))
	now[item] = true
}

// sweep drops the gauges of items the last tick no longer had.
func (m *itemMetrics) sweep(now map[string]bool) {
	for item := range m.seen {
		if !now[item] {
			m.waiting.DeleteLabelValues(item)
			m.active.DeleteLabelValues(item)
		}
	}
	m.seen = now
}

// reset drops every gauge (this replica no longer leads).
func (m *itemMetrics) reset() {
	m.waiting.Reset()
	m.active.Reset()
	m.seen = map[string]bool{}
}

// PolicyCollector exports each item's admission policy as the operator set
// it, from the items topic: waitroom_item_rate_per_second (0 while paused,
// disabled or sold out: nobody should get in) and waitroom_item_max_active.
// Alerts compare the admissions with them.
func PolicyCollector(items interface {
	All() map[string]topics.ItemState
}) prometheus.Collector {
	return &policyCollector{items: items}
}

var (
	rateDesc = prometheus.NewDesc("waitroom_item_rate_per_second",
		"An item's admission rate as set (0 while paused, disabled or sold out).", []string{"item"}, nil)
	maxActiveDesc = prometheus.NewDesc("waitroom_item_max_active",
		"An item's most live admissions at once, as set.", []string{"item"}, nil)
	steeredDesc = prometheus.NewDesc("waitroom_item_steered",
		"1 when the item's policy asks the steering controller to pace it by the site's signal.", []string{"item"}, nil)
)

type policyCollector struct {
	items interface {
		All() map[string]topics.ItemState
	}
}

func (c *policyCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- rateDesc
	ch <- maxActiveDesc
	ch <- steeredDesc
}

func (c *policyCollector) Collect(ch chan<- prometheus.Metric) {
	for id, st := range c.items.All() {
		rate := st.Policy.RatePerSecond
		if st.Policy.Paused || !st.Enabled || st.Stock == 0 {
			rate = 0
		}
		ch <- prometheus.MustNewConstMetric(rateDesc, prometheus.GaugeValue, rate, id)
		ch <- prometheus.MustNewConstMetric(maxActiveDesc, prometheus.GaugeValue, float64(st.Policy.MaxActive), id)
		steered := 0.0
		if st.Policy.Steer != nil {
			steered = 1
		}
		ch <- prometheus.MustNewConstMetric(steeredDesc, prometheus.GaugeValue, steered, id)
	}
}
