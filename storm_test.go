package httpretry

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tightBudget allows exactly n retries in its window and no more.
func tightBudget(n int) *Budget {
	return &Budget{Ratio: -1, Reserve: float64(n) / DefaultBudgetWindow.Seconds()}
}

func TestBudgetRefusalReturnsLastResponseUntouched(t *testing.T) {
	base := newScripted(status(503))
	var gaveUp []RetryEvent
	tr := &Transport{Base: base, Policy: noWait, Budget: tightBudget(2),
		OnGiveUp: func(e RetryEvent) { gaveUp = append(gaveUp, e) }}

	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	body, _ := io.ReadAll(resp.Body)
	assert.Equal(t, "body of Service Unavailable", string(body), "the refused response is returned unread")
	assert.Equal(t, 3, base.calls(), "one first attempt and the budget's two retries")
	require.Len(t, gaveUp, 1)
	assert.Equal(t, StopBudget, gaveUp[0].Stop)

	// The budget is spent, but a first attempt is never refused: the next
	// request is sent once and its 503 returned at once.
	resp, err = tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	assert.Equal(t, 503, resp.StatusCode)
	assert.Equal(t, 4, base.calls())
	assert.Equal(t, StopBudget, gaveUp[1].Stop)
}

func TestBudgetRefusalOfAnErrorIsAnError(t *testing.T) {
	base := newScripted(fail(syscall.ECONNRESET))
	tr := &Transport{Base: base, Policy: noWait, Budget: tightBudget(1)}
	_, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	var rerr *Error
	require.True(t, errors.As(err, &rerr))
	assert.Equal(t, StopBudget, rerr.Reason)
	assert.Equal(t, 2, rerr.Attempts)
	assert.ErrorIs(t, err, syscall.ECONNRESET)
}

func TestBudgetSharedAcrossTransports(t *testing.T) {
	shared := tightBudget(3)
	base := newScripted(status(503))
	a := &Transport{Base: base, Policy: noWait, Budget: shared}
	b := &Transport{Base: base, Policy: noWait, Budget: shared}
	for _, tr := range []*Transport{a, b, a} {
		resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, 3+3, base.calls(), "three first attempts and the three retries of one shared budget")
	assert.Equal(t, int64(3), shared.State(t0).Requests)
}

func TestNoBudgetRetriesToPolicyLimits(t *testing.T) {
	base := newScripted(status(503))
	tr := &Transport{Base: base, Policy: Policy{MaxRetries: 4, BaseDelay: -1}, Budget: tightBudget(1), NoBudget: true}
	resp, err := tr.RoundTrip(httptest.NewRequest("GET", "http://x/", nil))
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, 5, base.calls())
}

// okBase answers every request with one canned 200, allocating nothing.
type okBase struct{ resp http.Response }

func (b *okBase) RoundTrip(*http.Request) (*http.Response, error) { return &b.resp, nil }

// BenchmarkRoundTripSuccess measures a request that succeeds at once, with
// storm control on (the default) and off, side by side: the success path
// must cost no allocation and take no lock for it.
func BenchmarkRoundTripSuccess(b *testing.B) {
	cases := []struct {
		name string
		tr   *Transport
	}{
		{"bare", nil},
		{"storm-on", &Transport{}},
		{"storm-off", &Transport{NoBudget: true}},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			base := &okBase{resp: http.Response{StatusCode: 200, Body: http.NoBody}}
			var rt http.RoundTripper = base
			if c.tr != nil {
				c.tr.Base = base
				rt = c.tr
			}
			req := httptest.NewRequest("GET", "http://x/", nil)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := rt.RoundTrip(req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
