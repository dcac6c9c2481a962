package httpretry

import (
	"context"
	"time"
)

// hold holds the retry due at due while storm control says so. A held
// request keeps its own backoff's steps: at each it goes, or skips it,
// taken as sent and failed as the host's other attempts are, or puts it
// off when it is owed (see host.owes), and waits for the next, which the
// line may let it go before; its last step goes, but when owed and it
// may be put off (see putOff). It reports whether the retry was held, or
// why it is not sent: the deadline reached (StopHostGate), or ctx
// canceled; MaxElapsed is never reached in a hold, as the step before it
// is the last and goes, put off only so far that its attempt ends before
// it. A retry that goes at its first look was not held, however long the
// look took; one due at its last step goes at its first look, owed or not
// (held and put off too, those of the fleet with 12% spare capacity lost
// 108-152 of plain backoff's rescues over seeds 1-4, against 120-131).
func (r *retrier) hold(ctx context.Context, due time.Time) (held bool, stop StopReason) {
	st, m := r.st, r.m
	if base, _ := r.pol.bounds(); base <= 0 || m.h == nil || !m.h.ask(m, !r.limit().IsZero(), due) || r.lastStep(r.step(), due, nil) {
		if m.inLine {
			m.h.abandon(m, due) // out of line: a release it was given goes to the next
		}
		return false, StopNone
	}
	st.held.Add(1)
	defer st.held.Add(-1)
	m.h.enqueue(m, place{limit: r.limit(), spare: true}) // a retry sent at once stands for this step: no next to be back by
	// The step it is due at (cur) goes by the step's rules, as every later
	// one: when it went only as a retry between steps would, groups on a
	// flapping host lost 1,958 rescues in 61,449 requests, now 1,670; a
	// dead host gets 4.4 attempts per call for it, against 3.6 (plain
	// backoff 6).
	// owed: cur is a step put off, putOffs times so far, not skipped (see
	// host.owes).
	cur, owed, putOffs := heldStep{from: due}, false, 0
	for waited := false; ; waited = true { // waited: a step skipped or a pause
		now, next := time.Now(), cur.at()
		atStep := !now.Before(next)
		// Whether the step is its last is known only now, the host's
		// Retry-After timing the next. The skip times are read once, so
		// that the next step is the one found within the limits: read
		// again, a Retry-After told another request in between put it
		// past MaxElapsed, and sent it there.
		var skip skipTimes
		last, owes := false, false
		if atStep {
			skip, owes = r.skipTimes(), m.h.owes(m, now)
			if last = r.lastStep(r.step(), next, &skip); last && owes {
				_, owes = r.putOff(next, putOffs, skip) // owed, the last goes only as the others do, if it may be put off
			}
		}
		send, wake := m.h.poll(m, now, atStep, last && !owes)
		switch {
		case send:
			if !atStep && !owed { // an extra retry: the step still comes
				m.extra, m.left = m.extra+1, cur
			}
			m.inLine = true
			return waited, StopNone
		case atStep:
			if cur, owed = r.nextStep(next, skip, putOffs, owes); owed {
				putOffs++
			}
			p := r.place(cur.at(), false)
			p.owed = owed
			m.h.enqueue(m, p)
		default:
			if err := m.pause(ctx, earlierOf(wake, next).Sub(now)); err == context.DeadlineExceeded {
				return true, StopHostGate // the deadline is a hold's limit, not a failure
			} else if err != nil {
				return true, StopCanceled
			}
		}
	}
}

// pause waits d, or until m is nudged, and returns ctx's error if it ends
// first, m then out of line.
func (m *member) pause(ctx context.Context, d time.Duration) error {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		m.h.abandon(m, time.Now())
		return ctx.Err()
	case <-m.wake:
	case <-timer.C:
	}
	return nil
}

// waitInLine waits, in its host's line, until due, the step of a request
// held before: the line may let it go before (went), but not before the
// Retry-After it was told: as a retry between steps, standing for a step
// it skipped, or, with none left to stand for (each stood for already, as
// by the line's probes), as the step at due itself, sent early (see
// host.mayGoEarly); stop says why it stopped waiting, the deadline or a
// cancel.
func (r *retrier) waitInLine(ctx context.Context, due time.Time) (went bool, stop StopReason) {
	m := r.m
	m.h.enqueue(m, r.place(due, true))
	for now := time.Now(); now.Before(due); now = time.Now() {
		if send, wake := m.h.poll(m, now, false, false); send { // released by the host's answers
			if m.extra < m.skipped { // a retry between steps, standing for one skipped
				m.extra, m.left = m.extra+1, heldStep{from: due}
			} else { // the step itself, sent early: the steps after it keep their times (see plan)
				m.late = now.Sub(due)
			}
			return true, StopNone
		} else if err := m.pause(ctx, earlierOf(wake, due).Sub(now)); err != nil {
			return false, stopFor(err)
		}
	}
	return false, StopNone
}

