package httpretry

import "context"

// policyKey is the context key of a per-call Policy.
type policyKey struct{}

// WithPolicy returns a copy of ctx under which requests follow p instead
// of their Transport's Policy: set it on a request's context, or on the
// context an SDK passes down to its requests, to change the retries of
// those calls only. p replaces the whole Policy: its zero fields mean the
// library's defaults, not the Transport's, so start from the Transport's
// Policy to change one field; out-of-range values mean what they mean
// there. The Transport looks the context up only when an attempt has
// failed with a retryable outcome, or before reading ahead a body without
// GetBody (see WithoutRetries), so a request without such a body that
// succeeds at once pays nothing for it.
func WithPolicy(ctx context.Context, p Policy) context.Context {
	return context.WithValue(ctx, policyKey{}, p)
}

// WithoutRetries returns a copy of ctx under which requests are sent once,
// never retried: WithPolicy with MaxRetries NoRetries. The outcome of the one
// attempt is returned as it came (a transport error inside an *Error). When it
// was retryable, OnGiveUp gets StopExhausted, or the reason the request could
// not have been sent again anyway (StopNotReplayable, StopBodyTooLarge), which
// is looked at first. Its body is not read ahead to be kept for retries: it
// streams to Base as it is written, as without httpretry, so a body over
// MaxBufferedBody reports StopExhausted rather than StopBodyTooLarge unless its
// ContentLength already said it was too long, or MaxBufferedBody is negative.
func WithoutRetries(ctx context.Context) context.Context {
	return WithPolicy(ctx, Policy{MaxRetries: NoRetries})
}

// policyFor returns the Policy of a request with context ctx: its own when
// it carries one, else the Transport's.
func policyFor(ctx context.Context, def Policy) Policy {
	if p, ok := ctx.Value(policyKey{}).(Policy); ok {
		return p
	}
	return def
}
