package h2c_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/web/h2c"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// start serves s on a loopback port, its HTTP/1.x connections by net/http
// with the same handler, until the test ends; it returns the address.
func start(t *testing.T, s *h2c.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: s.Handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(s.Split(ln)) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = hs.Shutdown(ctx)
		_ = s.Shutdown(ctx)
	})
	return ln.Addr().String()
}

// client speaks cleartext HTTP/2 alone, as a front door does to its upstream.
func client(t *testing.T) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// hello answers its route as JSON, echoing what the request carried.
func hello(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]string{"path": r.URL.Path, "query": r.URL.RawQuery,
		"remote": r.RemoteAddr, "proto": r.Proto, "cookie": r.Header.Get("Cookie"), "host": r.Host})
}

func getJSON(t *testing.T, cl *http.Client, url string) (int, int, map[string]string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Add("Cookie", "a=1")
	req.Header.Add("Cookie", "b=2")
	resp, err := cl.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return resp.StatusCode, resp.ProtoMajor, m
}

// A plain request is served over h2c as over HTTP/1.1, which the same
// listener still serves.
func TestServesARequestBesideHTTP1(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello), MaxStreams: 4})
	code, proto, m := getJSON(t, client(t), "http://"+addr+"/a/b?x=1")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, 2, proto)
	assert.Equal(t, "/a/b", m["path"])
	assert.Equal(t, "x=1", m["query"])
	assert.Equal(t, "HTTP/2.0", m["proto"])
	assert.Equal(t, addr, m["host"])
	assert.Equal(t, "a=1; b=2", m["cookie"])
	assert.True(t, strings.HasPrefix(m["remote"], "127.0.0.1:"), m["remote"])

	code, proto, m = getJSON(t, http.DefaultClient, "http://"+addr+"/h1")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, 1, proto, "HTTP/1.1 on the same listener")
	assert.Equal(t, "/h1", m["path"])
}

// A HEAD is answered with the GET's head and no body.
func TestHeadHasNoBody(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello)})
	r := dialRaw(t, addr)
	r.open(1, http.MethodHead, "/h", true)
	h := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	assert.Equal(t, "200", h.PseudoValue("status"))
	d := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	assert.True(t, d.StreamEnded())
	assert.Empty(t, d.Data())
}

// A request with a body is refused 413 with a JSON error.
func TestRefusesABody(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello)})
	resp, err := client(t).Post("http://"+addr+"/p", "application/json", strings.NewReader(`{"a":1}`))
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	assert.Equal(t, "application/json; charset=utf-8", resp.Header.Get("Content-Type"))
	var body struct {
		Error struct{ Code, Message string }
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "BODY_NOT_ALLOWED", body.Error.Code)
}

// raw is a client of frames, for what Go's client will not send.
type raw struct {
	t    *testing.T
	nc   net.Conn
	fr   *http2.Framer
	hbuf bytes.Buffer
	enc  *hpack.Encoder
}

func dialRaw(t *testing.T, addr string) *raw {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(nc, http2.ClientPreface)
	require.NoError(t, err)
	r := &raw{t: t, nc: nc, fr: http2.NewFramer(nc, nc)}
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.enc = hpack.NewEncoder(&r.hbuf)
	require.NoError(t, r.fr.WriteSettings())
	return r
}

// get opens stream id with a GET of path and extra header fields (name, value, ...).
func (r *raw) get(id uint32, path string, fields ...string) {
	r.t.Helper()
	r.open(id, http.MethodGet, path, true, fields...)
}

// open opens stream id with a request of method and path and extra header
// fields (name, value, ...); end: END_STREAM, no body follows.
func (r *raw) open(id uint32, method, path string, end bool, fields ...string) {
	r.t.Helper()
	r.hbuf.Reset()
	all := append([]string{":method", method, ":scheme", "http", ":authority", "x", ":path", path}, fields...)
	for i := 0; i < len(all); i += 2 {
		require.NoError(r.t, r.enc.WriteField(hpack.HeaderField{Name: all[i], Value: all[i+1]}))
	}
	require.NoError(r.t, r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hbuf.Bytes(), EndStream: end, EndHeaders: true}))
}

