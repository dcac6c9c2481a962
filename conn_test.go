package httpretry

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// flakyServer answers every request twice with a 503 and a body, then 200.
func flakyServer(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var conns atomic.Int32
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.URL.Path]++
		n := seen[r.URL.Path]
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, strings.Repeat("overloaded ", 100)) // 1.1 kB: within the drain limit
			return
		}
		io.WriteString(w, "ok")
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &conns
}

func TestRetriesReuseKeepAliveConnections(t *testing.T) {
	srv, conns := flakyServer(t)
	tr := &Transport{Base: srv.Client().Transport, Policy: noWait}
	client := &http.Client{Transport: tr}
	for i := range 50 {
		resp, err := client.Get(srv.URL + "/item/" + strings.Repeat("x", i+1))
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, "ok", string(body))
	}
	assert.LessOrEqual(t, conns.Load(), int32(2), "150 attempts over at most 2 connections")
}

func TestUndrainedResponsesWouldCostConnections(t *testing.T) {
	// The control for the test above: a client that closes 503s without
	// reading them opens a new connection for nearly every attempt, so the
	// bound there is a real measurement of draining.
	srv, conns := flakyServer(t)
	client := srv.Client()
	for i := range 10 {
		for range 3 {
			resp, err := client.Get(srv.URL + "/control/" + strings.Repeat("y", i+1))
			require.NoError(t, err)
			resp.Body.Close() // unread
		}
	}
	assert.Greater(t, conns.Load(), int32(10))
}
