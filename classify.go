package httpretry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"syscall"
)

// Classifier decides whether the outcome of one attempt is worth retrying.
// Exactly one of resp and err is non-nil. req is the caller's request: read
// it, never modify it. reason is a short phrase for OnRetry and logs
// ("status 503", "connection reset").
//
// A Classifier replaces the whole default decision, RetryableStatuses
// included; to extend it, fall back to DefaultClassifier. It only says
// whether the outcome is transient: whether the request may be replayed, the
// caller's own cancellation, the retry count and the deadlines are checked
// by the Transport on top of it. To look at a response body, use PeekBody,
// which leaves the body whole for the caller.
type Classifier func(req *http.Request, resp *http.Response, err error) (retry bool, reason string)

// defaultRetryableStatuses are the statuses retried when
// Transport.RetryableStatuses is nil: overload and gateway failures, which
// say nothing about the request itself.
var defaultRetryableStatuses = [...]int{
	http.StatusTooManyRequests,
	http.StatusBadGateway,
	http.StatusServiceUnavailable,
	http.StatusGatewayTimeout,
}

// DefaultClassifier is the default decision: statuses 429, 502, 503 and 504,
// and the transport errors that mean a connection failed rather than that
// the request was wrong: connection refused or reset (also seen as a
// broken pipe, a connection closed while sending, aborted, or reset with
// its network), no route to the host or its network (or either down), a
// connection or
// network timeout (also an HTTP/2 connection whose health check ping
// went unanswered, "http2: client connection lost"), a name lookup that
// timed out or that the resolver says failed temporarily (a SERVFAIL, a
// resolver not reached, EAI_AGAIN; not a name that does not exist), a
// dial that found no local address free (out of ephemeral ports), a
// proxy that answered CONNECT with one of the statuses above and its
// standard reason phrase (net/http passes on only the phrase), EOF
// before a response (also net/http's "server closed
// idle connection" and HTTP/2's "client conn could not be established"
// for a new connection the server closed before any request, and an
// HTTP/2 stream the server reset with INTERNAL_ERROR before answering,
// as its handler failed), HTTP/2 GOAWAY (also the error
// net/http gives a new connection's first stream when a GOAWAY with an
// error code names none processed, which it does not retry itself) and
// REFUSED_STREAM (also the errors net/http gives such a stream of a
// request with a body and no GetBody, which it cannot replay), and an
// AttemptTimeout. A context deadline that is not
// req's own (a Base that bounds each attempt with a context of its own) is
// a timeout too; req's own deadline or cancel is not retried, nor are TLS
// and certificate errors or any other error (but a server that rejects a
// missing client certificate under TLS 1.3 often shows it only as one of
// the connection failures above, which are retried). A nil req counts every
// context error as the caller's.
func DefaultClassifier(req *http.Request, resp *http.Response, err error) (bool, string) {
	if err != nil {
		return classifyFailure(req, err)
	}
	return classifyStatus(resp.StatusCode, defaultRetryableStatuses[:])
}

// classifyStatus reports whether status is one of retryable.
func classifyStatus(status int, retryable []int) (bool, string) {
	for _, s := range retryable {
		if s == status {
			return true, statusReason(status)
		}
	}
	return false, ""
}

// classifyFailure is the retry decision for the transport error of an
// attempt of req: a deadline that ended the attempt but not req's context
// was the attempt's own, a timeout like any other; the rest is
// classifyError's.
func classifyFailure(req *http.Request, err error) (bool, string) {
	if req != nil && errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && endedBy(req.Context()) == nil {
		return true, "attempt deadline"
	}
	return classifyError(err)
}

