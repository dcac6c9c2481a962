package httpretry

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
)

// pipeNet is an in-memory network for an http.Server and an
// http.Transport inside a synctest bubble: a loopback socket blocks in
// the netpoller, which synctest cannot see, so that virtual time would
// never advance; net.Pipe's connections block on channels, which it can.
type pipeNet struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
	open      atomic.Int64            // server connections accepted and not yet closed
	wrap      func(net.Conn) net.Conn // if set, wraps the server's end of each connection
}

// newPipeNet returns a pipe network with no connection yet.
func newPipeNet() *pipeNet {
	return &pipeNet{conns: make(chan net.Conn), closed: make(chan struct{})}
}

// startPipeServer serves h on a pipeNet and returns a base transport that
// dials it; both are closed when t ends. Call it inside the bubble.
func startPipeServer(t *testing.T, h http.Handler) (*pipeNet, *http.Transport) {
	n := newPipeNet()
	srv := &http.Server{Handler: h, ConnState: func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			n.open.Add(1)
		case http.StateClosed, http.StateHijacked:
			n.open.Add(-1)
		}
	}}
	go srv.Serve(n)
	base := &http.Transport{DialContext: n.dial}
	t.Cleanup(func() {
		base.CloseIdleConnections()
		srv.Close()
		synctest.Wait() // the server's goroutines end inside the bubble
	})
	return n, base
}

// dial connects to the server's end of a new pipe.
func (n *pipeNet) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	client, server := net.Pipe()
	if n.wrap != nil {
		server = n.wrap(server)
	}
	select {
	case n.conns <- server:
		return client, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-n.closed:
		return nil, net.ErrClosed
	}
}

// Accept returns the next connection dialed.
func (n *pipeNet) Accept() (net.Conn, error) {
	select {
	case c := <-n.conns:
		return c, nil
	case <-n.closed:
		return nil, net.ErrClosed
	}
}

// Close stops Accept and dial.
func (n *pipeNet) Close() error {
	n.closeOnce.Do(func() { close(n.closed) })
	return nil
}

// Addr names the pipe network.
func (n *pipeNet) Addr() net.Addr { return pipeAddr{} }

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }
