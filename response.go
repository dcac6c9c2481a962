package httpretry

import (
	"io"
	"net/http"
)

// copyNaming returns a copy of resp naming req, the caller's request, for
// a response to a clone Base made of the attempt: the response may be one
// Base shares between calls (a cache), which is not written. The copy's
// trailers follow resp's (see followTrailer).
func copyNaming(resp *http.Response, req *http.Request) *http.Response {
	copied := *resp
	copied.Request = req
	if copied.Trailer == nil { // net/http sets the trailers a response did not announce on resp as its body ends
		copied.Body = followTrailer(copied.Body, resp, &copied)
	}
	return &copied
}

// cloneOf reports whether r is a clone of a that Base sent: the same method
// and URL, the URL's user aside (a clone's is a copy).
func cloneOf(r, a *http.Request) bool {
	if r == nil || r.URL == nil || a.URL == nil || r.Method != a.Method {
		return false
	}
	u, v := *r.URL, *a.URL
	u.User, v.User = nil, nil
	return u == v
}

// trailerBody is the body of a copy of Base's response (see send): the
// trailers net/http sets on Base's response as the body ends, when the
// response announced none, become the copy's too.
type trailerBody struct {
	io.ReadCloser
	from, to *http.Response
}

// followTrailer wraps body, the body of to, a copy of from, so that
// from's trailers reach to; a body that cannot end in trailers (none,
// NoBody, a 101's writable one) is returned as it is.
func followTrailer(body io.ReadCloser, from, to *http.Response) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	if _, ok := body.(io.Writer); ok {
		return body
	}
	return &trailerBody{ReadCloser: body, from: from, to: to}
}

// Read reads the body; at its end, from's trailers become to's.
func (b *trailerBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && b.to.Trailer == nil {
		b.to.Trailer = b.from.Trailer
	}
	return n, err
}