// ownSteps is a retrying request's place in its own backoff, which storm
// control's holds move through; only its request's goroutine uses it.
type ownSteps struct {
	n              int        // the attempts sent
	skipped, extra int        // the steps of its own backoff that storm control skipped; its retries sent between steps, each standing for a step skipped before
	inLine         bool       // it was held: it waits in line, where the host's answers may let it go before its steps
	ahead          [4]float64 // random values drawn ahead, used first (see stepWait)
	nAhead         int        // how many
	untimed        int        // the steps skipped before any of its attempts was timed (see heldWait)
	until          time.Time  // when the wait before its next retry ends, when a step sets it; it waits r.floor at least
	// drift is how far its steps run ahead of plain backoff's (which
	// drained the attempts they skipped, or waited a Retry-After from the
	// step), or behind; late, how late the step its latest attempt stood
	// for went, negative when early.
	drift, late time.Duration
	left        heldStep // the step a retry sent between steps left to come
}

// heldStep is a step of a held request's own backoff: when the step
// before it, and the attempt that stood for it, ended (from); its own
// backoff; and its wait's floor, a Retry-After spread by u.
type heldStep struct {
	from       time.Time
	own, floor time.Duration
	u          float64
}

// at returns when s comes; a zero floor spreads to zero.
func (s heldStep) at() time.Time { return s.from.Add(max(s.own, spreadUp(s.floor, s.u))) }

// nextStep skips the step that came at at, which counts as a retry sent
// that failed as long as its own attempts take, its response drained as
// the host's latest (see skipTimes.stepDrain), and returns the next,
// which waits at least a Retry-After while the host still says one (see
// skipTimes.floor). An owed step (see host.owes) is put off instead, if
// it may be (see putOff), and counts as nothing.
func (r *retrier) nextStep(at time.Time, skip skipTimes, putOffs int, owed bool) (heldStep, bool) {
	if owed {
		if put, ok := r.putOff(at, putOffs, skip); ok {
			return put, true
		}
	}
	r.m.skipped, r.m.drift = r.m.skipped+1, r.m.drift+skip.drain-skip.stepDrain
	if !r.m.took.timed { // m.took is read without h.mu (see heldWait)
		r.m.untimed++
	}
	s := r.stepFrom(r.step(), r.skippedEnd(at, skip), skip, true)
	r.prev = s.at().Sub(s.from)
	return s, false
}

// putOff returns the step at at put off for the putOffs-th time before,
// and whether it may be put off so. It waits the backoff of as many steps
// after it, with the random value its own draw will use (peeked, so that
// its waits draw as plain backoff's do), and no Retry-After floor, as no
// attempt went to be told one. The policy's base delay bounds it below: a
// draw near zero, or a Random that returns 0, put it off by nothing,
// again and again, without end; and it grows, as the held request's own
// backoff would (not with decorrelated jitter, whose waits do not grow
// with the step), so that a long shed window puts it off a few times,
// not once each base delay. It may not come as the request's last step
// (skipped instead, the step after it fits the limits: see lastStep), nor
// after plain backoff's step could, each wait before it at MaxDelay from
// the request's first failure, so that its later steps, MaxDelay apart
// at most, end it within plain backoff's longest life (a held request
// without a deadline put off through a long shed window outlived it:
// TestEveryRequestKeepsItsContractUnderRandomTraffic, seed 671 of 3,000).
// The last step stays the last, its attempt (as long as skip.fit: see
// skipTimes) ending within the limits: sent at its time, into a host at
// its capacity, it lost 4.25-4.55% of plain backoff's rescues in the
// fleet with 12% spare capacity, and 3.10-3.47% put off
// (TestHeldRequestsLoseFewOfPlainBackoffsRescues).
func (r *retrier) putOff(at time.Time, putOffs int, skip skipTimes) (heldStep, bool) {
	s := r.stepFrom(r.step()+putOffs, at, skipTimes{}, false)
	base, most := r.pol.bounds() // base over zero: hold holds nothing otherwise
	s.own = max(s.own, base)
	inLife := !s.at().After(r.m.firstFailed.Add(times(r.step(), most)))
	if r.lastStep(r.step(), at, &skip) { // it stays the last: its attempt still ends within the limits
		return s, inLife && r.pastLimits(s.at().Add(skip.announced+skip.fit)) == StopNone
	}
	return s, inLife && !r.lastStep(r.step(), s.at(), &skip)
}

