package waitroomkit_test

import (
	"errors"
	"log"
	"net/http"

	"github.com/waitroom/waitroom/kit/go/waitroomkit"
)

// A shop whose checkout only admitted people reach, and whose "buy" frees
// the place for the next in line.
func Example() {
	kit, err := waitroomkit.New("https://queue.example.com")
	if err != nil {
		log.Fatal(err)
	}
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
