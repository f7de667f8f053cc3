package httpapi_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/waitroom/waitroom/pkg/store/sitehealth"
	"github.com/waitroom/waitroom/services/api/httpapi"
)

const signalBody = `{"instance":"web-1","windowMs":2000,"boundsMs":[50,100,250],"counts":[10,5,4,1],"errors":1,"arrivals":3,"arrivalDelayMsSum":3000,"active":12}`

// A site posts its health with the install's signal token; the report is
// kept, stamped with the api's time, for the scheduler to read. Anything
// else is refused before it is stored.
func TestSignalIsAuthenticatedBoundedAndKept(t *testing.T) {
	a := newAPIWith(t, func(c *httpapi.Config) { c.SignalToken = "site-secret" }, item("sig"))
	auth := []string{"Authorization", "Bearer site-secret", "Content-Type", "application/json"}

	before := time.Now().UnixMilli()
	res := a.do(http.MethodPost, "/api/v1/items/sig/signal", []byte(signalBody), auth...)
	require.Equal(t, http.StatusNoContent, res.Code, "body %s", res.Body)
	rs, err := sitehealth.NewStore(a.rdb).Read(context.Background(), "sig", time.Now())
	require.NoError(t, err)
	require.Len(t, rs, 1)
	assert.Equal(t, int64(12), rs[0].Active)
	assert.GreaterOrEqual(t, rs[0].At, before, "stamped by the api")

	for _, tc := range []struct {
		name, body string
		hdr        []string
		code       int
		errCode    string
	}{
		{"no token", signalBody, nil, http.StatusUnauthorized, "UNAUTHORIZED"},
		{"wrong token", signalBody, []string{"Authorization", "Bearer site-secreT"}, http.StatusUnauthorized, "UNAUTHORIZED"},
		{"unknown field", `{"instance":"w","windowMs":2000,"counts":[1],"p95":3}`, auth, http.StatusBadRequest, "INVALID_JSON"},
		{"averaged percentile instead of buckets", `{"instance":"w","windowMs":2000,"counts":[]}`, auth, http.StatusBadRequest, "INVALID_SIGNAL"},
		{"too large", `{"instance":"` + strings.Repeat("w", sitehealth.MaxBodyBytes) + `"}`, auth, http.StatusRequestEntityTooLarge, "BODY_TOO_LARGE"},
	} {
		res := a.do(http.MethodPost, "/api/v1/items/sig/signal", []byte(tc.body), tc.hdr...)
		assert.Equal(t, tc.code, res.Code, "%s: %s", tc.name, res.Body)
		assert.Equal(t, tc.errCode, res.errCode(t), tc.name)
	}
	rs, err = sitehealth.NewStore(a.rdb).Read(context.Background(), "sig", time.Now())
	require.NoError(t, err)
	assert.Len(t, rs, 1, "nothing refused was kept")
}

func TestSignalIsOffWithoutAToken(t *testing.T) {
	a := newAPI(t, item("off"))
	res := a.do(http.MethodPost, "/api/v1/items/off/signal", []byte(signalBody), "Authorization", "Bearer ")
	assert.Equal(t, http.StatusConflict, res.Code)
	assert.Equal(t, "SIGNAL_DISABLED", res.errCode(t))
}
