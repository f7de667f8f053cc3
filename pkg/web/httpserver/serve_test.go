package httpserver_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/foundation/config"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"go.uber.org/zap"
)

const readTimeout = 300 * time.Millisecond

// outlive answers after waiting three read timeouts, or says its request was
// cancelled first: a handler that outlives the read deadline (a stream, a
// profile, a slow answer). A POST's body is read first.
func outlive(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(w, "streaming\n")
	http.NewResponseController(w).Flush()
	select {
	case <-r.Context().Done():
		_, _ = io.WriteString(w, "cancelled\n")
	case <-time.After(3 * readTimeout):
		_, _ = io.WriteString(w, "done\n")
	}
}

// serve runs Serve with short read timeouts on a free port until the test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	return serveH2C(t, h, 0, "")
}

// serveH2C runs Serve as serve does, with h2c streams a connection (0:
// HTTP/1.1 alone) served by server (config.H2CNet or config.H2COwn).
func serveH2C(t *testing.T, h http.Handler, h2cStreams int, server string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	// The drain outlasts what it waits for: outlive's 900 ms (a request an
	// HTTP/1.1 server took for one, such as an HTTP/2 preface, runs it), and
	// an HTTP/2 connection, which net/http closes up to 1 s after its GOAWAY.
	// A 1 s drain raced them and lost on a loaded CI machine.
	cfg := config.HTTP{ShutdownTimeout: 5 * time.Second, ReadHeaderTimeout: readTimeout, ReadTimeout: 2 * readTimeout, H2CMaxStreams: h2cStreams, H2CServer: server}
	go func() { done <- httpserver.Serve(ctx, ln, h, cfg, zap.NewNop()) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return ln.Addr().String()
}

// rawConn dials addr with a generous deadline: a read that reaches it means
// the server kept a stalled client.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	return c
}

func TestServeDropsAClientThatTricklesItsHeaders(t *testing.T) {
	addr := serve(t, http.HandlerFunc(outlive))
	c := rawConn(t, addr)
	_, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n") // and never the blank line
	require.NoError(t, err)
	_, err = io.ReadAll(c)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "the server still holds the connection: %v", err)
}

func TestServeDropsAClientThatTricklesItsBody(t *testing.T) {
	got := make(chan error, 1)
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		got <- err
	}))
	c := rawConn(t, addr)
	_, err := io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhalf.") // 5 of 10 bytes
	require.NoError(t, err)
	select {
	case err := <-got:
		var ne net.Error
		require.True(t, errors.As(err, &ne) && ne.Timeout(), "the body read ends with the read deadline: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the handler is still reading a stalled body")
	}
}

// The read deadline ends once the request is read: a stream or a long answer,
// with or without a body, runs to its end (the notifier's event streams last
// minutes).
func TestServeLetsAnswersOutliveTheReadTimeout(t *testing.T) {
	base := "http://" + serve(t, http.HandlerFunc(outlive))
	assert.Equal(t, "streaming\ndone\n", get(t, base, ""), "GET")
	assert.Equal(t, "streaming\ndone\n", get(t, base, `{"a":1}`), "POST with a body")
	assert.Equal(t, "streaming\ndone\n", get(t, base, ""), "the next request on the kept-alive connection")
}

// get GETs url (POSTs body when there is one) and returns the answer's body.
func get(t *testing.T, url, body string) string {
	t.Helper()
	method, rd := http.MethodGet, io.Reader(nil)
	if body != "" {
		method, rd = http.MethodPost, strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		fmt.Fprintln(&b, sc.Text())
	}
	return b.String()
}

// h2cClient speaks cleartext HTTP/2 alone (prior knowledge), as a front door
// does to its upstream.
func h2cClient(t *testing.T) *http.Client {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: p}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// h2cMaxStreams sends the HTTP/2 preface and an empty SETTINGS frame on a raw
// connection to addr and returns SETTINGS_MAX_CONCURRENT_STREAMS from the
// server's first frame (its SETTINGS), or an error when it answers otherwise.
func h2cMaxStreams(t *testing.T, addr string) (uint32, error) {
	c := rawConn(t, addr)
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00"); err != nil {
		return 0, fmt.Errorf("write the preface: %w", err)
	}
	var head [9]byte
	if _, err := io.ReadFull(c, head[:]); err != nil {
		return 0, fmt.Errorf("read the first frame: %w", err)
	}
	n := int(head[0])<<16 | int(head[1])<<8 | int(head[2])
	if head[3] != 0x4 || n%6 != 0 { // not SETTINGS (an HTTP/1.1 answer, say)
		return 0, fmt.Errorf("first frame %q is no SETTINGS", head[:])
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return 0, fmt.Errorf("read the settings: %w", err)
	}
	for i := 0; i < n; i += 6 {
		if id := uint16(body[i])<<8 | uint16(body[i+1]); id == 0x3 { // SETTINGS_MAX_CONCURRENT_STREAMS
			return uint32(body[i+2])<<24 | uint32(body[i+3])<<16 | uint32(body[i+4])<<8 | uint32(body[i+5]), nil
		}
	}
	return 0, errors.New("no SETTINGS_MAX_CONCURRENT_STREAMS")
}

// With H2CMaxStreams the listener also speaks cleartext HTTP/2, announces
// that bound on every connection, and its answers outlive the read timeout
// as HTTP/1.1's do; without it, HTTP/1.1 alone.
func TestServeSpeaksH2CWithItsStreamBound(t *testing.T) {
	for _, server := range []string{config.H2CNet, config.H2COwn} {
		t.Run(server, func(t *testing.T) { testServeSpeaksH2CWithItsStreamBound(t, server) })
	}
}

func testServeSpeaksH2CWithItsStreamBound(t *testing.T, server string) {
	addr := serveH2C(t, http.HandlerFunc(outlive), 3, server)
	n, err := h2cMaxStreams(t, addr)
	require.NoError(t, err)
	assert.Equal(t, uint32(3), n)
	resp, err := h2cClient(t).Get("http://" + addr)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, 2, resp.ProtoMajor)
	assert.Equal(t, "streaming\ndone\n", string(b))
	assert.Equal(t, "streaming\ndone\n", get(t, "http://"+addr, ""), "HTTP/1.1 beside it")

	off := serve(t, http.HandlerFunc(outlive))
	_, err = h2cMaxStreams(t, off)
	assert.Error(t, err, "HTTP/1.1 alone")
	_, err = h2cClient(t).Get("http://" + off)
	assert.Error(t, err, "HTTP/1.1 alone")
}
