package sse

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/grafana/sobek"
	"go.k6.io/k6/js/common"
	"go.k6.io/k6/js/modules"
	"go.k6.io/k6/lib"
	"go.k6.io/k6/metrics"
)

// init registers the module, as every xk6 extension does: k6 finds extensions
// only through this side effect of the blank import in the k6 main package.
func init() {
	modules.Register("k6/x/sse", New())
}

// Defaults of sse.listen.
const (
	DefaultTimeout   = 60 * time.Second
	DefaultMaxEvents = 10000
	DefaultMaxLine   = 1 << 20
	maxErrorBody     = 4 << 10
)

// Why listen stopped, as result.reason.
const (
	ReasonUntil       = "until"       // an event named in options.until arrived
	ReasonStopped     = "stopped"     // options.onEvent returned true
	ReasonMaxEvents   = "max_events"  // options.maxEvents events arrived
	ReasonEOF         = "eof"         // the server ended the stream
	ReasonTimeout     = "timeout"     // options.timeout ran out
	ReasonInterrupted = "interrupted" // the VU was stopped (end of the test, gracefulStop)
	ReasonStatus      = "status"      // the answer was not 200
	ReasonContentType = "content_type"
	ReasonError       = "error" // a connection or read error
)

// RootModule is the global module object; k6 makes one ModuleInstance per VU.
type RootModule struct{}

// New returns the root module of k6/x/sse.
func New() *RootModule { return &RootModule{} }

var _ modules.Module = (*RootModule)(nil)

// NewModuleInstance is called once per VU, in its init context, where the
// metrics are registered (the registry returns the same metric to every VU).
func (*RootModule) NewModuleInstance(vu modules.VU) modules.Instance {
	m, err := newSSEMetrics(vu.InitEnv().Registry)
	if err != nil {
		common.Throw(vu.Runtime(), err)
	}
	return &ModuleInstance{vu: vu, metrics: m}
}

// ModuleInstance is k6/x/sse as one VU sees it.
type ModuleInstance struct {
	vu      modules.VU
	metrics *sseMetrics
}

// Exports lists what a script imports: listen.
func (mi *ModuleInstance) Exports() modules.Exports {
	return modules.Exports{Named: map[string]any{"listen": mi.Listen}}
}

type sseMetrics struct {
	events      *metrics.Metric // sse_event_count
	firstEvent  *metrics.Metric // sse_time_to_first_event
	connecting  *metrics.Metric // sse_connecting
	duration    *metrics.Metric // sse_listen_duration
	failed      *metrics.Metric // sse_failed
	listenCount *metrics.Metric // sse_listens
}

func newSSEMetrics(r *metrics.Registry) (*sseMetrics, error) {
	var errs []error
	reg := func(name string, t metrics.MetricType, v ...metrics.ValueType) *metrics.Metric {
		m, err := r.NewMetric(name, t, v...)
		errs = append(errs, err)
		return m
	}
	m := &sseMetrics{
		events:      reg("sse_event_count", metrics.Counter),
		firstEvent:  reg("sse_time_to_first_event", metrics.Trend, metrics.Time),
		connecting:  reg("sse_connecting", metrics.Trend, metrics.Time),
		duration:    reg("sse_listen_duration", metrics.Trend, metrics.Time),
		failed:      reg("sse_failed", metrics.Rate),
		listenCount: reg("sse_listens", metrics.Counter),
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("k6/x/sse metrics: %w", err)
	}
	return m, nil
}

// options are the second argument of sse.listen.
type options struct {
	headers     http.Header
	timeout     time.Duration
	until       map[string]bool
	lastEventID string
	maxEvents   int
	maxLine     int
	onEvent     sobek.Callable
	tags        map[string]string
}

func (mi *ModuleInstance) parseOptions(v sobek.Value) (options, error) {
	o := options{headers: http.Header{}, timeout: DefaultTimeout, maxEvents: DefaultMaxEvents,
		maxLine: DefaultMaxLine, until: map[string]bool{}, tags: map[string]string{}}
	if common.IsNullish(v) {
		return o, nil
	}
	rt := mi.vu.Runtime()
	obj := v.ToObject(rt)
	for _, k := range obj.Keys() {
		f := obj.Get(k)
		if common.IsNullish(f) {
			continue
		}
		switch k {
		case "headers", "tags":
			h := f.ToObject(rt)
			for _, name := range h.Keys() {
				if k == "headers" {
					o.headers.Set(name, h.Get(name).String())
				} else {
					o.tags[name] = h.Get(name).String()
				}
			}
		case "timeout":
			d, err := duration(f)
			if err != nil {
				return o, fmt.Errorf("options.timeout: %w", err)
			}
			o.timeout = d
		case "until":
			var names []string
			if err := rt.ExportTo(f, &names); err != nil {
				return o, fmt.Errorf("options.until must be an array of event names: %w", err)
			}
			for _, n := range names {
				o.until[n] = true
			}
		case "lastEventId":
			o.lastEventID = f.String()
		case "maxEvents", "maxLineBytes":
			n := f.ToInteger()
			if n <= 0 {
				return o, fmt.Errorf("options.%s must be positive, got %v", k, f)
			}
			if k == "maxEvents" {
				o.maxEvents = int(n)
			} else {
				o.maxLine = int(n)
			}
		case "onEvent":
			fn, ok := sobek.AssertFunction(f)
			if !ok {
				return o, errors.New("options.onEvent must be a function")
			}
			o.onEvent = fn
		default:
			return o, fmt.Errorf("unknown option %q", k)
		}
	}
	return o, nil
}

