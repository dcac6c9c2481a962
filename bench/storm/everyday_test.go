package storm

import (
	"bytes"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/httpretry/httpretry/bench"
)

const ms = time.Millisecond

func TestPresets(t *testing.T) {
	for _, mode := range Modes {
		sc, err := Preset(mode, 0)
		if err != nil {
			t.Fatalf("%s: %v", mode, err)
		}
		if sc.Mode != mode {
			t.Errorf("%s: preset has mode %s", mode, sc.Mode)
		}
		if err := sc.Validate(); err != nil {
			t.Errorf("%s: %v", mode, err)
		}
	}
	if _, err := Preset("sideways", 0); err == nil {
		t.Error("an unknown mode had a preset")
	}
	if sc, _ := Preset(RandomClosed, 0); sc.FailRate != DefaultFailRate || sc.Workers != 20 {
		t.Errorf("random-closed by default: fail rate %v, %d workers", sc.FailRate, sc.Workers)
	}
	if sc, _ := Preset(RandomClosed, 0.6); sc.FailRate != 0.6 || sc.Workers != 8 || sc.RequestTimeout != 5*time.Second {
		t.Errorf("random-closed at 60%%: fail rate %v, %d workers, timeout %v", sc.FailRate, sc.Workers, sc.RequestTimeout)
	}
	if sc := ConcurrentDownPreset(); sc.Mode != Sequential || sc.Workers != 4 || sc.Calls != 5 || sc.Validate() != nil {
		t.Errorf("concurrent-down: mode %s, %d workers, %d calls", sc.Mode, sc.Workers, sc.Calls)
	}
	if sc := SequentialPreset(); sc.Calls != 4 || sc.Params != (bench.Params{MaxRetries: 5, BaseDelay: 200 * ms, MaxDelay: 2 * time.Second}) {
		t.Errorf("sequential: %d calls, %+v", sc.Calls, sc.Params)
	}
	// The staggered calls must come one by one while the host is down: the
	// last starts before the outage ends, and none with another.
	if sc := StaggeredPreset(); sc.Mode != Burst || sc.Validate() != nil || sc.Stagger <= 0 ||
		time.Duration(sc.Workers-1)*sc.Stagger >= sc.OutageEnd {
		t.Errorf("staggered: mode %s, %d workers %v apart, outage ends %v", sc.Mode, sc.Workers, sc.Stagger, sc.OutageEnd)
	}
	// Retry-After must exceed what the policy could wait on its own.
	if sc := RetryAfterLongPreset(); sc.RetryAfter <= time.Duration(sc.Params.MaxRetries)*sc.Params.MaxDelay {
		t.Errorf("retry-after-long: Retry-After %v within MaxRetries × MaxDelay", sc.RetryAfter)
	}

	bad := map[string]func(*Scenario){
		"burst without workers":       func(s *Scenario) { *s = BurstPreset(); s.Workers = 0 },
		"negative stagger":            func(s *Scenario) { *s = BurstPreset(); s.Stagger = -ms },
		"random-closed without time":  func(s *Scenario) { *s = RandomClosedPreset(0.05); s.Duration = 0 },
		"sequential without calls":    func(s *Scenario) { *s = SequentialPreset(); s.Calls = 0 },
		"retry-after-long without RA": func(s *Scenario) { *s = RetryAfterLongPreset(); s.RetryAfter = 0 },
		"herd without capacity":       func(s *Scenario) { *s = RetryAfterHerdPreset(); s.Capacity = 0 },
		"negative capacity":           func(s *Scenario) { *s = BurstPreset(); s.Capacity = -1 },
		"flapping without period":     func(s *Scenario) { *s = FlapPreset(); s.FlapPeriod = 0 },
		"flapping without rate":       func(s *Scenario) { *s = FlapPreset(); s.Rate = 0 },
		"negative flap period":        func(s *Scenario) { *s = Default(); s.FlapPeriod = -time.Second },
		"negative service time":       func(s *Scenario) { *s = SlowBurstPreset(); s.ServiceTime = -ms },
	}
	for name, spoil := range bad {
		var s Scenario
		spoil(&s)
		if s.Validate() == nil {
			t.Errorf("%s passed", name)
		}
	}
}

