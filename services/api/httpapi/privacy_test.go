package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/waitroom/waitroom/services/api/httpapi"
	"github.com/waitroom/waitroom/topics"
)

// A registration record keeps the client's network (/24, /48), never its
// address: Kafka cannot erase one record, so the address is never written.
// The user agent is kept (abuse review); blocks and throttles judge the live
// address, not the record (TestBlockedAddressHonoursTrustedProxies).
func TestRegistrationRecordKeepsTheNetworkNotTheAddress(t *testing.T) {
	s := newAPIWith(t, func(c *httpapi.Config) {
		c.TrustedProxies = []string{"127.0.0.1"} // a front door names each client in X-Forwarded-For
	}, item("drop"))
	want := map[string]string{ // userId -> the address it comes from, then the network kept
		"v4": "203.0.113.77", "v6": "2001:db8:1234:5678::1", "mapped": "::ffff:198.51.100.9",
	}
	kept := map[string]string{"v4": "203.0.113.0/24", "v6": "2001:db8:1234::/48", "mapped": "198.51.100.0/24"}
	for user, ip := range want {
		b, _ := json.Marshal(map[string]string{"userId": user})
		a := s.do(http.MethodPost, "/api/v1/items/drop/registrations", b,
			"X-Forwarded-For", ip, "User-Agent", "TestAgent/1.0", "Content-Type", "application/json")
		require.Equal(t, http.StatusAccepted, a.Code, "%s: %s", user, a.Body)
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(s.brokers...), kgo.ConsumeTopics(topics.Registrations),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := map[string]*topics.ClientMeta{}
	for len(got) < len(want) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			ev, err := topics.DecodeRegistration(r.Value)
			require.NoError(t, err)
			if _, ok := want[ev.UserID]; !ok {
				return
			}
			for _, ip := range want {
				assert.False(t, bytes.Contains(r.Value, []byte(ip)), "the record of %s holds the address %s: %s", ev.UserID, ip, r.Value)
			}
			got[ev.UserID] = ev.Client
		})
	}
	require.Len(t, got, len(want), "every registration on the topic")
	for user, c := range got {
		require.NotNil(t, c, user)
		assert.Equal(t, kept[user], c.IP, user)
		assert.Equal(t, "TestAgent/1.0", c.UserAgent, user)
	}
}
