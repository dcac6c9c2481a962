package httpretry

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"
)

// TestMain fails the package's tests when goroutines outlive them: a
// leaked response body, server handler or connection shows here.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Idle keep-alive connections are pooled, not leaked.
		(&Transport{}).CloseIdleConnections()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if left := relLeaks(nil, 5*time.Second); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "%d goroutines leaked after the tests:\n\n%s\n", len(left), strings.Join(left, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}
