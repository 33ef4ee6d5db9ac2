// Package client is the Go client of the sandbox API: a typed method for
// each route, a context on every call, errors as values that carry the
// server's status and message unchanged, streams where the API streams
// (file reads and writes, session logs) and the terminal as an
// io.ReadWriter with a resize.
//
//	c := client.New("http://127.0.0.1:8080", os.Getenv("SANDBOX_KEY"))
//	sb, err := c.Lease(ctx, client.LeaseRequest{})
//	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo hi"})
//	defer c.End(ctx, sb.ID, false)
//
// A refusal with 429 (wait: a quota is full) is retried after its
// Retry-After, up to Client.Retries times, for every call: the server
// refuses before doing anything. A 503 is retried only for calls that are
// safe to repeat (GET, PUT, DELETE); a lease or a command that met a 503
// is handed back, since the server may have started it.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls one server with one key. Its fields may be set before the
// first call.
type Client struct {
	// Base is the server's URL, e.g. "http://127.0.0.1:8080".
	Base string
	// Key is the API key, sent as a bearer token.
	Key string
	// HTTP is the client the calls go through; nil means a default one.
	HTTP *http.Client
	// Retries bounds how often a call refused with Retry-After is tried
	// again (see the package doc); MaxWait bounds one wait.
	Retries int
	MaxWait time.Duration
}

// New returns a client of the server at base with key.
func New(base, key string) *Client {
	return &Client{Base: strings.TrimSuffix(base, "/"), Key: key, HTTP: &http.Client{}, Retries: 3, MaxWait: 30 * time.Second}
}

// Error is the server's refusal: its status and its message, as sent.
type Error struct {
	Status     int
	Message    string
	RetryAfter time.Duration // zero when the server sent none
}

func (e *Error) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// StatusOf is err's HTTP status, or 0 when err is not a refusal.
func StatusOf(err error) int {
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

// IsNotFound says err is a 404: no such sandbox (or another org's, which
// the server answers the same).
func IsNotFound(err error) bool { return StatusOf(err) == http.StatusNotFound }

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return http.DefaultClient
}

// request is one call: a JSON body (in) or a raw one (body), and where its
// JSON answer goes (out).
type request struct {
	method, path string
	query        url.Values
	in           any
	body         io.Reader
	contentType  string
	accept       string
	lastEventID  string // a server-sent-events stream resumed after this event
	out          any
}

// do sends r and decodes its answer into r.out, retrying as the package
// doc says. A raw body is never retried (it cannot be read twice).
func (c *Client) do(ctx context.Context, r request) error {
	res, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if r.out == nil {
		_, err = io.Copy(io.Discard, res.Body)
		return err
	}
	if err := json.NewDecoder(res.Body).Decode(r.out); err != nil {
		return fmt.Errorf("client: %s %s: decoding the answer: %w", r.method, r.path, err)
	}
	return nil
}

// send sends r and returns a successful answer with its body open, or the
// refusal as an *Error.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	var payload []byte
	if r.in != nil {
		var err error
		if payload, err = json.Marshal(r.in); err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
	}
	u := c.Base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	for attempt := 0; ; attempt++ {
		body := r.body
		if r.in != nil {
			body = bytes.NewReader(payload)
		}
		req, err := http.NewRequestWithContext(ctx, r.method, u, body)
		if err != nil {
			return nil, fmt.Errorf("client: %w", err)
		}
		req.Header.Set("Authorization", "Bearer "+c.Key)
		switch {
		case r.in != nil:
			req.Header.Set("Content-Type", "application/json")
		case r.contentType != "":
			req.Header.Set("Content-Type", r.contentType)
		}
		if r.lastEventID != "" {
			req.Header.Set("Last-Event-ID", r.lastEventID)
		}
		if r.accept != "" {
			req.Header.Set("Accept", r.accept)
		}
		res, err := c.http().Do(req)
		if err != nil {
			return nil, err
		}
		if res.StatusCode < 400 {
			return res, nil
		}
		e := refusal(res)
		res.Body.Close()
		if attempt >= c.Retries || r.body != nil || e.RetryAfter == 0 || !retryable(r.method, e.Status) {
			return nil, e
		}
		wait := min(e.RetryAfter, c.MaxWait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, e
		}
	}
}

func retryable(method string, status int) bool {
	switch status {
	case http.StatusTooManyRequests:
		return true
	case http.StatusServiceUnavailable:
		return method == http.MethodGet || method == http.MethodPut || method == http.MethodDelete
	}
	return false
}

// refusal reads an error answer: the server's {"error": message}, or the
// text of whatever else sent it (a proxy's page).
func refusal(res *http.Response) *Error {
	b, _ := io.ReadAll(io.LimitReader(res.Body, 64<<10))
	e := &Error{Status: res.StatusCode}
	var body struct{ Error string }
	if json.Unmarshal(b, &body) == nil && body.Error != "" {
		e.Message = body.Error
	} else {
		e.Message = strings.TrimSpace(string(b))
	}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
		e.RetryAfter = time.Duration(s) * time.Second
	}
	return e
}

func esc(s string) string { return url.PathEscape(s) }
