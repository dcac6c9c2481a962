package httpretry

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"
)

// TestTrailersReachTheCallerWhenBaseClones: the response to a clone Base
// sent of its own (otelhttp does) comes back as a copy naming the caller's
// request, and the trailers net/http sets on Base's response as its body
// ends (one the server did not announce, over HTTP/1.1 and HTTP/2 alike)
// never reached the copy (a review's find).
func TestTrailersReachTheCallerWhenBaseClones(t *testing.T) {
	for _, h2 := range []bool{false, true} {
		t.Run(map[bool]string{false: "HTTP/1.1", true: "HTTP/2"}[h2], func(t *testing.T) {
			srv := startServer(t, h2, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, "hello")
				w.(http.Flusher).Flush()                         // chunked, so that HTTP/1.1 carries a trailer
				w.Header().Set(http.TrailerPrefix+"X-Sum", "42") // not announced
			}))
			inner := srv.Client().Transport
			cloning := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				return inner.RoundTrip(r.Clone(r.Context()))
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a guard, never reached
			defer cancel()
			get := func(rt http.RoundTripper) (trailer string, named bool) {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
				resp, err := rt.RoundTrip(req)
				if err != nil {
					t.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.Trailer.Get("X-Sum"), resp.Request == req
			}
			plain, _ := get(cloning)
			through, named := get(&Transport{Base: cloning})
			if plain != "42" || through != plain || !named {
				t.Errorf("trailer X-Sum: through httpretry %q (naming the caller's request: %v), through Base alone %q; want \"42\" both, named", through, named, plain)
			}
		})
	}
}
