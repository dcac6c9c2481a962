package httpretry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// DefaultMaxBufferedBody is the largest request body, without GetBody, that
// is kept in memory so that it can be replayed.
const DefaultMaxBufferedBody = 1 << 20

// drainLimit bounds how much of a discarded response body is read, and kept
// while its retry waits, so that its connection can be reused and the
// response still returned if the retry is not sent. 64 KiB holds the error
// pages of CDNs and proxies (5-20 KiB; 4 KiB did not). Past it the body is
// closed unread, which costs the connection but not the time to download a
// large body.
const drainLimit = 64 << 10

// drainTimeout bounds how long a discarded body is read. A small error body
// comes with its headers; one that does not come promptly is not worth
// holding the retry for, so its connection is closed instead.
const drainTimeout = 100 * time.Millisecond

// chunk sizes of a body read without a known length: small first, so that a
// tiny body costs little, then fixed, so that no byte is copied twice.
const (
	firstChunk = 512
	maxChunk   = 32 << 10
)

// maxHintChunk bounds the one allocation made for a body of declared
// length, so that a ContentLength near the largest int64 under a huge
// MaxBufferedBody costs no more than this before a byte is read.
const maxHintChunk = 64 << 20

// errGetBodyNil reports a Request.GetBody that returned neither a body nor
// an error.
var errGetBodyNil = errors.New("GetBody returned a nil body")

// bodyKind says how each attempt gets its request body.
type bodyKind int

const (
	bodyNone     bodyKind = iota // nil or http.NoBody: nothing to replay
	bodyGetBody                  // the caller's Body first, then Request.GetBody
	bodyBuffered                 // every attempt reads its own reader over chunks
	bodyOnce                     // too large to keep: sent once, not replayed
	bodyReadAt                   // too large to keep, but readable at its offsets (a file): every attempt reads its own view
	bodyStreamed                 // the caller's Body, of a request never retried: sent as it is written
	bodyTunnel                   // a CONNECT's Body, the tunnel's write side: sent as it is written, never replayed
)

// requestBody is how one logical request produces its attempts' bodies.
// The buffered chunks are never written after prepareBody returns, so
// readers over them may run concurrently: a base transport can still be
// reading attempt 1's body while attempt 2 is sent.
type requestBody struct {
	kind   bodyKind
	buffer *replayBuffer // bodyBuffered
	once   io.ReadCloser // bodyOnce: the prefix read so far, then the rest
}

// replayBuffer is a body kept for replays: buffered, its chunks; or, read
// at its offsets, the caller's body and where it began. It lives apart
// from requestBody so that only such requests pay for a heap object: the
// GetBody of their clones refers to it, while requestBody itself stays on
// RoundTrip's stack.
type replayBuffer struct {
	chunks   [][]byte
	size     int64
	closeErr error // the caller's body's Close error, which every attempt's body's Close returns
	readAt
}