// duration reads a number of milliseconds or a Go duration string ("60s").
func duration(v sobek.Value) (time.Duration, error) {
	var d time.Duration
	switch x := v.Export().(type) {
	case int64:
		d = time.Duration(x) * time.Millisecond
	case float64:
		d = time.Duration(x * float64(time.Millisecond))
	case string:
		var err error
		if d, err = time.ParseDuration(x); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("want milliseconds or a duration string, got %v", v)
	}
	if d <= 0 {
		return 0, fmt.Errorf("must be positive, got %v", v)
	}
	return d, nil
}

// Listen opens url as an event stream and blocks the VU until an event named
// in options.until arrives, options.onEvent returns true, the server ends the
// stream, options.maxEvents events arrived, or options.timeout (default 60s)
// runs out. It never throws for what the network or the server did: the
// result says it (status, error, reason), so a script can fall back. It
// throws for bad options, outside a VU, and when onEvent throws.
//
// The result: {status, reason, error, body (non-200 only), events:[{id, name,
// data, at, elapsed, retry}], last, duration, connecting, firstEvent,
// lastEventId, retry, comments}; times are milliseconds, at is a Unix time in
// milliseconds (comparable with Date.now()). Every event is kept (bounded by
// maxEvents), so a long stream costs memory in the VU.
func (mi *ModuleInstance) Listen(url string, opts sobek.Value) (*sobek.Object, error) {
	rt := mi.vu.Runtime()
	state := mi.vu.State()
	if state == nil {
		return nil, errors.New("sse.listen is only available in default, setup and teardown, not in the init context")
	}
	o, err := mi.parseOptions(opts)
	if err != nil {
		return nil, err
	}
	tm := state.Tags.GetCurrentValues()
	for k, v := range o.tags {
		tm.SetTag(k, v)
	}
	l := &listener{mi: mi, rt: rt, state: state, opts: o, tags: tm, vuCtx: mi.vu.Context()}
	return l.run(url)
}

// listener is one sse.listen call.
type listener struct {
	mi    *ModuleInstance
	rt    *sobek.Runtime
	state *lib.State
	opts  options
	tags  metrics.TagsAndMeta
	vuCtx context.Context

	start  time.Time
	result *sobek.Object

	// What the call found, written into result at its end.
	events     []any
	n          int
	first      sobek.Value
	last       sobek.Value
	lastID     string
	connecting sobek.Value
	status     int
	reason     string
	errText    string
	dec        *Decoder
}

func (l *listener) run(url string) (*sobek.Object, error) {
	l.result = l.rt.NewObject()
	l.start = time.Now()
	ctx, cancel := context.WithTimeout(l.vuCtx, l.opts.timeout)
	defer cancel()

	l.first, l.last, l.connecting = sobek.Null(), sobek.Null(), sobek.Null()
	l.lastID = l.opts.lastEventID // as in a browser, it persists until an event changes it
	defer l.finish()

	resp := l.open(ctx, url)
	if resp == nil {
		return l.result, nil
	}
	defer func() { _ = resp.Body.Close() }()
	return l.read(ctx, resp.Body)
}

// finish writes what the call found into its result and pushes the
// listen's metrics.
func (l *listener) finish() {
	set := func(k string, v any) { _ = l.result.Set(k, v) }
	elapsed := time.Since(l.start)
	set("status", l.status)
	set("reason", l.reason)
	if l.errText != "" {
		set("error", l.errText)
	} else {
		set("error", sobek.Null())
	}
	set("events", l.rt.NewArray(l.events...))
	set("last", l.last)
	set("duration", ms(elapsed))
	set("connecting", l.connecting)
	set("firstEvent", l.first)
	set("lastEventId", l.lastID)
	set("retry", sobek.Null())
	set("comments", 0)
	if l.dec != nil {
		set("comments", l.dec.Comments())
		if r := l.dec.Retry(); r > 0 {
			set("retry", ms(r))
		}
	}
	failed := l.reason == ReasonError || l.reason == ReasonStatus || l.reason == ReasonContentType
	l.push(l.mi.metrics.duration, ms(elapsed), nil)
	l.push(l.mi.metrics.failed, boolf(failed), nil)
	l.push(l.mi.metrics.listenCount, 1, nil)
}

