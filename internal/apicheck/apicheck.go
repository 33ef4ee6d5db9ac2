// Package apicheck holds a test suite's exchanges with the server to the
// OpenAPI document the server itself serves, with a validator nobody here
// wrote (pb33f/libopenapi-validator): every answer must be one the
// document declares for its route and status, with a body of its schema;
// a request the document calls invalid must have been refused (4xx), and
// one it calls valid must not have been refused as malformed (400).
//
// It is imported by tests only.
package apicheck

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/helpers"
)

// Checker checks exchanges against one document.
type Checker struct {
	mu sync.Mutex // the validator's caches are not documented as safe to share
	v  validator.Validator
	n  int
}

// New parses and validates the document (against the OpenAPI 3.1
// specification's own schema).
func New(spec []byte) (*Checker, error) {
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		return nil, fmt.Errorf("apicheck: %w", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		return nil, fmt.Errorf("apicheck: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		return nil, fmt.Errorf("apicheck: the document is not valid OpenAPI: %s", describe(verrs))
	}
	return &Checker{v: v}, nil
}

// Fetch reads the document a server at base serves and returns its
// checker.
func Fetch(base string) (*Checker, error) {
	res, err := http.Get(base + "/v1/openapi.json")
	if err != nil {
		return nil, fmt.Errorf("apicheck: %w", err)
	}
	defer res.Body.Close()
	spec, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("apicheck: GET /v1/openapi.json: %d %v", res.StatusCode, err)
	}
	return New(spec)
}

// Exchange is one request and its answer, bodies in full.
type Exchange struct {
	Method, URL string
	Header      http.Header
	Body        []byte
	Status      int
	RespHeader  http.Header
	RespBody    []byte
}

// Check says what in x disagrees with the document, or nil.
func (c *Checker) Check(x Exchange) error {
	req, err := http.NewRequest(x.Method, x.URL, bytes.NewReader(x.Body))
	if err != nil {
		return err
	}
	req.Header = x.Header.Clone()
	if req.Header == nil {
		req.Header = http.Header{}
	}
	res := &http.Response{StatusCode: x.Status, Header: x.RespHeader.Clone(), Body: io.NopCloser(bytes.NewReader(x.RespBody)), Request: req}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n++
	var problems []string
	reqOK, reqErrs := c.validateRequest(req, x.Body)
	if notDeclared(reqErrs) && (x.Status == http.StatusNotFound || x.Status == http.StatusMethodNotAllowed) {
		return nil // no such route, and the server says so
	}
	switch {
	case !reqOK && x.Status < 400:
		problems = append(problems, fmt.Sprintf("the document refuses this request (%s) but the server answered %d", describe(reqErrs), x.Status))
	case reqOK && x.Status == http.StatusBadRequest && isMalformed(x.RespBody):
		problems = append(problems, "the server refused as malformed a request the document accepts: "+string(x.RespBody))
	}
	req.Body = io.NopCloser(bytes.NewReader(x.Body))
	if ok, errs := c.v.ValidateHttpResponse(req, res); !ok {
		problems = append(problems, "the answer: "+describe(errs))
	}
	if problems == nil {
		return nil
	}
	return fmt.Errorf("%s %s → %d: %s", x.Method, x.URL, x.Status, strings.Join(problems, "; "))
}

// validateRequest validates req. The server reads a body sent with no
// Content-Type as the route's one kind (JSON, or a file's bytes): so does
// this, trying JSON first.
func (c *Checker) validateRequest(req *http.Request, body []byte) (bool, []*errors.ValidationError) {
	if req.Header.Get("Content-Type") != "" || len(body) == 0 {
		return c.v.ValidateHttpRequestSync(req)
	}
	var errs []*errors.ValidationError
	for _, ct := range []string{"application/json", "application/octet-stream"} {
		req.Header.Set("Content-Type", ct)
		req.Body = io.NopCloser(bytes.NewReader(body))
		var ok bool
		if ok, errs = c.v.ValidateHttpRequestSync(req); ok || !wrongType(errs) {
			req.Header.Del("Content-Type")
			return ok, errs
		}
	}
	req.Header.Del("Content-Type")
	return false, errs
}

func wrongType(errs []*errors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationSubType == helpers.RequestBodyContentType {
			return true
		}
	}
	return false
}

// notDeclared says the document has no such path or method.
func notDeclared(errs []*errors.ValidationError) bool {
	for _, e := range errs {
		if e.ValidationType == helpers.PathValidation {
			return true
		}
	}
	return false
}

// Checked counts the exchanges checked.
func (c *Checker) Checked() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// isMalformed tells a refusal of the body's shape (which the document
// describes) from one of its meaning (a path outside the workdir, an
// unknown class), which a schema cannot.
func isMalformed(body []byte) bool {
	return bytes.Contains(body, []byte("invalid JSON body")) || bytes.Contains(body, []byte("unknown field"))
}

func describe(errs []*errors.ValidationError) string {
	var b strings.Builder
	for i, e := range errs {
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(e.Message)
		if e.Reason != "" {
			b.WriteString(": " + e.Reason)
		}
		for _, s := range e.SchemaValidationErrors {
			fmt.Fprintf(&b, " [%s: %s]", s.FieldPath, s.Reason)
		}
	}
	return b.String()
}
