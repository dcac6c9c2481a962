package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/aws/smithy-go"
)

// report writes what the run found.
func report(w io.Writer, s *summary) {
	fmt.Fprintln(w, "S3 through the AWS SDK for Go v2, with httpretry as its HTTP transport. On loopback:")
	fmt.Fprintln(w, "gofakes3 (memory backend) behind a fault-injecting proxy, over HTTPS as S3 is reached.")
	fmt.Fprintf(w, "SDK retries off (aws.NopRetryer); httpretry: %d retries, waits from %v (equal jitter), 500 retried for S3.\n\n",
		policy.MaxRetries, policy.BaseDelay)

	fmt.Fprintln(w, "== Operations")
	fmt.Fprintln(w)
	operations(w, s.results)
	fmt.Fprintln(w, "ATTEMPTS: sent by httpretry (counted by its Base). AT PROXY: requests that reached the server. AT S3: of those,")
	fmt.Fprintln(w, "forwarded to S3 and carried out. AT PROXY exceeds ATTEMPTS when net/http itself re-sent a GET: it does, once,")
	fmt.Fprintln(w, "when a reused keep-alive connection fails before the first byte of the answer, before httpretry sees an error.")
	fmt.Fprintln(w)

	fmt.Fprintln(w, "== What the run shows")
	fmt.Fprintln(w)
	findings(w, s)
	fmt.Fprintln(w)

	fmt.Fprintf(w, "== What buffering costs: PutObject over HTTPS to a loopback sink, %s of uploads each way, runtime.MemStats.TotalAlloc\n\n", size(int64(s.cfg.memBytes)))
	memoryTable(w, s.memory)
	fmt.Fprintln(w, "A buffered upload allocates one more copy of its body as sent (aws-chunked framing included), held")
	fmt.Fprintln(w, "until the request ends: uploads in flight hold one copy each. An unbuffered upload costs nothing, and is not retried.")
}

// operations writes the table of operations.
func operations(w io.Writer, results []*result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "OPERATION\tRESULT\tATTEMPTS\tAT PROXY\tAT S3\tFAULTS INJECTED\tVERIFIED")
	for _, r := range results {
		verified := "-"
		if r.Verified > 0 {
			verified = size(r.Verified) + " sha256 ok"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\n", r.Name, outcome(r), r.Attempts, len(r.Records), r.executed(), faults(r.Records), verified)
	}
	tw.Flush()
}

// findings writes one paragraph per lesson of the run.
func findings(w io.Writer, s *summary) {
	fmt.Fprintf(w, "Retry-After: the 503 asked for %d s; the retry reached the server %.3f s later (%s).\n",
		s.cfg.retryAfter, s.retryAfterGap.Seconds(), verdict(s.retryAfterGap.Seconds() >= float64(s.cfg.retryAfter)))

	del := s.find(opDelete)
	gone := !slices.Contains(s.leftAfterDel, small.key) && !slices.Contains(s.leftAfterDel, medium.key)
	fmt.Fprintf(w, "POST not re-sent: DeleteObjects reached the proxy %s and ran %s at S3; its answer was lost and httpretry\n",
		times(len(del.Records)), times(del.executed()))
	fmt.Fprintf(w, "  returned the error after %s (%s). small and medium gone: %v, so the POST had taken effect.\n",
		plural(del.Attempts, "attempt"), del.Stop, gone)

	lg, big, sdk := s.find(opPutLarge), s.find(opPutLargeBig), s.find(opPutLargeSDK)
	fmt.Fprintf(w, "Large upload: %s is %d bytes on the wire, over MaxBufferedBody (1 MiB): sent once (%s, %s),\n",
		size(int64(len(large.data))), wireLength(big), plural(lg.Attempts, "attempt"), lg.Stop)
	fmt.Fprintf(w, "  the SDK got the 503: %s. With MaxBufferedBody 4 MiB: %s after %d attempts. With the SDK's retryer for\n", outcome(lg), outcome(big), big.Attempts)
	fmt.Fprintf(w, "  that call: %s after %d requests (%s), the SDK rewinding its own body, nothing buffered.\n",
		outcome(sdk), len(sdk.Records), sdkAttempts(sdk.Records))

	fmt.Fprintln(w, "Uploads the server read more than once: the same bytes each time, passing S3's checks each time:")
	for _, r := range s.results {
		for _, sent := range uploads(r.Records) {
			if len(sent) > 1 {
				fmt.Fprintf(w, "  %s: read %s, same bytes each time: %v; %s\n",
					r.Name, times(len(sent)), allSame(sent), checks(sent))
			}
		}
	}
	var typs []string
	getBody, bodies := 0, 0
	for _, r := range s.results {
		for _, b := range r.Bodies {
			bodies++
			if b.getBody {
				getBody++
			}
			if !slices.Contains(typs, b.typ) {
				typs = append(typs, b.typ)
			}
		}
	}
	fmt.Fprintf(w, "GetBody: the SDK set it on %d of the %d request bodies httpretry retried (bodies of type %s);\n", getBody, bodies, strings.Join(typs, ", "))
	fmt.Fprintln(w, "  each retry was sent from httpretry's buffer.")

	m, a := s.multiplied, s.alone
	per := bySDKAttempt(m.Records)
	fmt.Fprintf(w, "Both retryers on: the SDK's standard retryer (3 attempts) over httpretry (1+3) sent %d requests for one\n", len(m.Records))
	fmt.Fprintf(w, "  GetObject against an endpoint that always answers 503 (attempt=1: %d, attempt=2: %d, attempt=3: %d); httpretry alone: %d.\n",
		per["attempt=1"], per["attempt=2"], per["attempt=3"], len(a.Records))
}

