package promote

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/pkg/foundation/retry"
	"github.com/waitroom/waitroom/pkg/store/queue"
	"github.com/waitroom/waitroom/topics"
	"go.uber.org/zap"
)

// Items is where the sweep reads each item's idleTimeout (the item cache).
type Items interface {
	Get(item string) (topics.ItemState, bool)
}

// Sweeper releases abandoned places (issue 16): on the items of the shards
// this replica leads that have an idleTimeout, every interval, it reads the
// places whose last sign of life (a poll through the api, an open stream on
// a notifier: pkg/store/liveness) is older than the timeout plus one flush of those
// signs, publishes an abandon record for each on waitroom.registrations (the
// consumer releases the place: ABANDONED), and forgets them once Kafka has
// the records. At most queue.IdleLimit places per item per pass.
type Sweeper struct {
	s     *Scheduler
	items Items
	every time.Duration
	grace time.Duration
	now   func() time.Time
	log   *zap.Logger
	swept prometheus.Counter
}

// NewSweeper returns the sweep of s's items every `every` (default 1 s);
// grace is how late a sign of life may reach Redis (the api's and the
// notifiers' WR_SEEN_FLUSH).
func NewSweeper(s *Scheduler, items Items, every, grace time.Duration, reg prometheus.Registerer, log *zap.Logger) *Sweeper {
	if every <= 0 {
		every = time.Second
	}
	w := &Sweeper{s: s, items: items, every: every, grace: max(grace, 0), now: time.Now, log: log,
		swept: prometheus.NewCounter(prometheus.CounterOpts{Name: "waitroom_scheduler_abandoned_total",
			Help: "Idle places the sweep published an abandon record for (the consumer releases them)."})}
	reg.MustRegister(w.swept)
	return w
}

// Run sweeps every interval until ctx ends.
func (w *Sweeper) Run(ctx context.Context) {
	retry.Every(ctx, w.every, false, func(ctx context.Context) error {
		_, err := w.Sweep(ctx)
		return err
	}, func(err error, _ bool) {
		w.log.Warn("idle sweep; the rest at the next one", zap.Error(err))
	})
}

// Sweep makes one pass and returns how many abandon records it published.
func (w *Sweeper) Sweep(ctx context.Context) (int, error) {
	if !w.s.Leading() || !w.s.trusted() {
		return 0, nil
	}
	items, err := w.s.activeItems(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, item := range items {
		it, ok := w.items.Get(item)
		if !ok || it.IdleTimeoutSeconds <= 0 || !w.s.Leads(item) {
			continue
		}
		k, err := w.sweepItem(ctx, item, it.IdleTimeoutSeconds)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (w *Sweeper) sweepItem(ctx context.Context, item string, idleSeconds int64) (int, error) {
	now := w.now()
	cutoff := now.Add(-time.Duration(idleSeconds)*time.Second - w.grace).UnixMilli()
	idle, gone, err := w.s.line.Idle(ctx, item, cutoff, queue.IdleLimit)
	if err != nil {
		return 0, err
	}
	forget := gone
	var recs []*kgo.Record
	var members []string // the Seen member of each record
	for _, m := range idle {
		tok, key, ok := queue.ParseSeen(m)
		// The Seen member keeps the place's key, not the label a client
		// typed: a place keyed by its token is told so by the key itself.
		holder := topics.HolderUser
		if key == tok {
			holder = topics.HolderToken
		}
		ev := topics.RegistrationEvent{V: topics.Version, Kind: topics.KindAbandon, TokenID: tok, ItemID: item, UserID: key,
			Holder: holder, RequestedAt: now.UnixMilli()}
		if !ok || ev.Validate() != nil {
			forget = append(forget, m) // not a place: nothing to release
			continue
		}
		recs = append(recs, &kgo.Record{Topic: topics.Registrations, Key: []byte(item), Value: topics.Encode(&ev)})
		members = append(members, m)
	}
	published := 0
	var perr error
	if len(recs) > 0 {
		of := make(map[*kgo.Record]string, len(recs))
		for i, r := range recs {
			of[r] = members[i]
		}
		for _, r := range w.s.prod.ProduceSync(ctx, recs...) { // results come in callback order
			if r.Err != nil {
				perr = r.Err // kept in Seen: the next pass publishes it again
				continue
			}
			forget = append(forget, of[r.Record])
			published++
		}
	}
	w.swept.Add(float64(published))
	if published > 0 {
		w.log.Info("released idle places", zap.String("item", item), zap.Int("places", published), zap.Int64("idleTimeoutSeconds", idleSeconds))
	}
	if err := w.s.line.Forget(ctx, item, forget); err != nil {
		return published, err
	}
	return published, perr
}