func TestCeilSeconds(t *testing.T) {
	for _, c := range []struct{ in, want time.Duration }{
		{0, time.Second}, {-time.Second, time.Second}, {1, time.Second}, {time.Second, time.Second},
		{time.Second + 1, 2 * time.Second}, {2700 * ms, 3 * time.Second},
	} {
		if got := ceilSeconds(c.in); got != c.want {
			t.Errorf("ceilSeconds(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if h := (Reply{RetryAfter: 3 * time.Second}).Header(); h != "3" {
		t.Errorf("header %q", h)
	}
	if h := (Reply{}).Header(); h != "" {
		t.Errorf("header %q without a Retry-After", h)
	}
}

func TestSequentialAlwaysDown(t *testing.T) {
	r := newRecorder(SequentialPreset())
	for i, at := range []time.Duration{0, time.Second, time.Minute} {
		if rep := r.Reply(at, uint64(i)+1); rep.Verdict != Down || rep.RetryAfter != 0 {
			t.Fatalf("at %v: %+v, want Down without Retry-After", at, rep)
		}
	}
	r.Reply(time.Second, 1)
	r.Done(1, 0, 2*time.Second, false)
	if got := r.requests[0].Attempts; got != 2 {
		t.Fatalf("request 1 recorded %d attempts, want 2", got)
	}
}

func TestRetryAfterLongReplies(t *testing.T) {
	r := newRecorder(RetryAfterLongPreset())
	steps := []struct {
		at    time.Duration
		id    uint64
		want  Verdict
		after time.Duration
	}{
		{0, 1, Throttled, 2 * time.Second}, // the first attempt: 429, Retry-After: 2
		{500 * ms, 1, Served, 0},           // early, but served
		{100 * ms, 2, Throttled, 2 * time.Second},
		{2200 * ms, 2, Served, 0}, // after the date: not early
		{2300 * ms, 2, Served, 0}, // no date pending any more: not early
	}
	for i, s := range steps {
		rep := r.Reply(s.at, s.id)
		if rep.Verdict != s.want || rep.RetryAfter != s.after {
			t.Fatalf("step %d: %+v, want %v with Retry-After %v", i, rep, s.want, s.after)
		}
	}
	m := compute(r.sc, r.Windows(), nil, 0, 0)
	if m.Early != 1 || m.Told != 2 {
		t.Fatalf("early %d of %d told, want 1 of 2", m.Early, m.Told)
	}
	if w := r.Windows(); w[0].ThrottledCount != 1 || w[1].ThrottledCount != 1 || w[5].EarlyCount != 1 {
		t.Fatalf("windows: %+v", w[:6])
	}
}

func TestHerdRetryAfter(t *testing.T) {
	sc := RetryAfterHerdPreset() // outage [1 s, 4 s)
	r := newRecorder(sc)
	steps := []struct {
		at    time.Duration
		id    uint64
		want  Verdict
		after time.Duration
	}{
		{500 * ms, 7, Served, 0},                    // before the outage: no Retry-After
		{1300 * ms, 7, Down, 3 * time.Second},       // 2.7 s left, rounded up: come back at 4.3 s
		{2 * time.Second, 7, Down, 2 * time.Second}, // early; now told 4.0 s
		{4 * time.Second, 7, Served, 0},             // on time
		{3900 * ms, 8, Down, time.Second},           // told 4.9 s
		{4500 * ms, 8, Served, 0},                   // the outage is over, but early
		{2 * time.Second, 0, Down, 2 * time.Second}, // an unknown request is told, never early
		{2100 * ms, 0, Down, 2 * time.Second},
	}
	for i, s := range steps {
		rep := r.Reply(s.at, s.id)
		if rep.Verdict != s.want || rep.RetryAfter != s.after {
			t.Fatalf("step %d: %+v, want %v with Retry-After %v", i, rep, s.want, s.after)
		}
	}
	m := compute(sc, r.Windows(), nil, 0, 0)
	if m.Early != 2 || m.Told != 5 {
		t.Fatalf("early %d of %d told, want 2 of 5", m.Early, m.Told)
	}

	// A fixed Retry-After replaces the date of the outage's end.
	sc.RetryAfter = 1500 * ms
	r = newRecorder(sc)
	if rep := r.Reply(1300*ms, 1); rep.RetryAfter != 2*time.Second {
		t.Fatalf("fixed Retry-After: %+v, want 2 s (rounded up)", rep)
	}
	// A quota after the outage: the excess over the capacity gets 429 with
	// the fixed Retry-After; a plain 503 without ThrottleShed.
	for _, throttle := range []bool{false, true} {
		sc.ThrottleShed, sc.Capacity, sc.Burst = throttle, 10, 1
		r = newRecorder(sc)
		r.Reply(5*time.Second, 1) // takes the one token
		rep, want, after := r.Reply(5*time.Second, 2), Shed, time.Duration(0)
		if throttle {
			want, after = Throttled, 2*time.Second
		}
		if rep.Verdict != want || rep.RetryAfter != after {
			t.Fatalf("over capacity, ThrottleShed %v: %+v, want %v with Retry-After %v", throttle, rep, want, after)
		}
	}
	// The other fleet modes tell nothing.
	r = newRecorder(Default())
	if rep := r.Reply(1300*ms, 1); rep.Verdict != Down || rep.RetryAfter != 0 || r.calls != nil {
		t.Fatalf("open mode: %+v, tracking %v", rep, r.calls != nil)
	}
}

func TestBurstHasNoCapacityLimit(t *testing.T) {
	r := newRecorder(BurstPreset())
	if v := r.Admit(999 * ms); v != Down {
		t.Fatalf("while down: %v", v)
	}
	for i := range 5000 {
		if v := r.Admit(time.Second); v != Served {
			t.Fatalf("attempt %d at the return: %v, want Served", i, v)
		}
	}
	if m := compute(r.sc, r.Windows(), nil, 0, 0); m.DownAttempts != 1 || m.PeakRatio != 0 {
		t.Fatalf("down attempts %d, peak ratio %v", m.DownAttempts, m.PeakRatio)
	}
}

func TestRandomClosedFails(t *testing.T) {
	const n = 10000
	flaky := admitFlaky(t, newRecorder(RandomClosedPreset(0.3)), n)
	// 30% of 10000: 3000, with a standard deviation of about 46.
	if flaky < 2800 || flaky > 3200 {
		t.Fatalf("%d of %d failed, want about 3000", flaky, n)
	}
}

func TestComputeEveryday(t *testing.T) {
	sc := SequentialPreset()
	reqs := []Request{ // finished out of order
		{ID: 2, Attempts: 1, Start: 3 * time.Second, Latency: 0},
		{ID: 1, Attempts: 6, Start: 0, Latency: 3 * time.Second},
		{ID: 3, Attempts: 2, Start: 3 * time.Second, Latency: 600 * ms, OK: true},
	}
	windows := []Window{{DownCount: 4, ToldCount: 1}, {Start: 100 * ms, DownCount: 3, EarlyCount: 1}}
	m := compute(sc, windows, reqs, 1, 0)
	if m.Mean != 1200*ms || m.Max != 3*time.Second || m.LastDone != 3600*ms {
		t.Errorf("mean %v max %v last done %v", m.Mean, m.Max, m.LastDone)
	}
	if !slices.Equal(m.CallAttempts, []int{6, 1, 2}) {
		t.Errorf("attempts by call %v, want [6 1 2]", m.CallAttempts)
	}
	if m.DownAttempts != 7 || m.Told != 1 || m.Early != 1 {
		t.Errorf("down %d told %d early %d", m.DownAttempts, m.Told, m.Early)
	}
	if m.PeakRatio != 0 || m.PeakAfterRatio != 0 { // no capacity: no ratio, not +Inf
		t.Errorf("peak ratios %v %v", m.PeakRatio, m.PeakAfterRatio)
	}
	if m := compute(BurstPreset(), windows, reqs, 1, 0); m.CallAttempts != nil {
		t.Errorf("burst lists attempts by call: %v", m.CallAttempts)
	}
}

func TestEverydayTables(t *testing.T) {
	cases := map[Mode]string{
		Sequential:     "attempts by call",
		Burst:          "last done after recovery",
		RandomClosed:   "attempts per request",
		RetryAfterLong: "early retries",
		RetryAfterHerd: "answers with Retry-After",
		Flapping:       "last done after arrivals end",
		Open:           "load × overall",
	}
	for mode, column := range cases {
		sc, _ := Preset(mode, 0)
		res := Results{Scenario: sc, Systems: []SystemResult{
			{Name: "a", Metrics: Metrics{Requests: 4, Attempts: 8, CallAttempts: []int{2, 2, 2, 2}}},
			{Name: "b"},
		}}
		var b bytes.Buffer
		WriteTable(&b, res)
		lines := strings.Split(strings.TrimSpace(b.String()), "\n")
		if len(lines) != 4 || !strings.Contains(lines[0], column) || !strings.HasPrefix(lines[2], "| a |") {
			t.Errorf("%s table:\n%s", mode, b.String())
		}
		if mode == Sequential && !strings.Contains(lines[2], "| 2.00 | 2, 2, 2, 2 |") {
			t.Errorf("sequential row: %s", lines[2])
		}
		b.Reset()
		Describe(&b, sc)
		if !strings.HasPrefix(b.String(), "Mode "+string(mode)) || strings.Count(b.String(), "\n") != 1 {
			t.Errorf("%s description: %q", mode, b.String())
		}
	}
}

func TestChartWithoutCapacity(t *testing.T) {
	sc := BurstPreset()
	res := Results{Scenario: sc, Systems: []SystemResult{{Name: "a", Windows: []Window{
		{Attempts: 200, DownCount: 200}, {Start: 100 * ms}, {Start: 1000 * ms, Attempts: 200, Served: 200},
	}}}}
	if !sc.Charted() || SequentialPreset().Charted() || RetryAfterLongPreset().Charted() {
		t.Fatal("Charted: burst should have a chart, sequential and retry-after-long none")
	}
	if err := WriteChart(io.Discard, res); err != nil {
		t.Fatal(err)
	}
}

// TestDriversOnLoopback runs the single-client drivers end to end against
// the loopback server, with systems that never wait (bare and the naive
// loop), so that nothing sleeps.
func TestDriversOnLoopback(t *testing.T) {
	systems, ok := bench.Lookup([]string{"bare", "naive loop"})
	if !ok {
		t.Skip("bare or naive loop is not among the systems")
	}
	bare, naive := systems[0], systems[1]

	seq := SequentialPreset()
	seq.Calls = 3
	m := runOne(seq, naive).Metrics
	if m.Requests != 3 || m.Attempts != 18 || !slices.Equal(m.CallAttempts, []int{6, 6, 6}) || m.Success != 0 {
		t.Errorf("sequential, naive loop: %d requests, %d attempts, by call %v, success %v", m.Requests, m.Attempts, m.CallAttempts, m.Success)
	}

	conc := ConcurrentDownPreset()
	conc.Calls = 2 // 4 goroutines × 2 calls
	m = runOne(conc, naive).Metrics
	if m.Requests != 8 || m.Attempts != 48 || m.Success != 0 {
		t.Errorf("concurrent-down, naive loop: %d requests, %d attempts, success %v", m.Requests, m.Attempts, m.Success)
	}

	long := RetryAfterLongPreset()
	m = runOne(long, naive).Metrics
	if m.Requests != 1 || m.Attempts != 2 || m.Early != 1 || m.Told != 1 || m.Success != 1 {
		t.Errorf("retry-after-long, naive loop: %+v", m)
	}

	burst := BurstPreset()
	burst.Workers, burst.OutageEnd = 20, 0 // never down: nothing to wait for
	m = runOne(burst, bare).Metrics
	if m.Requests != 20 || m.Attempts != 20 || m.Success != 1 {
		t.Errorf("burst, bare: %d requests, %d attempts, success %v", m.Requests, m.Attempts, m.Success)
	}

	rc := RandomClosedPreset(0.3)
	rc.Workers, rc.Duration = 2, 50*ms
	m = runOne(rc, naive).Metrics
	if m.Requests == 0 || m.Attempts < m.Requests || m.Success < 0.9 {
		t.Errorf("random-closed, naive loop: %d requests, %d attempts, success %v", m.Requests, m.Attempts, m.Success)
	}

	res, err := Run(long, []bench.System{bare, naive}) // run side by side
	if err != nil || len(res.Systems) != 2 || res.Systems[0].Name != "bare" || res.Systems[1].Metrics.Early != 1 {
		t.Errorf("Run in parallel: %v %+v", err, res.Systems)
	}
}

func TestFlapPresetAndVerdict(t *testing.T) {
	sc := FlapPreset()
	if sc.Mode != Flapping || sc.Clients != 1 || sc.Rate != 50 || sc.Capacity != 0 || sc.FlapPeriod != time.Second ||
		sc.RequestTimeout != 10*time.Second || sc.Params != bench.DefaultParams || sc.Validate() != nil {
		t.Fatalf("flap preset: %+v", sc)
	}
	r := newRecorder(sc)
	steps := []struct {
		at   time.Duration
		want Verdict
	}{
		{0, Down}, {999 * ms, Down}, // the first interval is down
		{time.Second, Served}, {1999 * ms, Served},
		{2 * time.Second, Down}, {2500 * ms, Down},
		{3500 * ms, Served},
		{sc.Duration - time.Second - ms, Down}, // [10 s, 11 s): the last down interval
		{sc.Duration - ms, Served},
		{sc.Duration, Served}, // [12 s, 13 s) would be down, but arrivals are over
		{sc.Duration + 2*time.Second, Served},
	}
	for i, s := range steps {
		if v := r.Admit(s.at); v != s.want {
			t.Fatalf("step %d at %v: %v, want %v", i, s.at, v, s.want)
		}
	}
	// No capacity limit: an up interval serves whatever comes.
	for i := range 5000 {
		if v := r.Admit(1500 * ms); v != Served {
			t.Fatalf("attempt %d in an up interval: %v", i, v)
		}
	}
	if m := compute(sc, r.Windows(), nil, 0, 0); m.DownAttempts != 5 || m.PeakRatio != 0 {
		t.Fatalf("down attempts %d, peak ratio %v", m.DownAttempts, m.PeakRatio)
	}
	// Without a period, the other modes never flap.
	if r := newRecorder(RandomClosedPreset(0)); r.sc.flapDown(0) || r.sc.flapDown(2*time.Second) {
		t.Fatal("a scenario without a flap period flapped")
	}
}

func TestFlapChartShading(t *testing.T) {
	sc := FlapPreset()
	spans := downSpans(sc)
	if len(spans) != 6 || spans[0] != [2]float64{0, 1} || spans[5] != [2]float64{10, 11} {
		t.Fatalf("flap shading: %v", spans)
	}
	sc.Duration = 2500 * ms // the last down interval is cut at the end of arrivals
	if spans := downSpans(sc); len(spans) != 2 || spans[1] != [2]float64{2, 2.5} {
		t.Fatalf("flap shading cut at 2.5 s: %v", spans)
	}
	if spans := downSpans(BurstPreset()); len(spans) != 1 || spans[0] != [2]float64{0, 1} {
		t.Fatalf("burst shading: %v", spans)
	}
	res := Results{Scenario: FlapPreset(), Systems: []SystemResult{{Name: "a", Windows: []Window{{Attempts: 5, DownCount: 5}}}}}
	if err := WriteChart(io.Discard, res); err != nil {
		t.Fatal(err)
	}
}

func TestSlowBurstPreset(t *testing.T) {
	sc := SlowBurstPreset()
	want := BurstPreset()
	want.ServiceTime = 200 * ms
	if sc != want || sc.Validate() != nil {
		t.Fatalf("slow burst: %+v", sc)
	}
	var b bytes.Buffer
	Describe(&b, sc)
	if !strings.HasPrefix(b.String(), "Mode burst") || !strings.Contains(b.String(), "takes 200ms over every attempt") || strings.Count(b.String(), "\n") != 1 {
		t.Errorf("slow burst description: %q", b.String())
	}
	b.Reset()
	Describe(&b, BurstPreset())
	if strings.Contains(b.String(), "takes") {
		t.Errorf("burst description names a service time: %q", b.String())
	}
}

// bareSystem returns the system that never retries, alone, or skips t.
func bareSystem(t *testing.T) []bench.System {
	systems, ok := bench.Lookup([]string{"bare"})
	if !ok {
		t.Skip("bare is not among the systems")
	}
	return systems
}

// TestServiceTimeOnLoopback sends a burst through bare against a server
// that takes ServiceTime over each answer and is down only until half of
// it has passed: every request takes at least ServiceTime, and every one
// succeeds, because the verdict is decided once the time is over, when
// the host is back.
func TestServiceTimeOnLoopback(t *testing.T) {
	systems := bareSystem(t)
	sc := SlowBurstPreset()
	sc.Workers, sc.ServiceTime, sc.OutageEnd = 10, 100*ms, 50*ms
	m := runOne(sc, systems[0]).Metrics
	if m.Requests != 10 || m.Attempts != 10 || m.Success != 1 || m.DownAttempts != 0 {
		t.Errorf("%d requests, %d attempts, success %v, %d answered down", m.Requests, m.Attempts, m.Success, m.DownAttempts)
	}
	if m.P50 < sc.ServiceTime || m.Max < sc.ServiceTime || m.Max > sc.ServiceTime+time.Second {
		t.Errorf("latency p50 %v, max %v with a service time of %v", m.P50, m.Max, sc.ServiceTime)
	}

	sc.ServiceTime = 0 // answered at once, within the outage
	if m := runOne(sc, systems[0]).Metrics; m.Success != 0 || m.DownAttempts != 10 || m.Max >= 50*ms {
		t.Errorf("without service time: success %v, %d answered down, max %v", m.Success, m.DownAttempts, m.Max)
	}
}

// TestFlapOnLoopback runs a short, fast flapping host end to end through
// bare, which never retries: about half of the requests arrive in a down
// interval and fail, the others succeed, and the host is never down after
// arrivals end.
func TestFlapOnLoopback(t *testing.T) {
	systems := bareSystem(t)
	sc := FlapPreset()
	sc.Rate, sc.Duration, sc.FlapPeriod = 1000, 400*ms, 50*ms
	res, err := Run(sc, systems)
	if err != nil {
		t.Fatal(err)
	}
	m := res.Systems[0].Metrics
	if m.Requests < 300 || m.Attempts != m.Requests || m.Success < 0.3 || m.Success > 0.7 {
		t.Fatalf("%d requests, %d attempts, success %v", m.Requests, m.Attempts, m.Success)
	}
	if failed := m.Requests - int(m.Success*float64(m.Requests)+0.5); m.DownAttempts != failed {
		t.Errorf("%d attempts answered down, %d requests failed", m.DownAttempts, failed)
	}
	if m.DownUntil >= sc.Duration {
		t.Errorf("down until %v, after arrivals ended at %v", m.DownUntil, sc.Duration)
	}
}
