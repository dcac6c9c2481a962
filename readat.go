package httpretry

import (
	"errors"
	"io"
	"io/fs"
	"math"
	"runtime"
	"sync/atomic"
)

// readAt is a body read at its offsets, from where it began, by every
// attempt's own view (an io.SectionReader: no view moves another's
// offset, as the base transport may still be reading one attempt's
// while the next is sent). The caller's body is closed once the call has
// ended and every view handed out has been closed, so that a view still
// being sent never finds it closed (net/http's HTTP/2 transport fails the
// response of a stream whose body fails). A view that Base drops without
// closing it is released when it is collected: net/http's HTTP/2
// transport takes a body from GetBody for a replay it then does not send,
// and drops it, which left the file open. Every view reads the bytes the
// first to reach the end read: a body grown since is cut there, and one
// that ends before another view's bytes, or a file that Stat says has
// shrunk since the call began, fails with io.ErrUnexpectedEOF, rather
// than pass for whole (chunked, a file truncated between attempts was
// taken by the server for the whole upload).
type readAt struct {
	source
	orig io.Closer
	open atomic.Int64 // views not yet released, and one for the call until it ends
	far  atomic.Int64 // the most bytes a view has read
	end  atomic.Int64 // 1 + the bytes the first view to reach the end read; 0 before
}

// source is what reads a body at its offsets: its ReadAt (nil for a
// buffered body), its offset when the call began, and, for a file, its
// Stat and the size Stat gave then.
type source struct {
	at   io.ReaderAt
	from int64
	stat func() (fs.FileInfo, error)
	size int64
}

// errBodyClosed is GetBody's error once the caller's body has been closed:
// the call has ended and no view of it is open.
var errBodyClosed = errors.New("httpretry: the request's body was closed when its call ended")

// offsetOf returns the source that reads body at its offsets from where
// it is now, with a nil at when it cannot be: that needs ReadAt and a
// Seek that tells the offset (a pipe's fails), and, for a body that says
// what file it is (an *os.File), a regular file (a terminal's Seek may
// succeed, and its ReadAt fail).
func offsetOf(body io.ReadCloser) source {
	at, ok := body.(io.ReaderAt)
	s, seeks := body.(io.Seeker)
	if !ok || !seeks {
		return source{}
	}
	var src source
	if f, ok := body.(interface{ Stat() (fs.FileInfo, error) }); ok {
		info, err := f.Stat()
		if err != nil || !info.Mode().IsRegular() {
			return source{}
		}
		src.stat, src.size = f.Stat, info.Size()
	}
	from, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		return source{}
	}
	src.at, src.from = at, from
	return src
}

// readFrom returns the requestBody of body, read at its offsets by every
// attempt as src says.
func readFrom(body io.ReadCloser, src source) requestBody {
	b := &replayBuffer{readAt: readAt{source: src, orig: body}}
	b.open.Store(1)
	return requestBody{kind: bodyReadAt, buffer: b}
}

// newView returns a new view of the body, or errBodyClosed once the body
// has been closed: a Base that asks GetBody after the call ended would
// otherwise close it twice.
func (r *readAt) newView() (io.ReadCloser, error) {
	for n := r.open.Load(); ; n = r.open.Load() {
		if n <= 0 {
			return nil, errBodyClosed
		}
		if r.open.CompareAndSwap(n, n+1) {
			break
		}
	}
	released := new(atomic.Bool)
	sr := io.NewSectionReader(r.at, r.from, math.MaxInt64-r.from) // to its end, as the caller's body would be read: a length mismatch is Base's to report
	v := &view{SectionReader: sr, owner: r, released: released}
	runtime.AddCleanup(v, func(released *atomic.Bool) { r.releaseOnce(released) }, released)
	return v, nil
}

// releaseOnce drops a view's reference, the first time it is called for
// released (see release).
func (r *readAt) releaseOnce(released *atomic.Bool) {
	if !released.Swap(true) {
		r.release()
	}
}

// release drops one of the references to the caller's body (see readAt),
// closing it with the last.
func (r *readAt) release() {
	if r.open.Add(-1) == 0 {
		r.orig.Close()
	}
}

// view is one attempt's view of a body read at its offsets.
type view struct {
	*io.SectionReader
	owner    *readAt
	got      int64        // bytes read; only the view's reader uses it
	released *atomic.Bool // apart from the view, for its cleanup
}

// Read reads the view to where the first view to reach the end stopped,
// and ends it with io.ErrUnexpectedEOF if the body ends before another
// view's bytes (see readAt).
func (v *view) Read(p []byte) (int, error) {
	r := v.owner
	if end := r.end.Load() - 1; end >= 0 {
		if v.got > end { // read past it before it was set: not the first's bytes
			return 0, io.ErrUnexpectedEOF
		}
		if v.got == end {
			return 0, io.EOF
		}
		p = p[:min(int64(len(p)), end-v.got)]
	}
	n, err := v.SectionReader.Read(p)
	if n == 0 && err == nil && len(p) > 0 { // an io.ReaderAt must say why it gave less: spun on, it held Base for ever
		err = io.ErrNoProgress
	}
	v.got += int64(n)
	for far := r.far.Load(); v.got > far && !r.far.CompareAndSwap(far, v.got); far = r.far.Load() {
	}
	if err == io.EOF {
		if v.got < r.far.Load() || r.shrank() {
			return n, io.ErrUnexpectedEOF
		}
		if !r.end.CompareAndSwap(0, v.got+1) && r.end.Load() != v.got+1 { // another reached the end meanwhile, at another count
			return n, io.ErrUnexpectedEOF
		}
	}
	return n, err
}

// Close releases the view's reference to the caller's body, once.
func (v *view) Close() error {
	v.owner.releaseOnce(v.released)
	return nil
}

// shrank reports whether the body, a file, is now shorter than it was when
// the call began: truncated, a view ends early whatever any view read
// before (a first attempt that the server answered before reading it read
// nothing). A file whose size says nothing of its bytes (procfs, sysfs)
// keeps its size.
func (r *readAt) shrank() bool {
	if r.stat == nil {
		return false
	}
	info, err := r.stat()
	return err == nil && info.Size() < r.size
}
