// Package waitroomgin is waitroomkit's middleware for gin, in a module of its
// own so that net/http users of waitroomkit never pull gin.
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
