package httpapi

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/pkg/domain/line"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/security/token"
	"github.com/waitroom/waitroom/topics"
)

// autoPoll is how often a registration waiting for its auto admission reads
// its place: a few reads per tick of the scheduler (200 ms by default).
const autoPoll = 50 * time.Millisecond

// Outcomes of an auto registration (waitroom_api_auto_entries_total).
const (
	autoAdmitted = "admitted" // the room had room: admitted within the wait, no page
	autoLate     = "late"     // the room had room, yet the wait ended first: the page
	autoLine     = "line"     // a line had formed (or no room): the page at once
)

// hasRoom reports whether item, in mode auto, may let a newcomer straight
// through: admitting, nobody waiting, and fewer admitted than maxActive.
// A line, however short, means the newcomer goes behind it and waits on the
// page: nobody who arrives while people wait is told to skip the page,
// though the line's order alone decides who is admitted first either way.
// The item's counts come from the status reads' shared motion (at most
// MotionFresh old): a burst within that sees an empty line, and those of it
// the scheduler does not admit within AutoWait are sent to the page then.
func (s *Server) hasRoom(ctx context.Context, item string, it topics.ItemState) bool {
	if s.opt.AutoWait <= 0 || !it.Policy.Admitting() {
		return false
	}
	var m line.Motion
	if s.pos != nil {
		var ok bool
		if m, ok = s.pos.motion(ctx, item, s.pos.gen(item), s.now()); !ok {
			return false
		}
	} else {
		ctx, cancel := context.WithTimeout(ctx, s.opt.StatusTimeout)
		defer cancel()
		var err error
		if m, err = s.line.Motion(ctx, item); err != nil {
			return false
		}
	}
	return m.WaitingTotal == 0 && (it.Policy.MaxActive <= 0 || m.Active < it.Policy.MaxActive)
}

// awaitAdmission reads q's place every autoPoll until the scheduler admits
// it or AutoWait has passed (or ctx ends), and returns the admission: the
// line's own decision, read back, never one the api makes. ok is false when
// the place was not admitted in time (or cannot be read): the registration
// is answered QUEUED and waits on the page.
func (s *Server) awaitAdmission(ctx context.Context, q token.Queue) (registration.Answer, bool) {
	ctx, cancel := context.WithTimeout(ctx, s.opt.AutoWait)
	defer cancel()
	t := time.NewTicker(autoPoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return registration.Answer{}, false
		case <-t.C:
		}
		st, err := s.line.Status(ctx, q.ItemID, q.PlaceKey(), q.TokenID, q.Partition, q.Offset)
		if err != nil {
			return registration.Answer{}, false
		}
		it, known := s.items.Get(q.ItemID)
		a := registration.AnswerOf(st, registration.VerdictOf(it, known), s.now())
		switch {
		case a.Status == registration.StatusAdmitted:
			return a, true
		case a.Final():
			return registration.Answer{}, false
		}
	}
}

// admitted fills resp, the answer to q's registration, with its admission a.
func (s *Server) admitted(resp *RegisterResponse, q token.Queue, a registration.Answer) error {
	tok, err := s.admit.IssueAdmission(token.Admission{TokenID: q.TokenID, ItemID: q.ItemID, UserID: q.UserID, Holder: q.Holder, ExpiresAt: a.ExpiresAt})
	if err != nil {
		return err
	}
	resp.Status, resp.AdmissionToken = registration.StatusAdmitted, tok
	resp.ExpiresAt = a.ExpiresAt.UTC().Format(time.RFC3339Nano)
	return nil
}

func newAutoMetric(reg prometheus.Registerer) *prometheus.CounterVec {
	m := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "waitroom_api_auto_entries_total",
		Help: "Auto registrations (the kit's, items in mode auto) by outcome: admitted (no page), late (the wait ended first) or line (a line had formed).",
	}, []string{"outcome"})
	reg.MustRegister(m)
	return m
}
