package httpretry

import (
	"io"
	"io/fs"
	"sync/atomic"
)

// readAt is a body read at its offsets, from where it began, by every
// attempt's own view (an io.SectionReader: no view moves another's
// offset, as the base transport may still be reading one attempt's
// while the next is sent). The caller's body is closed once the call has
// ended and every view handed out has been closed, so that a view still
// being sent never finds it closed.
type readAt struct {
	at   io.ReaderAt // nil for a buffered body
	from int64
	orig io.Closer
	open atomic.Int64 // views not yet closed, and one for the call until it ends
}

// offsetOf returns body's ReadAt and its offset now, or a nil at when it
// cannot be read at its offsets: that needs ReadAt and a Seek that tells
// the offset (a pipe's fails), and, for a body that says what file it is
// (an *os.File), a regular file (a terminal's Seek may succeed, and its
// ReadAt fail).
func offsetOf(body io.ReadCloser) (at io.ReaderAt, from int64) {
	at, ok := body.(io.ReaderAt)
	s, seeks := body.(io.Seeker)
	if !ok || !seeks {
		return nil, 0
	}
	if f, ok := body.(interface{ Stat() (fs.FileInfo, error) }); ok {
		if info, err := f.Stat(); err != nil || !info.Mode().IsRegular() {
			return nil, 0
		}
	}
	from, err := s.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, 0
	}
	return at, from
}

// readFrom returns the requestBody of body, read at its offsets by every
// attempt from from.
func readFrom(body io.ReadCloser, at io.ReaderAt, from int64) requestBody {
	b := &replayBuffer{readAt: readAt{at: at, from: from, orig: body}}
	b.open.Store(1)
	return requestBody{kind: bodyReadAt, buffer: b}
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
	owner  *readAt
	closed atomic.Bool
}

// Close releases the view's reference to the caller's body, once.
func (v *view) Close() error {
	if !v.closed.Swap(true) {
		v.owner.release()
	}
	return nil
}
