package storm

import (
	"sync"
	"time"
)

// The drivers of the single-client modes: every one sends through
// f.clients[0], the one RoundTripper a newcomer builds and shares.

// inRow makes Scenario.Calls calls one after the other from each of
// Scenario.Workers goroutines (one when zero), each sent as soon as the
// one before has its answer.
func (f *fleet) inRow() {
	var wg sync.WaitGroup
	for range max(f.sc.Workers, 1) {
		wg.Go(func() {
			for range f.sc.Calls {
				f.do(f.clients[0], f.since())
			}
		})
	}
	wg.Wait()
}

// burst starts Scenario.Workers goroutines that wait at a gate, opens it,
// and lets each send one request, so that they start as close to
// together as the scheduler allows, as a fan-out does; or, with a
// Stagger, Stagger apart.
func (f *fleet) burst() {
	gate := make(chan struct{})
	var wg sync.WaitGroup
	for i := range f.sc.Workers {
		wg.Go(func() {
			<-gate
			time.Sleep(time.Duration(i) * f.sc.Stagger)
			f.do(f.clients[0], f.since())
		})
	}
	close(gate)
	wg.Wait()
}

// backToBack runs Scenario.Workers goroutines that each send a request as
// soon as the last one has its answer, until Duration; requests in flight
// then are let finish.
func (f *fleet) backToBack() {
	var wg sync.WaitGroup
	for range f.sc.Workers {
		wg.Go(func() {
			for f.since() < f.sc.Duration {
				f.do(f.clients[0], f.since())
			}
		})
	}
	wg.Wait()
}