// until reads frames until match accepts one, and returns it.
func (r *raw) until(match func(http2.Frame) bool) http2.Frame {
	r.t.Helper()
	for {
		f, err := r.fr.ReadFrame()
		require.NoError(r.t, err)
		if match(f) {
			return f
		}
	}
}

// goAway reads frames until a GOAWAY, and then the connection's end.
func (r *raw) goAway() *http2.GoAwayFrame {
	r.t.Helper()
	f := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	for {
		if _, err := r.fr.ReadFrame(); err != nil {
			require.NotErrorIs(r.t, err, context.DeadlineExceeded)
			var ne net.Error
			require.False(r.t, errors.As(err, &ne) && ne.Timeout(), "the connection stayed open after GOAWAY")
			return f
		}
	}
}

// block holds its request until release closes or the request ends.
func block(release chan struct{}) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
}

// Past MaxStreams a stream is refused (REFUSED_STREAM) and the others go on.
func TestRefusesAStreamPastTheBound(t *testing.T) {
	release := make(chan struct{})
	addr := start(t, &h2c.Server{Handler: block(release), MaxStreams: 1})
	r := dialRaw(t, addr)
	r.get(1, "/one")
	r.until(func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == 1 })
	r.get(3, "/two")
	rst := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	assert.Equal(t, uint32(3), rst.StreamID)
	assert.Equal(t, http2.ErrCodeRefusedStream, rst.ErrCode)
	close(release)
	r.until(func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 1 && d.StreamEnded()
	})
	// DATA in flight to the refused stream: a stream error, not a connection error.
	require.NoError(t, r.fr.WriteData(3, true, []byte("late")))
	rst = r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	assert.Equal(t, uint32(3), rst.StreamID)
	assert.Equal(t, http2.ErrCodeStreamClosed, rst.ErrCode)
	r.get(5, "/three") // the slot came back
	r.until(func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == 5 })
}

// A request whose body is held for its first DATA (its 413 waits for it,
// to check its content-length) counts as an open stream, and gives its
// slot back when it is reset, by either side, with no handler run.
func TestAHeldBodyGivesItsSlotBack(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello), MaxStreams: 1})
	r := dialRaw(t, addr)
	isRST := func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }
	post := func(id uint32) { r.open(id, http.MethodPost, "/p", false, "content-length", "10") }
	post(1)
	r.get(3, "/full")
	rst := r.until(isRST).(*http2.RSTStreamFrame)
	assert.Equal(t, uint32(3), rst.StreamID)
	assert.Equal(t, http2.ErrCodeRefusedStream, rst.ErrCode)
	// Reset here: its send window past 2^31-1.
	require.NoError(t, r.fr.WriteWindowUpdate(1, 1<<31-1))
	rst = r.until(isRST).(*http2.RSTStreamFrame)
	assert.Equal(t, uint32(1), rst.StreamID)
	assert.Equal(t, http2.ErrCodeFlowControl, rst.ErrCode)
	// Reset by the client.
	post(5)
	require.NoError(t, r.fr.WriteRSTStream(5, http2.ErrCodeCancel))
	r.get(7, "/after")
	h := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	assert.Equal(t, uint32(7), h.StreamID)
	assert.Equal(t, "200", h.PseudoValue("status"))
}

// A body announced and never sent holds its slot for ReadHeaderTimeout at
// most: then the stream is reset (CANCEL) and the slot given back.
func TestABodyThatNeverComesIsReset(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello), MaxStreams: 1, ReadHeaderTimeout: 300 * time.Millisecond})
	r := dialRaw(t, addr)
	r.open(1, http.MethodPost, "/p", false, "content-length", "10")
	rst := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	assert.Equal(t, uint32(1), rst.StreamID)
	assert.Equal(t, http2.ErrCodeCancel, rst.ErrCode)
	r.get(3, "/after")
	h := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	assert.Equal(t, uint32(3), h.StreamID)
	assert.Equal(t, "200", h.PseudoValue("status"))
}