// memoryTable writes the buffering measurements.
func memoryTable(w io.Writer, rows []memRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "OBJECT\tON THE WIRE\tMaxBufferedBody\tKEPT FOR REPLAY\tUPLOADS\tWITHOUT HTTPRETRY\tWITH HTTPRETRY\tEXTRA\tEXTRA / WIRE\t")
	for _, m := range rows {
		limit := size(m.limit)
		if m.limit == 0 {
			limit = "1 MiB (default)"
		}
		kept := "no"
		if m.buffered() {
			kept = "yes"
		}
		fmt.Fprintf(tw, "%s\t%d B\t%s\t%s\t%d\t%s\t%s\t%s\t%.2f×\t\n", size(int64(m.size)), m.wire, limit, kept, m.runs,
			size(m.bare), size(m.retry), signed(m.extra()), float64(m.extra())/float64(m.wire))
	}
	tw.Flush()
}

// outcome is "ok" or a short form of the error.
func outcome(r *result) string {
	if r.Err == nil {
		return "ok"
	}
	var api smithy.APIError
	switch {
	case errors.As(r.Err, &api):
		return "error " + api.ErrorCode()
	case errors.Is(r.Err, syscall.ECONNRESET):
		return "error: connection reset"
	case errors.Is(r.Err, io.EOF), errors.Is(r.Err, io.ErrUnexpectedEOF):
		return "error: connection closed"
	case errors.Is(r.Err, net.ErrClosed):
		return "error: use of closed network connection"
	}
	msg := r.Err.Error()
	return "error: " + msg[strings.LastIndex(msg, ": ")+1:]
}

// faults lists the faults the proxy injected, in order, a run of the
// same one as "×n".
func faults(recs []Record) string {
	var parts []string
	last, n := "", 0
	flush := func() {
		switch {
		case n == 1:
			parts = append(parts, last)
		case n > 1:
			parts = append(parts, fmt.Sprintf("%s ×%d", last, n))
		}
	}
	for _, rec := range recs {
		if rec.Fault == Pass {
			continue
		}
		name := rec.Fault.String()
		if rec.Outage {
			name = "outage: reset"
		}
		if name != last {
			flush()
			last, n = name, 0
		}
		n++
	}
	flush()
	if len(parts) > 4 { // many: count each kind instead
		counts := map[string]int{}
		var kinds []string
		for _, rec := range recs {
			if name := rec.Fault.String(); rec.Fault != Pass {
				if counts[name] == 0 {
					kinds = append(kinds, name)
				}
				counts[name]++
			}
		}
		parts = parts[:0]
		for _, k := range kinds {
			parts = append(parts, fmt.Sprintf("%s ×%d", k, counts[k]))
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

// uploads returns the records of the PUTs whose body the proxy read,
// grouped by object, in order.
func uploads(recs []Record) [][]Record {
	var out [][]Record
	index := map[string]int{}
	for _, rec := range recs {
		if rec.Method != "PUT" || rec.WireSHA256 == "" {
			continue
		}
		i, ok := index[rec.Path]
		if !ok {
			i = len(out)
			index[rec.Path] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], rec)
	}
	return out
}

// allSame reports whether every record carried the same wire bytes.
func allSame(recs []Record) bool {
	for _, rec := range recs {
		if rec.WireSHA256 != recs[0].WireSHA256 {
			return false
		}
	}
	return len(recs) > 0
}

// wireLength returns the Content-Length of the operation's first request
// with a body, as the proxy received it; 0 when none had one.
func wireLength(r *result) int64 {
	for _, rec := range r.Records {
		if rec.Wire > 0 {
			return rec.Wire
		}
	}
	return 0
}

// sdkAttempts lists the SDK attempt of each record: "attempt=1, attempt=2".
func sdkAttempts(recs []Record) string {
	var parts []string
	for _, rec := range recs {
		a, _, _ := strings.Cut(rec.SDKAttempt, ";")
		parts = append(parts, a)
	}
	return strings.Join(parts, ", ")
}

// checks returns what S3's checks verified on the attempts that reached
// S3 (the others were answered before any check).
func checks(recs []Record) string {
	for _, rec := range recs {
		if rec.Executed {
			return rec.Checked
		}
	}
	return "no attempt reached S3"
}

// times words a count: once, twice, 3 times.
func times(n int) string {
	switch n {
	case 1:
		return "once"
	case 2:
		return "twice"
	}
	return fmt.Sprintf("%d times", n)
}

// plural words a count of things: 1 attempt, 2 attempts.
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// verdict words a check.
func verdict(ok bool) string {
	if ok {
		return "honoured"
	}
	return "NOT honoured"
}

// size formats a byte count in KiB or MiB.
func size(n int64) string {
	trim := func(s string) string { return strings.TrimSuffix(strings.TrimRight(s, "0"), ".") }
	switch {
	case n >= 1<<20:
		return trim(fmt.Sprintf("%.2f", float64(n)/(1<<20))) + " MiB"
	case n >= 1<<10:
		return trim(fmt.Sprintf("%.1f", float64(n)/(1<<10))) + " KiB"
	}
	return fmt.Sprintf("%d B", n)
}

// signed formats a byte difference with its sign.
func signed(n int64) string {
	if n < 0 {
		return "-" + size(-n)
	}
	return "+" + size(n)
}
