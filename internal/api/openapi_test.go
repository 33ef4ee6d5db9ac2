package api_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/apicheck"
)

// TestOpenAPIDocument: the served document is valid OpenAPI 3.1 by a real
// validator, names every route once with an operation id, and describes no
// bytes as a JSON array of numbers (encoding/json sends them as base64).
func TestOpenAPIDocument(t *testing.T) {
	e := newAPI(t)
	a := e.must(200, "GET", "/v1/openapi.json", "", "")
	if _, err := apicheck.New(a.body); err != nil {
		t.Fatal(err)
	}
	var d struct {
		OpenAPI string                                `json:"openapi"`
		Paths   map[string]map[string]json.RawMessage `json:"paths"`
	}
	json.Unmarshal(a.body, &d)
	ops := 0
	ids := map[string]bool{}
	for path, methods := range d.Paths {
		for m, raw := range methods {
			var op struct {
				OperationID string         `json:"operationId"`
				Summary     string         `json:"summary"`
				Responses   map[string]any `json:"responses"`
			}
			json.Unmarshal(raw, &op)
			if op.OperationID == "" || op.Summary == "" || len(op.Responses) == 0 || ids[op.OperationID] {
				t.Errorf("%s %s: %+v", m, path, op)
			}
			ids[op.OperationID] = true
			ops++
		}
	}
	for _, want := range []string{"/v1/sandbox", "/v1/sandbox/{id}/exec", "/v1/sandbox/{id}/fs", "/v1/exec/{session}/files/{path}", "/v1/sessions/{name}/events", "/v1/openapi.json", "/healthz"} {
		if d.Paths[want] == nil {
			t.Errorf("no %s in the document", want)
		}
	}
	if d.OpenAPI != "3.1.0" || ops < 60 {
		t.Errorf("openapi %q with %d operations", d.OpenAPI, ops)
	}
	if bytes.Contains(a.body, []byte(`"maximum": 255`)) {
		t.Error("a []byte is described as an array of numbers")
	}
	if strings.Contains(string(a.body), "sbx-") {
		t.Error("the document names a runtime object")
	}
}
