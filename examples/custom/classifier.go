package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/httpretry/httpretry"
)

// classify retries what DefaultClassifier retries, and two outcomes that
// only this API's client can know are transient: a 500 on a GET (its GET
// handlers are read-only, so a second try is harmless and often lucky) and
// a 409 whose body reports a lock timeout rather than a real conflict.
func classify(req *http.Request, resp *http.Response, err error) (bool, string) {
	if resp != nil {
		switch {
		case resp.StatusCode == http.StatusInternalServerError && req.Method == http.MethodGet:
			return true, "status 500 on GET"
		case resp.StatusCode == http.StatusConflict && errorCode(resp) == "lock_timeout":
			return true, "lock timeout"
		}
	}
	return httpretry.DefaultClassifier(req, resp, err)
}

// errorCode reads the "error" field of a JSON error body. PeekBody puts the
// bytes back, so the caller still reads the whole body when this response
// is the one returned.
func errorCode(resp *http.Response) string {
	head, err := httpretry.PeekBody(resp, 1024)
	if err != nil {
		return ""
	}
	var body struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(head, &body) != nil {
		return ""
	}
	return body.Error
}

func classifierSection(w io.Writer) error {
	fmt.Fprintln(w, "== 1. Classifier: a 500 on GET only, and a 409 by its JSON body")
	srv := scripted(map[string][]http.HandlerFunc{
		"GET /report":    {status(500, `{"error":"internal"}`), status(200, `{"rows":12}`)},
		"DELETE /report": {status(500, `{"error":"internal"}`), status(204, ``)},
		"PUT /doc/1":     {status(409, `{"error":"lock_timeout"}`), status(409, `{"error":"lock_timeout"}`), status(200, `{"version":8}`)},
		"PUT /doc/2":     {status(409, `{"error":"version_conflict","current":7}`), status(200, `{"version":8}`)},
	})
	defer srv.Close()

	tr := withHooks(w, &httpretry.Transport{Policy: httpretry.Policy{BaseDelay: -1}, Classifier: classify})
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/report"},
		{http.MethodDelete, "/report"},
		{http.MethodPut, "/doc/1"},
		{http.MethodPut, "/doc/2"},
	} {
		req, err := http.NewRequest(r.method, srv.URL+r.path, nil)
		if err != nil {
			return err
		}
		if _, err := do(w, client, req); err != nil {
			return err
		}
	}
	return nil
}