// classifyError is the retry decision for a transport error, as a chain of
// early returns, each with its reason. Errors not named here are not
// retried: an unknown failure is more likely a bug than a blip.
func classifyError(err error) (bool, string) {
	switch {
	case errors.Is(err, ErrAttemptTimeout):
		return true, "attempt timeout" // our own per-attempt timeout fired
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false, "" // the caller's own cancellation or deadline
	case isTLSError(err):
		return false, "" // a bad certificate does not get better by asking again
	case isRefusedStream(err), refusedNotReplayed(err):
		return true, "http2 stream refused"
	case isGoAway(err), isGoAwayUnprocessed(err), goAwayNotReplayed(err):
		return true, "http2 GOAWAY"
	case isPeerInternalReset(err):
		return true, "http2 stream reset" // as an HTTP/1 connection closed before a response
	case isErrno(err, refusedErrnos[:]):
		return true, "connection refused"
	case isErrno(err, resetErrnos[:]):
		return true, "connection reset" // also aborted, or dropped with its network: the same lost connection
	case errors.Is(err, syscall.EPIPE):
		return true, "broken pipe" // a reset, seen by the request's writer
	case errors.Is(err, net.ErrClosed):
		return true, "connection closed while sending" // a reset, seen by the reader, which closed the connection under the writer
	case isErrno(err, timedOutErrnos[:]):
		return true, "connection timed out"
	case isPlainError(err, h2ConnLost):
		return true, "connection lost" // its health check's ping went unanswered: a connection timeout
	case isErrno(err, unreachableErrnos[:]):
		return true, "host unreachable" // a host down or a route lost: as passing as a refused connection
	case isErrno(err, addrErrnos[:]):
		return true, "local address not available" // out of ephemeral ports, which a wait frees
	case isTemporaryLookup(err):
		return true, "name lookup failed" // the resolver's temporary failure, not a name that does not exist
	case isProxyRefusal(err, defaultRetryableStatuses[:]):
		return true, "proxy refused CONNECT" // the tunnel to the host failed, with a status the default classifier retries
	case closedBeforeRequest(err):
		// The same server closing a new connection as the EOF below,
		// seen first by another of net/http's goroutines.
		return true, "connection closed before a response"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		// No response means the error came first: also a head cut off
		// between its lines, or inside its reason phrase or a header's
		// value. One cut inside its status code or a header's name reaches
		// net/http as a malformed response, which cannot be told from a
		// server that does not speak HTTP, and is not retried.
		return true, "connection closed before a response"
	case isTimeout(err):
		return true, "network timeout"
	}
	return false, ""
}

// Winsock's numbers for the errors above: on Windows the network returns
// these, never syscall.ECONNREFUSED and its kin, which there are numbers
// of Go's own that no call returns (and syscall.Errno.Is does not bridge
// the two). No other system has an errno this high, so they are looked
// for everywhere.
const (
	wsaEADDRNOTAVAIL syscall.Errno = 10049
	wsaENETDOWN      syscall.Errno = 10050
	wsaENETUNREACH   syscall.Errno = 10051
	wsaENETRESET     syscall.Errno = 10052
	wsaECONNABORTED  syscall.Errno = 10053 // a reset, as Windows reports one to the side that was sending
	wsaECONNRESET    syscall.Errno = 10054
	wsaETIMEDOUT     syscall.Errno = 10060
	wsaECONNREFUSED  syscall.Errno = 10061
	wsaEHOSTDOWN     syscall.Errno = 10064
	wsaEHOSTUNREACH  syscall.Errno = 10065
)

// The system errors retried, each beside its Winsock number (as errors,
// so that a look-up converts nothing).
var (
	refusedErrnos     = [...]error{syscall.ECONNREFUSED, wsaECONNREFUSED}
	resetErrnos       = [...]error{syscall.ECONNRESET, wsaECONNRESET, syscall.ECONNABORTED, wsaECONNABORTED, syscall.ENETRESET, wsaENETRESET}
	timedOutErrnos    = [...]error{syscall.ETIMEDOUT, wsaETIMEDOUT}
	unreachableErrnos = [...]error{syscall.EHOSTUNREACH, wsaEHOSTUNREACH, syscall.ENETUNREACH, wsaENETUNREACH, errHostDown, wsaEHOSTDOWN, syscall.ENETDOWN, wsaENETDOWN}
	addrErrnos        = [...]error{syscall.EADDRNOTAVAIL, wsaEADDRNOTAVAIL}
)

