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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	cfg := config.HTTP{ShutdownTimeout: time.Second, ReadHeaderTimeout: readTimeout, ReadTimeout: 2 * readTimeout}
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
