package httpretry

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"sync"
	"testing"
	"time"
)

// growingFile is a body read at its offsets, a regular file by its Stat,
// whose bytes can grow; onStat, when set, runs inside the next Stat call
// (once), which view.Read makes between its check of far and its
// CompareAndSwap of end.
type growingFile struct {
	mu     sync.Mutex
	data   []byte
	onStat func()
	closes int
}

func (g *growingFile) ReadAt(p []byte, off int64) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if off >= int64(len(g.data)) {
		return 0, io.EOF
	}
	n := copy(p, g.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (g *growingFile) Read(p []byte) (int, error) { return 0, errors.New("not read sequentially here") }

func (g *growingFile) Seek(off int64, whence int) (int64, error) {
	if off == 0 && whence == io.SeekCurrent {
		return 0, nil
	}
	return 0, errors.New("unsupported seek")
}

func (g *growingFile) Close() error { g.mu.Lock(); g.closes++; g.mu.Unlock(); return nil }

func (g *growingFile) grow(b []byte) { g.mu.Lock(); g.data = append(g.data, b...); g.mu.Unlock() }

func (g *growingFile) Stat() (fs.FileInfo, error) {
	g.mu.Lock()
	hook := g.onStat
	g.onStat = nil
	size := int64(len(g.data))
	g.mu.Unlock()
	if hook != nil {
		hook()
	}
	return regularInfo{size: size}, nil
}

type regularInfo struct{ size int64 }

func (i regularInfo) Name() string       { return "body" }
func (i regularInfo) Size() int64        { return i.size }
func (i regularInfo) Mode() fs.FileMode  { return 0o600 }
func (i regularInfo) ModTime() time.Time { return time.Time{} }
func (i regularInfo) IsDir() bool        { return false }
func (i regularInfo) Sys() any           { return nil }

// readAllCount reads r in reads of 1 KiB, as net/http's copy would, returning
// the count and the error that ended it (nil for io.EOF).
func readAllCount(r io.Reader) (int, error) {
	buf := make([]byte, 1<<10)
	total := 0
	for {
		n, err := r.Read(buf)
		total += n
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// TestViewsNeverEndWholeWithDifferentLengths: two views of one call read
// concurrently while the body grows (a review's find; both ended whole,
// with 4,096 and 4,196 bytes, and with 4,096 and 4,146). Every view that ends with io.EOF
// (sent as whole) must have sent the same number of bytes: the doc says
// every view reads the bytes of the first to reach the end. Two
// interleavings inside view.Read's window between its check of far and
// its CompareAndSwap of end (where shrank calls Stat):
//
//	"late CAS": the other view reads the grown body to its end and sets
//	end first; this view's CAS fails and it still returns io.EOF, short.
//	"read past": the other view reads past this one's end before it is
//	set; it then returns io.EOF at its longer count.
func TestViewsNeverEndWholeWithDifferentLengths(t *testing.T) {
	const size, extra = 4 << 10, 100
	for _, tc := range []struct {
		name    string
		partial bool // the other view reads past this one's end, but not to its own end, in the window
	}{{"late CAS", false}, {"read past", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := &growingFile{data: bytes.Repeat([]byte("g"), size)}
			var views []io.ReadCloser
			var counts [2]int
			var errs [2]error
			base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
				views = append(views, r.Body)
				if len(views) == 1 {
					return response(503, ""), nil // attempt 1's view: net/http still sends it
				}
				a, b := views[0], views[1]
				// Read a up to its last KiB, then arm the hook and read on.
				buf := make([]byte, size-(1<<10))
				io.ReadFull(a, buf)
				counts[0] = len(buf)
				g.onStat = func() {
					g.grow(bytes.Repeat([]byte("+"), extra))
					if tc.partial {
						// b reads past a's end, not to its own.
						p := make([]byte, size+extra/2)
						n, err := io.ReadFull(b, p)
						counts[1], errs[1] = n, err
						return
					}
					counts[1], errs[1] = readAllCount(b)
				}
				n, err := readAllCount(a)
				counts[0] += n
				errs[0] = err
				if tc.partial {
					n, err := readAllCount(b)
					counts[1] += n
					errs[1] = err
				}
				a.Close()
				b.Close()
				return response(200, ""), nil
			})
			req, _ := http.NewRequest(http.MethodPut, "http://x/", g)
			resp, err := (&Transport{Base: base, Policy: noWait, MaxBufferedBody: -1}).RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if errs[0] == nil && errs[1] == nil && counts[0] != counts[1] {
				t.Errorf("both views ended whole, with %d and %d bytes: one of them sent other bytes than the first to reach the end", counts[0], counts[1])
			}
			if g.closes != 1 {
				t.Errorf("closed %d times", g.closes)
			}
		})
	}
}
