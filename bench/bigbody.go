package bench

import (
	"context"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sync/atomic"
	"time"
)

// BigBodySize is the body of the large-body measurement: far over
// httpretry's 1 MiB buffer limit, so a retrying transport that buffers
// whole bodies shows it.
const BigBodySize = 64 << 20

// Alloc is what one measured call allocated.
type Alloc struct {
	// Total is the bytes allocated during the call.
	Total uint64
	// Peak is the highest heap in use during the call, above the heap
	// in use before it, sampled every few hundred microseconds.
	Peak uint64
}

// PostBig POSTs size bytes from a PatternReader to url through rt, the
// body of a plain reader with neither GetBody nor a length, and checks
// for 200.
func PostBig(rt http.RoundTripper, url string, size int64) error {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, io.NopCloser(&PatternReader{N: size}))
	if err != nil {
		return err
	}
	return consume(rt.RoundTrip(req))
}

// MeasureAlloc runs f and reports its allocations. It is meant for a
// process of its own: other goroutines allocating meanwhile count too.
func MeasureAlloc(f func() error) (Alloc, error) {
	runtime.GC()
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	base := heap()

	var peak atomic.Uint64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(200 * time.Microsecond)
		defer tick.Stop()
		for {
			if h := heap(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	err := f()
	close(done)
	<-sampled

	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	a := Alloc{Total: after.TotalAlloc - before.TotalAlloc}
	if p := peak.Load(); p > base {
		a.Peak = p - base
	}
	return a, err
}

// DiscardServer is a handler that reads a request body to EOF and answers
// 200: the large-body measurement's server.
var DiscardServer = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	w.WriteHeader(http.StatusOK)
})