// prepareBody decides how req's body is replayed and, when it has neither
// GetBody nor a known length above limit, reads up to limit bytes of it.
// A body over limit is read at its offsets by every attempt when it can
// be (see readAt), and otherwise kept as its read prefix followed by the
// unread rest, to be sent once, byte for byte. On a read error the
// caller's body is closed and an *Error returned (StopInvalid). The read
// ends when the
// request's context does, by closing the body as net/http does to a body
// it is sending (StopCanceled, or StopDeadline for the deadline; the *Error
// wraps the context's error). The body of a request that its Policy, or
// def when it has none of its own, never retries is not read at all, nor
// is a CONNECT's, which is never replayed.
func prepareBody(req *http.Request, limit int64, def *Policy) (requestBody, error) {
	switch {
	case req.Body == nil || req.Body == http.NoBody:
		return requestBody{kind: bodyNone}, nil
	case req.Method == http.MethodConnect: // its body is written after its response: read ahead, it waited for ever
		return requestBody{kind: bodyTunnel}, nil
	case req.GetBody != nil:
		return requestBody{kind: bodyGetBody}, nil
	case limit < 0 || req.ContentLength > limit:
		if policyFor(req.Context(), *def).retries() == 0 { // never retried: streamed as it is, as without httpretry (no GetBody for Base to replay it with)
			return requestBody{kind: bodyOnce, once: req.Body}, nil
		}
		if src := offsetOf(req.Body); src.at != nil {
			return readFrom(req.Body, src), nil
		}
		return requestBody{kind: bodyOnce, once: req.Body}, nil
	case policyFor(req.Context(), *def).retries() == 0: // looked up only here, where reading would cost more
		return requestBody{kind: bodyStreamed}, nil
	}
	ctx := req.Context()
	stop := func() bool { return true }
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, func() { req.Body.Close() })
	}
	src := offsetOf(req.Body) // before the read ahead, in case it is over limit
	chunks, size, err := readChunks(ctx, req.Body, limit, req.ContentLength)
	// The context ended: the body is closed, whatever was read. A read's
	// error once it has ended is the context's (errReadAheadEnded too),
	// as a body that watches the context fails before the hook runs.
	if stopped := stop(); !stopped || err != nil && ctx.Err() != nil {
		if stopped { // ended before its AfterFunc could close the body
			req.Body.Close()
		}
		err = fmt.Errorf("reading request body: %w", withCause(ctx, ctx.Err()))
		return requestBody{}, &Error{Reason: stopFor(ctx.Err()), Err: err}
	}
	if err != nil {
		req.Body.Close()
		return requestBody{}, &Error{Reason: StopInvalid, Err: fmt.Errorf("reading request body: %w", err)}
	}
	if size > limit && src.at != nil { // each attempt reads it afresh: the prefix read is let go
		return readFrom(req.Body, src), nil
	}
	if size > limit {
		prefix := &chunkReader{chunks: chunks}
		return requestBody{kind: bodyOnce, once: &onceBody{Reader: io.MultiReader(prefix, req.Body), orig: req.Body}}, nil
	}
	closeErr := req.Body.Close() // read to EOF and kept: this is its one close; its error is every attempt's body's, for Base to fail it as it would (HTTP/1 does, HTTP/2 does not)
	return requestBody{kind: bodyBuffered, buffer: &replayBuffer{chunks: chunks, size: size, closeErr: closeErr}}, nil
}

// readChunks reads r until EOF or until more than limit bytes arrived,
// or, once ctx has ended, r gives no byte (see fill). hint, when
// positive, is the expected length, read into one chunk.
func readChunks(ctx context.Context, r io.Reader, limit, hint int64) (chunks [][]byte, size int64, err error) {
	next := int64(firstChunk)
	if hint > 0 {
		next = min(hint, maxHintChunk) + 1 // one byte more, to see EOF or a longer body in one read
	}
	for size <= limit {
		want := next
		if left := limit - size; left < want {
			want = left + 1 // one byte past the limit shows an over-limit body; never overflows
		}
		buf := make([]byte, want)
		n, err := fill(ctx, r, buf)
		if n > 0 {
			chunks = append(chunks, buf[:n])
			size += int64(n)
		}
		switch err {
		case nil:
		case io.EOF:
			return chunks, size, nil
		default:
			return nil, 0, err
		}
		next = min(next, maxChunk/2) * 2
	}
	return chunks, size, nil
}

// fill reads r into buf until buf is full or r ends. Unlike io.ReadFull,
// it passes on an io.ErrUnexpectedEOF of r's own (a truncated gzip
// stream) as the error it is: taken for the body's end, it sent a body
// cut short as complete. A read that gives no byte and no error once ctx
// has ended ends it with errReadAheadEnded: closed for the context's end,
// a polled body that kept saying (0, nil) held RoundTrip 10 s past a 1 s
// deadline.
func fill(ctx context.Context, r io.Reader, buf []byte) (n int, err error) {
	for n < len(buf) && err == nil {
		var k int
		k, err = r.Read(buf[n:])
		n += k
		if k == 0 && err == nil && ctx.Err() != nil {
			err = errReadAheadEnded
		}
	}
	return n, err
}

// errReadAheadEnded ends the read ahead of a body whose context ended.
var errReadAheadEnded = errors.New("httpretry: read ahead ended by the context")

// sendsCallersRequest reports whether attempt 1 can send the caller's
// request as is, its body untouched.
func (b *requestBody) sendsCallersRequest() bool {
	return b.kind == bodyNone || b.kind == bodyGetBody || b.kind == bodyStreamed || b.kind == bodyTunnel || (b.kind == bodyOnce && b.onceIsCallers())
}

// onceIsCallers reports whether a bodyOnce is the caller's untouched Body.
func (b *requestBody) onceIsCallers() bool {
	_, wrapped := b.once.(*onceBody)
	return !wrapped
}