// Shutdown sends GOAWAY; the open stream goes on until it ends, then the
// connection closes; no new stream is taken meanwhile.
func TestShutdownGoesAwayThenDrains(t *testing.T) {
	release := make(chan struct{})
	s := &h2c.Server{Handler: block(release)}
	addr := start(t, s)
	r := dialRaw(t, addr)
	r.get(1, "/stream")
	r.until(func(f http2.Frame) bool { h, ok := f.(*http2.MetaHeadersFrame); return ok && h.StreamID == 1 })
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- s.Shutdown(ctx)
	}()
	ga := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	assert.Equal(t, http2.ErrCodeNo, ga.ErrCode)
	assert.Equal(t, uint32(1), ga.LastStreamID)
	select {
	case <-done:
		t.Fatal("Shutdown returned with a stream open")
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	r.until(func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 1 && d.StreamEnded()
	})
	require.NoError(t, <-done, "drained within the timeout")
	_, err := r.fr.ReadFrame()
	require.Error(t, err, "the connection closed")
}

// Shutdown past its context ends the streams that are left (their
// requests' contexts canceled).
func TestShutdownEndsWhatOutlivesTheDrain(t *testing.T) {
	ended := make(chan struct{})
	s := &h2c.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-r.Context().Done()
		close(ended)
	})}
	addr := start(t, s)
	r := dialRaw(t, addr)
	r.get(1, "/stream")
	r.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, s.Shutdown(ctx), context.DeadlineExceeded)
	<-ended
}

// A malformed frame is a connection error: GOAWAY PROTOCOL_ERROR, the
// connection closed, and the server serves the next one.
func TestBadFrameIsAConnectionError(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello)})
	r := dialRaw(t, addr)
	require.NoError(t, r.fr.WriteRawFrame(http2.FrameData, 0, 0, []byte("on stream 0"))) // DATA must have a stream
	assert.Equal(t, http2.ErrCodeProtocol, r.goAway().ErrCode)

	r = dialRaw(t, addr)
	require.NoError(t, r.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff}))
	require.NoError(t, r.fr.WriteRawFrame(http2.FrameWindowUpdate, 0, 0, []byte{0x7f, 0xff, 0xff, 0xff}))
	assert.Equal(t, http2.ErrCodeFlowControl, r.goAway().ErrCode, "the window past 2^31-1")

	code, _, _ := getJSON(t, client(t), "http://"+addr+"/after")
	assert.Equal(t, http.StatusOK, code)
}

// Headers past MaxHeaderListSize are answered 431; far past it, the
// connection is ended (the Framer stops decoding them).
func TestOversizedHeaders(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello), MaxHeaderListSize: 1024})
	r := dialRaw(t, addr)
	a := strings.Repeat("a", 400) // each under the bound, together past it
	r.get(1, "/big", "x-1", a, "x-2", a, "x-3", a)
	h := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }).(*http2.MetaHeadersFrame)
	assert.Equal(t, "431", h.PseudoValue("status"))
	d := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.DataFrame); return ok }).(*http2.DataFrame)
	assert.Contains(t, string(d.Data()), `"HEADERS_TOO_LARGE"`)

	r = dialRaw(t, addr)
	r.get(1, "/bigger", "x-big", strings.Repeat("a", 4000))
	assert.Equal(t, http2.ErrCodeProtocol, r.goAway().ErrCode)
}

// A client that pings past the flood bound is told ENHANCE_YOUR_CALM.
func TestPingFlood(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello)})
	r := dialRaw(t, addr)
	go func() {
		for i := range 500 {
			if r.fr.WritePing(false, [8]byte{byte(i)}) != nil {
				return
			}
		}
	}()
	assert.Equal(t, http2.ErrCodeEnhanceYourCalm, r.goAway().ErrCode)
}

// A connection without streams for IdleTimeout is closed (GOAWAY NO_ERROR).
func TestIdleConnectionCloses(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello), IdleTimeout: 200 * time.Millisecond})
	r := dialRaw(t, addr)
	r.get(1, "/once")
	r.until(func(f http2.Frame) bool { d, ok := f.(*http2.DataFrame); return ok && d.StreamEnded() })
	assert.Equal(t, http2.ErrCodeNo, r.goAway().ErrCode)
}

