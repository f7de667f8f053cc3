package httpapi_test

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
)

// A body that breaks mid-way (here a chunk whose length is no number) is
// 400 INVALID_BODY on every route that reads one, never 413 BODY_TOO_LARGE:
// it was not too large, and a client told so would shrink a body that was
// fine.
func TestABrokenBodyIsInvalidNotTooLarge(t *testing.T) {
	e := newAPI(t, item("tix"))
	host := strings.TrimPrefix(e.url, "http://")
	for _, path := range []string{"/api/v1/items/tix/registrations", "/api/v1/admissions/verify", "/api/v1/admissions/complete"} {
		c, err := net.Dial("tcp", host)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = io.WriteString(c, "POST "+path+" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+
			"5\r\n{\"ite\r\nZZ\r\n")
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		require.NoError(t, err, path)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		resp.Body.Close()
		c.Close()
		a := answer{Code: resp.StatusCode, Body: b}
		assert.Equal(t, http.StatusBadRequest, a.Code, "%s: %s", path, b)
		assert.Equal(t, "INVALID_BODY", a.errCode(t), path)
		var body httpserver.ErrorBody
		a.decode(t, &body)
		assert.NotEmpty(t, body.Error.Message, path)
	}
}
