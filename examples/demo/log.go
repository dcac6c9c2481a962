package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
)

// lineHandler is a slog.Handler that writes "  message  key=value ..." lines
// with neither time nor level: the demo's log is read by a person at a
// terminal, one short block per request. Groups are not used by the demo and
// are flattened.
type lineHandler struct {
	mu    *sync.Mutex
	w     io.Writer
	attrs []slog.Attr
}

func newLineHandler(w io.Writer) *lineHandler {
	return &lineHandler{mu: new(sync.Mutex), w: w}
}

// Enabled implements slog.Handler: every level is written.
func (h *lineHandler) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler.
func (h *lineHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-8s", r.Message)
	write := func(a slog.Attr) bool {
		v := a.Value.String()
		if v == "" || strings.ContainsRune(v, ' ') {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", a.Key, v)
		return true
	}
	for _, a := range h.attrs {
		write(a)
	}
	r.Attrs(write)
	b.WriteByte('\n')
	h.mu.Lock()
	defer h.mu.Unlock()
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs implements slog.Handler.
func (h *lineHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &lineHandler{mu: h.mu, w: h.w, attrs: append(h.attrs[:len(h.attrs):len(h.attrs)], attrs...)}
}

// WithGroup implements slog.Handler; the group name is dropped.
func (h *lineHandler) WithGroup(string) slog.Handler { return h }
