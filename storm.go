package httpretry

import (
	"sync/atomic"
	"unsafe"
)

// stormState is a Transport's storm-control state: its retry budget. It is built on first use, so that the zero Transport works, and
// reached through one atomic pointer load per request.
type stormState struct {
	budget *Budget // nil when the budget is off
}

// storm returns the Transport's storm-control state, building it once. Two
// first requests racing here may both build one; only the first stored is
// ever used.
func (t *Transport) storm() *stormState {
	if p := atomic.LoadPointer(&t.stormPtr); p != nil {
		return (*stormState)(p)
	}
	s := &stormState{}
	if !t.NoBudget {
		s.budget = t.Budget
		if s.budget == nil {
			s.budget = &Budget{}
		}
	}
	if atomic.CompareAndSwapPointer(&t.stormPtr, nil, unsafe.Pointer(s)) {
		return s
	}
	return (*stormState)(atomic.LoadPointer(&t.stormPtr))
}
