package waitroomkit_test

import (
	"context"
	"errors"
	"log"
	"net/http"
	"os"

	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// A shop whose checkout only admitted people reach, and whose "buy" frees
// the place for the next in line.
func Example() {
	kit, err := waitroomkit.New("https://queue.example.com")
	if err != nil {
		log.Fatal(err)
	}
	defer kit.Close()
	kit.Start(context.Background()) // keys fetched now and kept fresh, so no visitor waits for them
	protect := kit.Protect(waitroomkit.ItemFromPath("itemId"))
	mux := http.NewServeMux()
	mux.Handle("GET /shop/{itemId}", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := waitroomkit.FromContext(r.Context())
		_, _ = w.Write([]byte("checkout for " + a.UserID))
	})))
	mux.Handle("POST /shop/{itemId}/buy", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, _ := waitroomkit.FromContext(r.Context())
		log.Printf("order of %s for %s", a.UserID, a.ItemID) // place the order here
		if _, err := kit.CompleteRequest(w, r); errors.Is(err, waitroomkit.ErrEnded) {
			http.Error(w, "your admission has ended", http.StatusGone)
			return
		}
		_, _ = w.Write([]byte("ordered"))
	})))
	_ = http.ListenAndServe("127.0.0.1:8443", mux) // not run by the example
}

// A shop whose visitors log in: the redirect to the waiting page carries a
// signed assertion of who they are, so waitroom registers them under the
// site's own user id.
func ExampleWithAssertions() {
	secret := []byte(os.Getenv("SHOP_ASSERTION_SECRET")) // ≥ 32 bytes, also set on waitroom
	asserter, err := waitroomkit.NewAsserter("shop.example.com", secret)
	if err != nil {
		log.Fatal(err)
	}
	kit, err := waitroomkit.New("https://queue.example.com",
		waitroomkit.WithAssertions(asserter, func(r *http.Request) (string, bool) {
			c, err := r.Cookie("shop_user") // the site's own session lookup goes here
			if err != nil {
				return "", false // anonymous: the plain waiting page
			}
			return c.Value, true
		}))
	if err != nil {
		log.Fatal(err)
	}
	defer kit.Close()
	_ = kit.Protect(waitroomkit.ItemFromPath("itemId"))
}