// newReader returns a fresh reader over the kept body; it is also the
// GetBody of attempts that may be replayed, so that the base transport
// can replay them too. A view's read errors are the body's (see
// readFailed).
func (b *replayBuffer) newReader() (io.ReadCloser, error) {
	if b.at == nil {
		if b.closeErr != nil { // every attempt's body says, as the caller's did, that its bytes are not whole
			return closeErrBody{&chunkReader{chunks: b.chunks}, b.closeErr}, nil
		}
		return &chunkReader{chunks: b.chunks}, nil
	}
	v, err := b.readAt.newView()
	if err != nil {
		return nil, err
	}
	return &taggedBody{ReadCloser: v}, nil
}

// attemptBody sets the body of out, attempt n's request, from req. A
// buffered body gets a GetBody only when the request may be replayed
// (replay): Base replays a request that has one after failures that do
// not prove it unprocessed (net/http's HTTP/2 transport after a reset
// with PROTOCOL_ERROR), and plain net/http would not replay the caller's
// request, which has none.
func (b *requestBody) attemptBody(out, req *http.Request, n int, replay bool) error {
	switch b.kind {
	case bodyGetBody:
		if n == 1 {
			return nil // Clone kept the caller's Body and GetBody
		}
		body, err := req.GetBody()
		if err != nil {
			if body != nil { // a body given with an error is not sent: closed, not leaked
				body.Close()
			}
			return err
		}
		if body == nil {
			return errGetBodyNil // sending the retry without its bytes would lose them
		}
		out.Body = body
		if body != http.NoBody { // which net/http knows for an empty body
			out.Body = &taggedBody{ReadCloser: body}
		}
	case bodyBuffered:
		b.setBuffered(out, replay)
	case bodyOnce:
		out.Body, out.GetBody = b.once, nil
	case bodyReadAt:
		out.Body, _ = b.buffer.newReader() // the call holds a reference: no error
		out.GetBody = nil
		if replay {
			out.GetBody = b.buffer.newReader
		}
	}
	return nil
}

// end is called once the call has ended: a body read at its offsets is
// closed once no view of it is open.
func (b *requestBody) end() {
	if b.kind == bodyReadAt {
		b.buffer.release()
	}
}

// readFailed reports whether err is, or wraps, an error that a retry's
// body from GetBody gave as it was read: net/http returns a request
// body's read error as the attempt's, and a truncated stream's
// io.ErrUnexpectedEOF would otherwise pass for a connection closed before
// a response, retried until the retries ran out. The body's errors are
// told by the wrapper that marked them, not by value: a connection's
// failure that matches a sentinel the body also gave (HTTP/2 closes the
// body of a stream whose connection was lost, and ignores its read error)
// is not the body's. The first attempt's body is the caller's, sent as it
// is, whose errors are not seen. (Keeping the latest retry's body in
// requestBody to compare it cost the success path 5 ns of 27: the struct
// is returned by value.)
func (b *requestBody) readFailed(err error) bool {
	var own *bodyReadError
	return (b.kind == bodyGetBody || b.kind == bodyReadAt) && errors.As(err, &own)
}

// taggedBody is a body from GetBody, or a view of a body read at its
// offsets, whose read errors (io.EOF aside) come wrapped in a
// bodyReadError, for readFailed.
type taggedBody struct {
	io.ReadCloser
}

// Read reads from the body, marking an error other than io.EOF as its own.
func (b *taggedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		err = &bodyReadError{err}
	}
	return n, err
}

// bodyReadError is a read error of a retry's body: its message and chain
// are the body's own error's.
type bodyReadError struct{ err error }

// Error returns the body's own error's message.
func (e *bodyReadError) Error() string { return e.err.Error() }

// Unwrap returns the body's own error.
func (e *bodyReadError) Unwrap() error { return e.err }

// setBuffered gives out a reader over the buffered body, sent with a
// Content-Length unless out has a Trailer, which net/http sends only with
// a body of unknown length (chunked), or the caller's body's Close failed:
// net/http sends such a body of unknown length chunked and, failed by the
// Close, never ends it, so that the server never reads it whole. An empty
// body under a declared length is sent as it is, so that Base reports the
// mismatch as it would without retries.
func (b *requestBody) setBuffered(out *http.Request, replay bool) {
	unknown := out.ContentLength <= 0 && out.Trailer == nil
	if b.buffer.size == 0 && unknown && b.buffer.closeErr == nil { // NoBody's Close would not say the error
		out.Body, out.GetBody = http.NoBody, nil
		return
	}
	out.Body, _ = b.buffer.newReader()
	out.GetBody = nil
	if replay {
		out.GetBody = b.buffer.newReader
	}
	if unknown && b.buffer.closeErr == nil {
		out.ContentLength = b.buffer.size
	}
}

