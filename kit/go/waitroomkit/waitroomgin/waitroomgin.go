// Package waitroomgin is waitroomkit's middleware for gin. It lives in the
// waitroomkit module, so a shop imports one module with no replace; a
// net/http user that never imports this package never compiles gin (only
// gin's go.mod enters its module graph).
//
//	kit, err := waitroomkit.New("https://queue.example.com")
//	shop := r.Group("/shop/:itemId", waitroomgin.Protect(kit, "itemId"))
package waitroomgin

import (
	"net/http"

	"github.com/gin-gonic/gin"
	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// Protect lets a request through only with a live admission token for the
// item named by the path parameter param (see waitroomkit.Kit.Protect); the
// rest is answered (a redirect to the waiting page) and aborted.
// waitroomkit.FromContext(c.Request.Context()) gives the admission.
func Protect(k *waitroomkit.Kit, param string) gin.HandlerFunc {
	return func(c *gin.Context) {
		passed := false
		next := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
			passed = true
			c.Request = r
			c.Next()
		})
		k.Protect(func(*http.Request) string { return c.Param(param) })(next).ServeHTTP(c.Writer, c.Request)
		if !passed {
			c.Abort()
		}
	}
}

// Admission is the admission Protect let c through with.
func Admission(c *gin.Context) (waitroomkit.Admission, bool) {
	return waitroomkit.FromContext(c.Request.Context())
}
