package httpapi

import (
	"github.com/gin-gonic/gin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/waitroom/waitroom/pkg/domain/registration"
	"github.com/waitroom/waitroom/pkg/web/httpserver"
	"github.com/waitroom/waitroom/topics"
)

// Blocks is the operator's block list in memory (*blocklist.List): a check
// costs no Redis call.
type Blocks interface {
	// Check returns the block refusing userID ("" for none) from ip.
	Check(userID, ip string) (topics.BlockState, bool)
	// User returns the block on userID.
	User(userID string) (topics.BlockState, bool)
}

// blockGate refuses blocked users and addresses, and counts them.
type blockGate struct {
	list    Blocks
	refused *prometheus.CounterVec
}

func newBlockGate(list Blocks, reg prometheus.Registerer) *blockGate {
	if list == nil {
		return nil
	}
	g := &blockGate{list: list, refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "waitroom_api_blocked_total",
		Help: "Requests refused BLOCKED by an operator's block, by route (register, status, admission: verify and complete)."}, []string{"route"})}
	reg.MustRegister(g.refused)
	return g
}

// register refuses a registration of userID from ip, the request's client
// address (gin's ClientIP: X-Forwarded-For only from WR_TRUSTED_PROXIES),
// with 403 BLOCKED; false when it did.
func (g *blockGate) register(c *gin.Context, userID, ip string) bool {
	if g == nil {
		return true
	}
	if b, ok := g.list.Check(userID, ip); ok {
		g.refused.WithLabelValues("register").Inc()
		httpserver.Abort(c, registration.Blocked(b))
		return false
	}
	return true
}

// user returns the block on userID, counting it under route.
func (g *blockGate) user(route, userID string) (topics.BlockState, bool) {
	if g == nil {
		return topics.BlockState{}, false
	}
	b, ok := g.list.User(userID)
	if ok {
		g.refused.WithLabelValues(route).Inc()
	}
	return b, ok
}