// chunkReader reads a sequence of immutable chunks. Each attempt has its own.
type chunkReader struct {
	chunks [][]byte
	off    int
}

// Read implements io.Reader.
func (r *chunkReader) Read(p []byte) (int, error) {
	for len(r.chunks) > 0 && r.off == len(r.chunks[0]) {
		r.chunks, r.off = r.chunks[1:], 0
	}
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0][r.off:])
	r.off += n
	return n, nil
}

// WriteTo implements io.WriterTo, so the transport writes the chunks
// without an intermediate buffer.
func (r *chunkReader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for ; len(r.chunks) > 0; r.chunks, r.off = r.chunks[1:], 0 {
		n, err := w.Write(r.chunks[0][r.off:])
		total += int64(n)
		if err != nil {
			r.off += n
			return total, err
		}
	}
	return total, nil
}

// Close implements io.Closer; the chunks stay valid for other readers.
func (r *chunkReader) Close() error { return nil }

// onceBody is the read prefix of an over-limit body followed by its rest.
// Closing it closes the caller's body exactly once, however often the base
// transport calls Close.
type onceBody struct {
	io.Reader
	orig   io.Closer
	closed atomic.Bool
}

// Close closes the caller's body on the first call only.
func (b *onceBody) Close() error {
	if b.closed.Swap(true) {
		return nil
	}
	return b.orig.Close()
}

// discard drains a response that will not be returned, at most drainLimit
// bytes, and closes it, so its keep-alive connection goes back to the pool.
// The drain is bounded as dueCloser says.
func discard(ctx context.Context, resp *http.Response) {
	if resp == nil || resp.Body == nil {
		return
	}
	if resp.ContentLength > drainLimit { // -1 (unknown) is drained
		resp.Body.Close()
		return
	}
	due := closeWhenDue(ctx, resp.Body)
	defer due.done() // deferred: a Read that panics leaves no timer or hook behind
	// One byte past drainLimit: a body of exactly drainLimit is read to its
	// EOF, which frees its connection.
	io.CopyN(io.Discard, dueReader{resp.Body, due}, drainLimit+1)
}

// dueCloser closes a body being drained after drainTimeout, or once ctx
// ends if that comes first, so that a drain outlives neither: net/http's
// bodies stop at the context's end by themselves, but a custom Base's may
// not. Closing ends a Read under way, as net/http's bodies allow. The body
// is closed once, whoever comes first: a second Close is undefined for an
// io.Closer; and done never waits for a Close under way on the timer's or
// the context's goroutine (with a sync.Once it did: a Close that took 1 s
// to return held the drain, and RoundTrip returned 1.1 s into a 300 ms
// deadline; TestDrainDoesNotWaitForASlowClose).
type dueCloser struct {
	ctx     context.Context
	body    io.Closer
	closing atomic.Bool
	timer   *time.Timer
	unhook  func() bool
}

// closeWhenDue bounds the drain of body under ctx; done ends it.
func closeWhenDue(ctx context.Context, body io.Closer) *dueCloser {
	c := &dueCloser{ctx: ctx, body: body}
	c.timer = time.AfterFunc(drainTimeout, c.close)
	c.unhook = context.AfterFunc(ctx, c.close)
	return c
}

// close closes the body unless a Close has begun.
func (c *dueCloser) close() {
	if c.closing.CompareAndSwap(false, true) {
		c.body.Close()
	}
}

// cut reports whether err, a Read's error, came from a bound: the body
// closed by one (after which even io.EOF says nothing), or an error once
// the context has ended or its deadline has come. A body watching its
// request's context, as net/http's does, may fail before the context's
// hook closed it (a review's find: 263 of 500 drains under -race kept a
// 503's partial body, returned with a nil error); and http.Client's
// Timeout closes Request.Cancel at the deadline, which net/http's body
// fails on, before the context's own timer may have fired (74 of 300).
func (c *dueCloser) cut(err error) bool {
	return c.closing.Load() || err != io.EOF && (c.ctx.Err() != nil || deadlineCame(c.ctx))
}

// done ends the drain: the bounds are stopped and the body closed.
func (c *dueCloser) done() {
	c.timer.Stop()
	c.unhook()
	c.close()
}