// skippedEnd returns when the step at at, skipped, is taken to have
// failed (see nextStep).
func (r *retrier) skippedEnd(at time.Time, skip skipTimes) time.Time {
	return at.Add(skip.announced + r.m.took.avg + skip.stepDrain)
}

// skipTimes returns what a step the request skips now stands for.
func (r *retrier) skipTimes() skipTimes {
	s := r.m.h.skipTime(r.m)
	s.announced = time.Duration(r.st.announced.Load())
	return s
}

// stepFrom returns the step of retry k that comes after from: its own
// backoff, drawn ahead unless take (see stepWait), and a floor of skip's
// Retry-After, or longer, until the window's end the host named (see
// skipTimes.named): a zero or past one leaves the floor, as it subtracts
// to no more than zero.
func (r *retrier) stepFrom(k int, from time.Time, skip skipTimes, take bool) heldStep {
	floor := max(skip.floor, skip.named.Sub(from))
	own, u := r.stepWait(k, floor, take)
	return heldStep{from: from, own: own, floor: floor, u: u}
}

// lastStep reports whether retry k, due at at, is the request's last: no
// retry follows it, or the next one's wait would end past the deadline or
// MaxElapsed, as plain backoff would not start it. Until one of its
// attempts is timed, its attempts, and the steps it skipped, are taken to
// last as long as the host's longest (see skipTime): a step taken for the
// last too early goes on as plain backoff once its attempt is timed (see
// heldWait); with the host's average attempt, and none for a skipped
// step, a request whose attempts took longer than the others' ended up
// to 2.2 s after plain backoff. The next step as it comes when this one
// is skipped is checked too: a floor that waits until a named moment is
// longer from an earlier end, and its spread ended past MaxElapsed.
// skip is what the step stands for if skipped (see nextStep); nil reads
// it now.
func (r *retrier) lastStep(k int, at time.Time, skip *skipTimes) bool {
	if k >= r.pol.retries() || !replayable(r.req, r.t.RetryAllMethods) {
		return true
	}
	if r.limit().IsZero() {
		return false
	}
	if skip == nil {
		now := r.skipTimes()
		skip = &now
	}
	fitted := r.stepFrom(k+1, at.Add(skip.announced+skip.fit), *skip, false)
	skipped := r.stepFrom(k+1, r.skippedEnd(at, *skip), *skip, false)
	return r.pastLimits(fitted.at()) != StopNone || r.pastLimits(skipped.at()) != StopNone
}

// heldWait returns the wait before the next retry of a held request when
// its steps set it (set): after a retry sent between steps, as leftWait
// says; after a step that went early, its attempts not yet timed (see
// early below), and was the last plain backoff sends, until plain backoff
// sends it, as it goes again then. Otherwise the steps after one that
// went early or late are put off or brought forward by as much (see
// plan).
func (r *retrier) heldWait(now time.Time, floor time.Duration, told bool) (wait time.Duration, stop StopReason, set bool) {
	// early: how much later than its own steps plain backoff's come. Each
	// step skipped before any of its attempts was timed stood for an
	// attempt that took no time; once one is, for one that took as long.
	// It is counted once. heldWait runs after a failed retry, which was
	// timed (see retrier.sending), so its attempts are; m.took, written only
	// by its request's goroutine, is read without h.mu.
	early, left := times(r.m.untimed, r.m.took.avg), r.m.left
	r.m.untimed, r.m.left = 0, heldStep{}
	if !left.from.IsZero() {
		left.from = left.from.Add(early)
		return r.leftWait(now, left, floor, told)
	}
	if early == 0 {
		return 0, StopNone, false
	}
	r.m.late -= early
	if k := r.step(); k <= r.pol.retries() {
		if own, _ := r.stepWait(k, 0, false); r.pastLimits(now.Add(early+own)) == StopNone {
			return 0, StopNone, false
		}
	}
	if told { // it would go a whole Retry-After after plain backoff's last
		return 0, StopHostGate, true
	}
	r.m.extra, r.m.until, r.m.late, r.floor = r.m.extra+1, r.sent.Add(early), 0, 0
	wait = max(r.m.until.Sub(now), 0)
	return wait, r.cutShort(now, wait), true
}