// open sends the request and returns the response when it is an event
// stream; otherwise nil, with the reason (and a non-200's body) noted.
func (l *listener) open(ctx context.Context, url string) *http.Response {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		l.reason, l.errText = ReasonError, err.Error()
		return nil
	}
	req.Header = l.opts.headers.Clone()
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Cache-Control", "no-cache")
	if l.opts.lastEventID != "" {
		req.Header.Set("Last-Event-ID", l.opts.lastEventID)
	}
	client := &http.Client{Transport: l.state.Transport}
	resp, err := client.Do(req)
	if err != nil {
		l.reason, l.errText = l.classify(ctx, err), err.Error()
		return nil
	}
	l.status = resp.StatusCode
	connecting := time.Since(l.start)
	l.connecting = l.rt.ToValue(ms(connecting))
	l.push(l.mi.metrics.connecting, ms(connecting), nil)
	if l.status != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		_ = resp.Body.Close()
		_ = l.result.Set("body", string(b))
		l.reason, l.errText = ReasonStatus, fmt.Sprintf("unexpected status %d", l.status)
		return nil
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		_ = resp.Body.Close()
		l.reason, l.errText = ReasonContentType, fmt.Sprintf("unexpected content type %q", ct)
		return nil
	}
	return resp
}

// read decodes the stream's events until one of the ends Listen names.
func (l *listener) read(ctx context.Context, body io.Reader) (*sobek.Object, error) {
	l.dec = NewDecoder(body, l.opts.maxLine)
	l.dec.lastID = l.lastID
	for {
		ev, err := l.dec.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				l.reason = ReasonEOF
			} else {
				l.reason, l.errText = l.classify(ctx, err), err.Error()
			}
			return l.result, nil
		}
		stop, err := l.event(ev)
		if err != nil {
			return nil, err // the script's own exception, thrown on
		}
		if stop {
			return l.result, nil
		}
	}
}

// event records ev and says whether the listen ends with it (the reason
// noted); an error is onEvent's exception.
func (l *listener) event(ev Event) (bool, error) {
	now := time.Now()
	elapsed := now.Sub(l.start)
	if l.n == 0 {
		l.first = l.rt.ToValue(ms(elapsed))
		l.push(l.mi.metrics.firstEvent, ms(elapsed), nil)
	}
	l.n++
	l.push(l.mi.metrics.events, 1, map[string]string{"event": ev.Name})
	l.lastID = ev.ID
	obj := l.eventObject(ev, now, elapsed)
	l.last = obj
	l.events = append(l.events, obj)
	if l.opts.onEvent != nil {
		ret, err := l.opts.onEvent(sobek.Undefined(), obj)
		if err != nil {
			l.reason = ReasonError
			return true, err
		}
		if ret.StrictEquals(l.rt.ToValue(true)) {
			l.reason = ReasonStopped
			return true, nil
		}
	}
	switch {
	case l.opts.until[ev.Name]:
		l.reason = ReasonUntil
		return true, nil
	case l.n >= l.opts.maxEvents:
		l.reason = ReasonMaxEvents
		return true, nil
	}
	return false, nil
}

// classify tells a timeout and the end of the VU from other errors.
func (l *listener) classify(ctx context.Context, err error) string {
	switch {
	case l.vuCtx.Err() != nil:
		return ReasonInterrupted
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		return ReasonTimeout
	default:
		return ReasonError
	}
}

func (l *listener) eventObject(ev Event, at time.Time, elapsed time.Duration) *sobek.Object {
	o := l.rt.NewObject()
	_ = o.Set("id", ev.ID)
	_ = o.Set("name", ev.Name)
	_ = o.Set("data", ev.Data)
	_ = o.Set("at", float64(at.UnixMicro())/1000)
	_ = o.Set("elapsed", ms(elapsed))
	if ev.Retry > 0 {
		_ = o.Set("retry", ms(ev.Retry))
	} else {
		_ = o.Set("retry", sobek.Null())
	}
	return o
}

func (l *listener) push(m *metrics.Metric, v float64, extra map[string]string) {
	tags := l.tags.Tags
	for k, val := range extra {
		tags = tags.With(k, val)
	}
	metrics.PushIfNotDone(l.vuCtx, l.state.Samples, metrics.Sample{
		TimeSeries: metrics.TimeSeries{Metric: m, Tags: tags},
		Time:       time.Now(),
		Metadata:   l.tags.Metadata,
		Value:      v,
	})
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func boolf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