// drainKeeping drains and closes resp like discard, but keeps what it
// read: when the whole body fitted within drainLimit it returns the bytes
// and true, so that a retry not sent after all can still return this
// response, its body in memory. A body its own read error ended within
// drainLimit (a connection closed before the Content-Length was sent) is
// kept too, with that error (cut), so that it comes back as it came. A
// longer body, or one cut off by the drain's bounds (see dueCloser),
// gives false. The response to a HEAD (head) is kept empty, whatever its
// ContentLength says.
func drainKeeping(ctx context.Context, resp *http.Response, head bool) (body []byte, cut error, kept bool) {
	if resp == nil || resp.Body == nil {
		return nil, nil, resp != nil // no body: kept empty
	}
	if head || resp.ContentLength > drainLimit { // a HEAD's ContentLength is the GET's, and its body type HTTP/2's own
		resp.Body.Close()
		return nil, nil, head
	}
	buf, err := readDue(ctx, resp.Body)
	if buf.Len() > drainLimit || errors.Is(err, errDrainCut) {
		return nil, nil, false
	}
	if err == io.EOF {
		err = nil
	}
	return buf.Bytes(), err, true
}

// readDue reads up to drainLimit+1 bytes of body within the drain's bounds
// (see dueCloser), which it ends even when a Read panics.
func readDue(ctx context.Context, body io.ReadCloser) (*bytes.Buffer, error) {
	var buf bytes.Buffer
	due := closeWhenDue(ctx, body)
	defer due.done()
	_, err := io.CopyN(&buf, dueReader{body, due}, drainLimit+1)
	return &buf, err
}

// errDrainCut ends a drain whose bound closed the body: whatever the body
// says after that, an io.EOF too, it did not arrive whole in time.
var errDrainCut = errors.New("drain cut off by its bound")

// dueReader reads a body being drained until its dueCloser closes it: a
// Read that ends after the close fails with errDrainCut, so that a body
// whose Close ends a Read with io.EOF is not taken for whole, and one
// that keeps returning (0, nil) does not hold the drain past its bound.
type dueReader struct {
	r io.Reader
	c *dueCloser
}

// Read reads from the body unless the drain's bound has closed it.
func (d dueReader) Read(p []byte) (int, error) {
	if d.c.closing.Load() {
		return 0, errDrainCut
	}
	n, err := d.r.Read(p)
	if err != nil && d.c.cut(err) {
		err = errDrainCut
	}
	return n, err
}

// PeekBody reads up to n bytes of resp's body and returns them, leaving the
// body whole: afterwards resp.Body yields the peeked bytes followed by the
// rest, and closing it closes the original. It is meant for a Classifier
// that decides on the body's content. A read error other than io.EOF is
// returned with the bytes read so far, which stay in the body too: a body
// cut short of its Content-Length gives io.ErrUnexpectedEOF.
func PeekBody(resp *http.Response, n int) ([]byte, error) {
	if resp == nil || resp.Body == nil || n <= 0 {
		return nil, nil
	}
	// Grown as bytes arrive: n may come from a server's Content-Length.
	var b bytes.Buffer
	_, err := io.CopyN(&b, resp.Body, int64(n))
	buf := b.Bytes()
	if err == io.EOF {
		err = nil
	}
	resp.Body = &peekedBody{Reader: io.MultiReader(bytes.NewReader(buf), resp.Body), Closer: resp.Body}
	return buf, err
}

// peekedBody is a response body with its peeked prefix put back.
type peekedBody struct {
	io.Reader
	io.Closer
}

// closeErrBody is a buffered body whose Close returns the caller's body's
// Close error, as net/http's HTTP/1 transport fails such a
// request and its HTTP/2 transport does not.
type closeErrBody struct {
	io.ReadCloser
	err error
}

// Close closes the body and returns the caller's body's Close error,
// marked as the body's (see replayStop): Base's error for it, net/http's
// "connection broken", would otherwise be retried as a connection's.
func (b closeErrBody) Close() error {
	b.ReadCloser.Close()
	return &bodyCloseError{b.err}
}

// bodyCloseError is the caller's body's Close error, as an attempt's body
// gives it.
type bodyCloseError struct{ err error }

// Error returns the body's own error's message.
func (e *bodyCloseError) Error() string { return e.err.Error() }

// Unwrap returns the body's own error.
func (e *bodyCloseError) Unwrap() error { return e.err }