// A write that waits for the client's window longer than its
// SetWriteTimeout fails and resets its stream; an idle stream with the
// same bound is left alone.
func TestWriteTimeoutBoundsAWaitingWrite(t *testing.T) {
	errs := make(chan error, 2)
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(interface{ SetWriteTimeout(time.Duration) }).SetWriteTimeout(100 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
		if r.URL.Path == "/idle" {
			time.Sleep(300 * time.Millisecond) // idle past the bound, then a write that fits
			_, err := w.Write([]byte("ok"))
			errs <- err
			return
		}
		_, err := w.Write(bytes.Repeat([]byte("x"), 100)) // past the client's 10-byte window
		errs <- err
	})})
	r := dialRaw(t, addr)
	require.NoError(t, r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 10}))
	r.get(1, "/stuck")
	rst := r.until(func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	assert.Equal(t, uint32(1), rst.StreamID)
	assert.Equal(t, http2.ErrCodeCancel, rst.ErrCode)
	require.Error(t, <-errs, "the stuck write failed")

	r.get(3, "/idle")
	d := r.until(func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && d.StreamID == 3 && len(d.Data()) > 0
	}).(*http2.DataFrame)
	assert.Equal(t, "ok", string(d.Data()))
	require.NoError(t, <-errs, "the idle stream's write")
}

// A request body's DATA is given back to the client's window once per half
// a window taken, not frame by frame: a flood of small frames makes no
// answer of its own.
func TestSmallDataFramesAskNoAnswerEach(t *testing.T) {
	addr := start(t, &h2c.Server{Handler: http.HandlerFunc(hello)})
	r := dialRaw(t, addr)
	r.open(1, http.MethodPost, "/p", false)
	// updates counts the connection's WINDOW_UPDATEs up to the answer of a PING.
	updates := func(ping byte) (n int, inc uint32) {
		require.NoError(t, r.fr.WritePing(false, [8]byte{ping}))
		r.until(func(f http2.Frame) bool {
			if w, ok := f.(*http2.WindowUpdateFrame); ok && w.StreamID == 0 {
				n, inc = n+1, inc+w.Increment
			}
			p, ok := f.(*http2.PingFrame)
			return ok && p.IsAck() && p.Data[0] == ping
		})
		return n, inc
	}
	for range 1000 {
		require.NoError(t, r.fr.WriteData(1, false, []byte{'x'}))
	}
	n, _ := updates(1)
	assert.Zero(t, n, "1,000 bytes of body in 1,000 frames: no WINDOW_UPDATE yet")
	for _, k := range []int{16384, 16384} { // 33,768 taken in all: past half the window
		require.NoError(t, r.fr.WriteData(1, false, make([]byte, k)))
	}
	n, inc := updates(2)
	assert.Equal(t, 1, n)
	assert.Equal(t, uint32(1000+2*16384), inc)
}

// A client that makes the connection answer (here: streams refused past
// the bound) while it reads nothing is cut, ENHANCE_YOUR_CALM, before the
// answers queued for it pass twice MaxQueuedBytes and a header list.
func TestAClientThatDoesNotReadIsCut(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	addr := start(t, &h2c.Server{Handler: block(release), MaxStreams: 1, MaxQueuedBytes: 4096, MaxHeaderListSize: 4096})
	r := dialRaw(t, addr)
	r.get(1, "/held")
	sent := make(chan error, 1)
	go func() { // refused streams, 13 bytes of RST_STREAM each, until the server stops reading
		_ = r.nc.SetWriteDeadline(time.Now().Add(3 * time.Second))
		for id := uint32(3); id < 1<<22; id += 2 {
			r.hbuf.Reset()
			for _, f := range [][2]string{{":method", "GET"}, {":scheme", "http"}, {":authority", "x"}, {":path", "/r"}} {
				_ = r.enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.hbuf.Bytes(), EndStream: true, EndHeaders: true}); err != nil {
				sent <- err
				return
			}
		}
		sent <- nil
	}()
	require.Error(t, <-sent, "the server kept reading 2 million refused streams its client never read the answers of")
	assert.Equal(t, http2.ErrCodeEnhanceYourCalm, r.goAway().ErrCode)
}