// leftWait returns the wait after a retry sent between steps: until left,
// the step it left to come (its own backoff from now when the retry was
// still out at it), re-timed by the Retry-After it was told, or none, and
// no earlier than that Retry-After's end. A Retry-After that outlasts the
// step makes the retry stand for that step, unless the step is its last
// (set false: it waits as plain backoff would from there).
func (r *retrier) leftWait(now time.Time, left heldStep, floor time.Duration, told bool) (wait time.Duration, stop StopReason, set bool) {
	// Re-timed by what it was told (a longer one puts it off below): all
	// of it, as plain backoff's attempt at the step would be told it
	// again, or, when it named a date, what is left of it then, as the
	// date is the same whoever is told it.
	toldLeft := floor
	if r.m.told.dated {
		toldLeft = max(r.m.told.at.Add(r.m.told.floor).Sub(left.from), 0)
	}
	left.floor = min(left.floor, toldLeft)
	if left.at().Before(now) {
		// Still out at its step: the step waits its own backoff from the
		// failure, as plain backoff's next waits from its attempt's (sent
		// at once, it made an attempt more than plain backoff). A step
		// waited in line (see waitInLine) has none left: its backoff ended
		// at it. Waiting it again from the failure moved no drawn hunt past
		// its spread (300 groups on a host of limited capacity: 317 of
		// 3,966 rescues lost, 301-318 without).
		left.from = now
	}
	if at := left.at(); !told || !at.Before(now.Add(floor)) || r.lastStep(r.step(), at, nil) {
		r.m.late, r.m.until, r.floor = 0, at, floor
		wait = max(at.Sub(now), floor)
		return wait, r.cutShort(now, wait), true
	}
	// Told a Retry-After that outlasts the step, the retry stood for that
	// step, sent early: it waits from there as plain backoff would. Not
	// for its last step (above), by MaxRetries or by the deadline or
	// MaxElapsed: the request would have none left to go, where plain
	// backoff's goes and may find the host back.
	r.m.extra, r.m.late = r.m.extra-1, r.sent.Sub(left.at())
	return 0, StopNone, false
}

// place returns where the held request waits in line for its step at
// next: through its own backoff's wait (own), or for a step of its hold.
func (r *retrier) place(next time.Time, own bool) place {
	p := place{nextAt: next, last: r.lastStep(r.step(), next, nil), limit: r.limit(), spare: r.m.extra < r.m.skipped, ownWait: own}
	if own {
		p.notBefore = time.Now().Add(r.floor)
	}
	return p
}

// limit returns the earlier of the deadline and MaxElapsed's end; zero
// when neither bounds the request.
func (r *retrier) limit() time.Time {
	dl, _ := r.req.Context().Deadline()
	if r.t.MaxElapsed > 0 {
		dl = earlierOf(dl, r.start.Add(r.t.MaxElapsed))
	}
	return dl
}

// step returns the retry the request waits for: its attempts sent, but
// those sent between steps, and the steps it has skipped.
func (r *retrier) step() int { return r.m.n - r.m.extra + r.m.skipped }

// stepWait returns the own backoff before retry k and, with a floor, the
// random value that spreads its wait above it; a peek draws them ahead,
// to be used in turn by the next draw, so that a held request's waits use
// them in the order plain backoff does.
func (r *retrier) stepWait(k int, floor time.Duration, take bool) (own time.Duration, u float64) {
	own, used := r.pol.Delay(k, r.prev, r.drawn(0)), 1
	if floor > 0 {
		u, used = r.drawn(1), 2
	}
	if take {
		r.useDrawn(used)
	}
	return own, u
}

// drawn returns the random value i places ahead, drawing it when it is the
// first not yet drawn.
func (r *retrier) drawn(i int) float64 {
	if i == r.m.nAhead {
		r.m.ahead[i], r.m.nAhead = r.t.random(), i+1
	}
	return r.m.ahead[i]
}

// useDrawn drops the first n values drawn ahead, used.
func (r *retrier) useDrawn(n int) { r.m.nAhead = copy(r.m.ahead[:], r.m.ahead[n:r.m.nAhead]) }

// random returns the next random value: one drawn ahead (see stepWait),
// or a new one. It is used only once drawn, so that a Random that panics
// reaches the caller as its own panic.
func (r *retrier) random() float64 {
	u := r.drawn(0)
	r.useDrawn(1)
	return u
}
