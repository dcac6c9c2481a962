package httpretry

import (
	"testing"
	"time"
)

// The line's probe is a retry between a held request's steps; these are
// the ways it once cost a request the rescue plain backoff gets (found by
// a review once a young flow of fresh requests counted for fewer gaps and
// probes went sooner; each passed before that change and failed after).
// Each is a flappingHost whose failures are 503s without Retry-After.

// rescuedAsOff fails t unless L, rescued by plain backoff, is rescued with
// storm control too.
func (f flappingHost) rescuedAsOff(t *testing.T) {
	t.Helper()
	on, off := f.run(t, StormControl{}), f.run(t, stormOff)
	if off.code != 200 {
		t.Fatalf("setup: plain backoff did not rescue L: %+v", off)
	}
	if on.code != 200 {
		t.Errorf("L failed with storm control (%d at %v after %v); plain backoff got 200 at %v after %v", on.code, on.end, on.sends, off.end, off.sends)
	}
}

// TestProbeNearTheDeadlineKeepsALifeStepThatFits: L (deadline 1.663 s)
// fails with one other request; the host is back at 1.285 s. L probes at
// 0.994 s, and its life's next step, at 1.435 s, fits the deadline; but
// its own backoff's whole wait counted from the probe (0.82 s) did not,
// and L stopped with StopDeadline. The wait after a retry between steps
// now ends at the life's next step, where plain backoff's retry goes.
func TestProbeNearTheDeadlineKeepsALifeStepThatFits(t *testing.T) {
	ms := time.Millisecond
	flappingHost{status: 503, pol: Policy{MaxRetries: 5, BaseDelay: 410 * ms, MaxDelay: 1640 * ms, Jitter: JitterFull},
		up: 1285 * ms, bg: []time.Duration{770 * ms}, lStart: 273 * ms, lDead: 1663 * ms}.rescuedAsOff(t)
}

// TestProbeDoesNotSkipTheLifesStepThatPlainBackoffCatches: the host is
// up from 1.608 s to 2.065 s. L probes at 0.877 s and 1.525 s; after
// each it waited its own whole backoff (648 ms), which carried it past its
// life's step at 1.945 s, in the window, to 2.173 s, and it failed after
// all its attempts. It now goes at that step, as plain backoff does.
func TestProbeDoesNotSkipTheLifesStepThatPlainBackoffCatches(t *testing.T) {
	ms := time.Millisecond
	flappingHost{status: 503, pol: Policy{MaxRetries: 5, BaseDelay: 432 * ms, MaxDelay: 1296 * ms, Jitter: JitterFull},
		up: 1608 * ms, down2: 2065 * ms, bg: []time.Duration{763 * ms}, lStart: 649 * ms}.rescuedAsOff(t)
}

// TestProbeIsNotOutAtTheLifesLastStep: attempts take 177 ms; the host is
// back at 1.162 s. L's life has one step left, its last, at 1.1915 s. L
// probed at 1.0185 s; the probe failed at 1.1955 s, after that step, and
// the life was over with one retry unsent: L stopped with StopHostGate
// where plain backoff's last retry got the 200. A retry whose attempt
// would still be out at its life's last step no longer goes between steps.
func TestProbeIsNotOutAtTheLifesLastStep(t *testing.T) {
	ms := time.Millisecond
	flappingHost{status: 503, pol: Policy{MaxRetries: 4, BaseDelay: 117 * ms, MaxDelay: 234 * ms, Jitter: JitterFull},
		up: 1162 * ms, lat: 177 * ms, bg: []time.Duration{193 * ms}, lStart: 74 * ms}.rescuedAsOff(t)
}

// TestDecorrelatedJitterGrowsFromPlainBackoffsWait: decorrelated jitter
// draws each wait from the one before. L probed at 1.0415 s, and its
// next wait was cut to its life's next step, 38 ms later; drawn from that
// cut, its last wait was 214 ms where plain backoff's, drawn from 374.5
// ms, is 428 ms, and L's last retry went before the host was back. The
// next wait is now drawn from plain backoff's.
func TestDecorrelatedJitterGrowsFromPlainBackoffsWait(t *testing.T) {
	ms := time.Millisecond
	flappingHost{status: 503, pol: Policy{MaxRetries: 3, BaseDelay: 107 * ms, MaxDelay: 428 * ms, Jitter: JitterDecorrelated},
		up: 1336 * ms, down2: 2725 * ms, bg: []time.Duration{1374 * ms, 25 * ms}, lStart: 491 * ms}.rescuedAsOff(t)
}
