//go:build linux

package httpretry

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestBodiesThatAreNotRegularFiles: a directory, /dev/null, a FIFO and a
// write-only file as a request's body, over the limit and with no limit:
// none but the write-only regular file is read at its offsets (its reads
// fail as its Read does); no panic, no hang, each closed once, as plain
// net/http closes it (a review's trial).
func TestBodiesThatAreNotRegularFiles(t *testing.T) {
	dir := t.TempDir()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	wo := filepath.Join(dir, "wo")
	os.WriteFile(wo, bytes.Repeat([]byte("w"), 4<<10), 0o600)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		regular bool
		open    func() (*os.File, error)
	}{
		{"directory", false, func() (*os.File, error) { return os.Open(dir) }},
		{"/dev/null", false, func() (*os.File, error) { return os.Open(os.DevNull) }},
		{"write-only", true, func() (*os.File, error) { return os.OpenFile(wo, os.O_WRONLY, 0) }},
		{"fifo", false, func() (*os.File, error) {
			go func() {
				if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
					w.Write(bytes.Repeat([]byte("f"), 4<<10))
					w.Close()
				}
			}()
			return os.OpenFile(fifo, os.O_RDONLY, 0)
		}},
	} {
		for _, limit := range []int64{1 << 10, -1} {
			t.Run(tc.name, func(t *testing.T) {
				f, err := tc.open()
				if err != nil {
					t.Fatal(err)
				}
				if src := offsetOf(f); (src.at != nil) != tc.regular {
					t.Errorf("%s taken as readable at its offsets: %v", tc.name, src.at != nil)
				}
				sf := &signalFile{File: f, closed: make(chan struct{})}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a bound on a hang, not a timing
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL, sf)
				resp, _ := (&Transport{Base: srv.Client().Transport, Policy: noWait, MaxBufferedBody: limit}).RoundTrip(req)
				if resp != nil {
					resp.Body.Close()
				}
				if !waitClosed(sf) || sf.closes.Load() != 1 {
					t.Errorf("limit %d: closed %d times, want once", limit, sf.closes.Load())
				}
			})
		}
	}
}

// TestProcFileBodySendsWhatNetHTTPSends: a procfs or sysfs file is
// regular with a size that says nothing of its bytes, which it makes as
// it is read; read at its offsets (no limit), it sends the bytes plain
// net/http sends (a review's trial: a view bounded by the file's size at
// the start failed on /sys/devices/system/cpu/online).
func TestProcFileBodySendsWhatNetHTTPSends(t *testing.T) {
	var got []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, len(b))
	}))
	defer srv.Close()
	for _, name := range []string{"/proc/self/limits", "/proc/cpuinfo", "/sys/devices/system/cpu/online"} {
		for _, rt := range []http.RoundTripper{srv.Client().Transport, &Transport{Base: srv.Client().Transport, MaxBufferedBody: -1}} {
			f, err := os.Open(name)
			if err != nil {
				t.Skip(err)
			}
			req, _ := http.NewRequest(http.MethodPut, srv.URL, f)
			resp, err := rt.RoundTrip(req)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			resp.Body.Close()
		}
		if n := len(got); got[n-1] != got[n-2] || got[n-1] == 0 {
			t.Errorf("%s: plain net/http sent %d bytes, the Transport %d", name, got[n-2], got[n-1])
		}
	}
}