// isErrno reports whether err's tree holds one of errnos.
func isErrno(err error, errnos []error) bool {
	for _, e := range errnos {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// isTemporaryLookup reports a DNS lookup that failed for a reason the
// resolver calls temporary: a SERVFAIL (what a recursive resolver answers
// when its own upstream timed out), a resolver that could not be reached,
// the system resolver's EAI_AGAIN. A name that does not exist
// (IsNotFound) is not one; a lookup that timed out is isTimeout's.
func isTemporaryLookup(err error) bool {
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsTemporary && !dns.IsTimeout && !dns.IsNotFound
}

// neverSent reports whether err proves the request never reached the server,
// so that replaying it is safe whatever its method. A failed dial proves
// it, whatever it wraps. Of errors joined (a Base that tried twice, or two
// backends, and returned both), every one must prove it, and one at least:
// the request was sent if any try sent it. The Transport's own
// ErrAttemptTimeout, joined to Base's error when it fires, says nothing
// either way.
func neverSent(err error) bool {
	for e := err; e != nil; {
		if op, ok := e.(*net.OpError); ok && op.Op == "dial" {
			return true // no connection, no request
		}
		switch u := e.(type) {
		case interface{ Unwrap() []error }:
			return allNeverSent(u.Unwrap())
		case interface{ Unwrap() error }:
			e = u.Unwrap()
		default:
			e = nil
		}
	}
	var op *net.OpError // one that says it is a dial's by its As
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return isErrno(err, refusedErrnos[:]) || isRefusedStream(err) || isGoAwayUnprocessed(err) || isPlainError(err, h2NotEstablished) ||
		refusedNotReplayed(err) || goAwayNotReplayed(err)
}

// allNeverSent reports whether the joined errs prove the request never
// sent (see neverSent).
func allNeverSent(errs []error) bool {
	proved := false
	for _, e := range errs {
		if e == nil || e == ErrAttemptTimeout {
			continue
		}
		if !neverSent(e) {
			return false
		}
		proved = true
	}
	return proved // a join of nothing proves nothing
}

// isTLSError reports a handshake or certificate verification failure.
func isTLSError(err error) bool {
	var (
		verify    *tls.CertificateVerificationError
		record    tls.RecordHeaderError
		alert     tls.AlertError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &record) || errors.As(err, &alert) ||
		errors.As(err, &unknownCA) || errors.As(err, &hostname) || errors.As(err, &invalid)
}

// isTimeout reports a net.Error timeout: a dial, read or header timeout of
// the base transport, not a context's.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// h2StreamError mirrors the HTTP/2 StreamError of net/http and x/net/http2.
// net/http's bundled copy converts itself into any struct of this shape
// through its As method, which is how errors.As reaches it without a
// dependency on x/net.
type h2StreamError struct {
	StreamID uint32
	Code     uint32
	Cause    error
}

// Error implements error, as errors.As requires of its target.
func (e h2StreamError) Error() string { return "http2 stream error " + strconv.Itoa(int(e.Code)) }

// h2RefusedStream is REFUSED_STREAM (RFC 9113 §7): the server did not
// process the stream, so any method may be replayed.
const h2RefusedStream = 0x7

// h2InternalError is INTERNAL_ERROR (RFC 9113 §7).
const h2InternalError = 0x2

// h2FromPeer is the Cause net/http and x/net give a reset the server sent.
const h2FromPeer = "received from peer"

// isRefusedStream reports an HTTP/2 REFUSED_STREAM reset.
func isRefusedStream(err error) bool {
	return anyH2Stream(err, func(se h2StreamError) bool { return se.Code == h2RefusedStream })
}

// isPeerInternalReset reports a stream the server reset with
// INTERNAL_ERROR before any response: its handler failed (a panic, a
// write timeout), where an HTTP/1 server closes the connection, an EOF
// before a response. As that EOF, it is retried only for a request that
// may be replayed: the server may have processed it.
func isPeerInternalReset(err error) bool {
	return anyH2Stream(err, func(se h2StreamError) bool {
		return se.Code == h2InternalError && se.Cause != nil && se.Cause.Error() == h2FromPeer
	})
}

// anyH2Stream reports whether match holds for an HTTP/2 stream error in
// err's tree: net/http's, the first, through its As method, or any of
// x/net's, by its shape.
func anyH2Stream(err error, match func(h2StreamError) bool) bool {
	var se h2StreamError
	if errors.As(err, &se) {
		return match(se)
	}
	return anyInChain(err, func(e error) bool {
		if !hasShape(e, "StreamID", "Code", "Cause") {
			return false
		}
		v := reflect.ValueOf(e)
		code := v.FieldByName("Code")
		if !code.CanUint() || code.Uint() > math.MaxUint32 {
			return false
		}
		cause, _ := v.FieldByName("Cause").Interface().(error)
		return match(h2StreamError{Code: uint32(code.Uint()), Cause: cause})
	})
}

// isGoAway reports that the server closed an HTTP/2 connection with GOAWAY.
// The GoAwayError types of net/http and x/net have no As method and net/http's
// is unexported, so they are recognized by their fields, never by message.
func isGoAway(err error) bool {
	return anyInChain(err, func(e error) bool {
		return hasShape(e, "LastStreamID", "ErrCode", "DebugData")
	})
}

// goAwayUnprocessed begins the error net/http's HTTP/2 transport gives the
// first stream of a connection when a GOAWAY with an error code names no
// stream processed: it does not retry that stream itself, thinking a new
// connection will fare no better, but after a backoff one may, and the
// stream never reached the server's application (RFC 9113 §6.8).
const goAwayUnprocessed = "http2: Transport received GOAWAY from server ErrCode:"

// isGoAwayUnprocessed reports that error. It is matched by its message, as
// are notReplayedCause's, the exceptions to matching by type or shape:
// net/http gives them neither, only the type of errors.New, whose Error
// alone is called, as another error's may panic (x509.HostnameError's
// without a certificate does).
func isGoAwayUnprocessed(err error) bool {
	return anyInChain(err, func(e error) bool {
		return reflect.TypeOf(e) == plainErrorType && strings.HasPrefix(e.Error(), goAwayUnprocessed)
	})
}

// serverClosedIdle is net/http's HTTP/1 error for a connection the server
// closed while no response was expected yet (its errServerClosedIdle),
// which net/http retries itself only on a reused connection; on a new one
// it is the EOF before a response that the Transport retries, seen by the
// connection's reader before the request was counted.
const serverClosedIdle = "http: server closed idle connection"

// h2NotEstablished is net/http's HTTP/2 error for a new connection that
// closed before its first stream was opened (its
// errClientConnNotEstablished): no request was sent on it.
const h2NotEstablished = "http2: client conn could not be established"

// h2ConnLost is net/http's HTTP/2 error for the streams of a connection
// whose health check ping went unanswered (HTTP2Config.SendPingTimeout,
// x/net's ReadIdleTimeout), which it does not retry itself: the
// connection died under the request (matched by message: see
// isGoAwayUnprocessed).
const h2ConnLost = "http2: client connection lost"

// isProxyRefusal reports net/http's error for a proxy that answered
// CONNECT with one of statuses, those the Transport retries (by default
// 429, 502, 503, 504): an errors.New of the status text (matched by
// message: see isGoAwayUnprocessed). The request did not reach the host,
// but a message alone does not prove it never left, so only a request
// that may be replayed is retried.
func isProxyRefusal(err error, statuses []int) bool {
	for _, code := range statuses {
		if isPlainError(err, http.StatusText(code)) {
			return true
		}
	}
	return false
}

// closedBeforeRequest reports either error (matched by message: see
// isGoAwayUnprocessed).
func closedBeforeRequest(err error) bool {
	return isPlainError(err, serverClosedIdle) || isPlainError(err, h2NotEstablished)
}

// isPlainError reports an error of errors.New's type with message msg in
// err's chain.
func isPlainError(err error, msg string) bool {
	return anyInChain(err, func(e error) bool {
		return reflect.TypeOf(e) == plainErrorType && e.Error() == msg
	})
}

// cannotReplay begins the error net/http's HTTP/2 transport gives a
// stream it would replay itself, the server not having processed it, but
// cannot, as its request has a body and no GetBody: the Transport's
// clones of a request that may not be replayed have none (see
// attemptBody). The cause is formatted into the message, so the message
// alone tells it, between cannotReplay and cannotReplayEnd.
const (
	cannotReplay    = "http2: Transport: cannot retry err ["
	cannotReplayEnd = "] after Request.Body was written"
)

// notReplayedCause returns the cause of that error in err's chain, or ""
// (matched by message: see isGoAwayUnprocessed).
func notReplayedCause(err error) (cause string) {
	anyInChain(err, func(e error) bool {
		if reflect.TypeOf(e) != plainErrorType {
			return false
		}
		rest, ok := strings.CutPrefix(e.Error(), cannotReplay)
		if c, _, found := strings.Cut(rest, cannotReplayEnd); ok && found {
			cause = c
			return true
		}
		return false
	})
	return cause
}

// refusedNotReplayed reports that error for a REFUSED_STREAM from the
// server ("stream error: stream ID 3; REFUSED_STREAM; received from peer").
func refusedNotReplayed(err error) bool {
	cause := notReplayedCause(err)
	return strings.HasPrefix(cause, "stream error: stream ID ") && strings.HasSuffix(cause, "; REFUSED_STREAM; received from peer")
}

// goAwayNotReplayed reports that error for a stream a GOAWAY left
// unprocessed.
func goAwayNotReplayed(err error) bool {
	return notReplayedCause(err) == "http2: Transport received Server's graceful shutdown GOAWAY"
}

// plainErrorType is the type of errors.New's errors, and of fmt.Errorf's
// without a wrapped error.
var plainErrorType = reflect.TypeOf(errors.New(""))

// hasShape reports whether e is a struct value with exactly these fields.
func hasShape(e error, fields ...string) bool {
	t := reflect.TypeOf(e)
	if t.Kind() != reflect.Struct || t.NumField() != len(fields) {
		return false
	}
	for i, name := range fields {
		if t.Field(i).Name != name {
			return false
		}
	}
	return true
}

// anyInChain walks err's tree (Unwrap() error and Unwrap() []error) and
// reports whether match holds for any error in it.
func anyInChain(err error, match func(error) bool) bool {
	for err != nil {
		if match(err) {
			return true
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if anyInChain(e, match) {
					return true
				}
			}
			return false
		default:
			return false
		}
	}
	return false
}

// replayable reports whether the request may be sent again after a failure:
// its method is idempotent (RFC 9110 §9.2.2) or it carries an idempotency
// key, or allMethods is set.
func replayable(req *http.Request, allMethods bool) bool {
	if allMethods {
		return true
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace,
		http.MethodPut, http.MethodDelete:
		return true
	}
	return hasHeader(req.Header, "Idempotency-Key") || hasHeader(req.Header, "X-Idempotency-Key")
}

// hasHeader reports whether h carries the canonical key, even empty, as
// net/http's own replay check does.
func hasHeader(h http.Header, key string) bool {
	_, ok := h[key]
	return ok
}

// statusReason names a retried status without allocating for the usual ones.
func statusReason(status int) string {
	switch status {
	case http.StatusTooManyRequests:
		return "status 429"
	case http.StatusBadGateway:
		return "status 502"
	case http.StatusServiceUnavailable:
		return "status 503"
	case http.StatusGatewayTimeout:
		return "status 504"
	}
	return "status " + strconv.Itoa(status)
}
