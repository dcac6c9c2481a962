package storm

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Metrics sum up one system's run.
type Metrics struct {
	// Requests is the logical requests sent; Attempts the requests the
	// server received for them.
	Requests, Attempts int
	// Amplification is Attempts ÷ Requests over the whole run;
	// OutageAmplification the same over the windows of the outage.
	Amplification, OutageAmplification float64
	// Peak is the most attempts in one window, overall and in the windows
	// from the outage's end on; PeakRatio and PeakAfterRatio are those
	// over the server's capacity per window.
	Peak, PeakAfter           int
	PeakRatio, PeakAfterRatio float64
	// Recovered reports whether the server's success rate (Served ÷
	// Attempts per window) got back to at least 95% for good before new
	// requests stopped; Recovery is how long after the outage's end.
	Recovered bool
	Recovery  time.Duration
	// DownUntil is the time of the server's last Down answer: the
	// outage's real end, later than the planned one when it collapsed.
	DownUntil time.Duration
	// Success is the share of logical requests that finally got a 200.
	Success float64
	// P50 and P99 are latency percentiles over every logical request;
	// Mean and Max its mean and the longest.
	P50, P99  time.Duration
	Mean, Max time.Duration
	// LastDone is when the last logical request finished, from the start
	// of the run.
	LastDone time.Duration
	// DownAttempts is the attempts answered Down: sent while the host was
	// down (its outage, a collapse, or Sequential's host that never
	// answers otherwise).
	DownAttempts int
	// Told is the answers that carried a Retry-After; Early the attempts
	// that arrived before the date their logical request was last told.
	Told, Early int
	// CallAttempts is the attempts of each logical request in the order
	// they were sent, in the modes that make calls in a row (Sequential,
	// RetryAfterLong); nil in the others.
	CallAttempts []int
	// Conns is the connections the server accepted.
	Conns int
	// Lag is the longest a logical request was sent after its arrival
	// time: the simulator falling behind on a busy machine. Tens of
	// milliseconds or more mean the run measured the machine as much as
	// the system.
	Lag time.Duration
	// Runs is how many runs it took to get one whose Lag was within
	// Scenario.LagLimit, or Reruns+1 when none was.
	Runs int
}

// recoveredRate is the success rate at the server that counts as recovered.
const recoveredRate = 0.95

// compute derives the metrics of a run from its windows and requests.
func compute(sc Scenario, windows []Window, reqs []Request, conns int, downUntil time.Duration) Metrics {
	m := Metrics{Requests: len(reqs), Conns: conns, DownUntil: downUntil}
	var outAttempts, outArrivals int
	for _, w := range windows {
		m.Attempts += w.Attempts
		m.Peak = max(m.Peak, w.Attempts)
		if w.Start >= sc.OutageStart && w.Start < sc.OutageEnd {
			outAttempts += w.Attempts
			outArrivals += w.Arrivals
		}
		if w.Start >= sc.OutageEnd {
			m.PeakAfter = max(m.PeakAfter, w.Attempts)
		}
		m.DownAttempts += w.DownCount
		m.Told += w.ToldCount
		m.Early += w.EarlyCount
	}
	m.Amplification = ratio(m.Attempts, m.Requests)
	m.OutageAmplification = ratio(outAttempts, outArrivals)
	if per := sc.perWindow(); per > 0 { // else no capacity to compare with
		m.PeakRatio = float64(m.Peak) / per
		m.PeakAfterRatio = float64(m.PeakAfter) / per
	}
	m.Recovery, m.Recovered = recovery(sc, windows)

	lat := make([]time.Duration, 0, len(reqs))
	ok := 0
	var sum time.Duration
	for _, r := range reqs {
		lat = append(lat, r.Latency)
		sum += r.Latency
		m.LastDone = max(m.LastDone, r.Start+r.Latency)
		if r.OK {
			ok++
		}
	}
	m.Success = ratio(ok, len(reqs))
	slices.Sort(lat)
	m.P50, m.P99 = percentile(lat, 0.50), percentile(lat, 0.99)
	if len(lat) > 0 {
		m.Mean, m.Max = sum/time.Duration(len(lat)), lat[len(lat)-1]
	}
	if sc.Mode == Sequential || sc.Mode == RetryAfterLong {
		m.CallAttempts = callAttempts(reqs)
	}
	return m
}

// callAttempts lists the attempts of each request in the order sent.
func callAttempts(reqs []Request) []int {
	byID := slices.Clone(reqs)
	slices.SortFunc(byID, func(a, b Request) int { return cmp.Compare(a.ID, b.ID) })
	out := make([]int, len(byID))
	for i, r := range byID {
		out[i] = r.Attempts
	}
	return out
}

// recovery returns how long after the outage's end the server's success
// rate is at least recoveredRate in every window up to the end of
// arrivals; false when it never is.
func recovery(sc Scenario, windows []Window) (time.Duration, bool) {
	back := sc.OutageEnd
	for _, w := range windows {
		if w.Start < sc.OutageEnd || w.Start >= sc.Duration {
			continue
		}
		if w.Attempts > 0 && float64(w.Served) < recoveredRate*float64(w.Attempts) {
			back = w.Start + sc.Window
		}
	}
	if back >= sc.Duration {
		return 0, false
	}
	return back - sc.OutageEnd, true
}

// percentile returns the q-quantile of sorted (nearest rank), 0 for none.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1 // the ⌈q·n⌉-th value; the epsilon guards a whole rank against float error
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// ratio is a ÷ b, 0 when b is 0.
func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
