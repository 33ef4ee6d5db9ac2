package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
)

// doc is what the OpenAPI document says of one route. Every registration
// (handle, public, raw) takes one, so the document is made from the route
// table itself: a route cannot exist undocumented, nor a documented one be
// missing.
type doc struct {
	Summary string
	// Body is the JSON request body's type; BodyRaw the media type of a
	// body that is not JSON (a file's bytes, multipart). Neither: no body.
	Body    reflect.Type
	BodyRaw string
	// Answer is the JSON answer's type; AnswerRaw the media types (comma
	// separated) of one that is not JSON (a file, a page, an event stream).
	Answer    reflect.Type
	AnswerRaw string
	// Status is the success status; zero is 200.
	Status int
	// Errors are the refusals the route answers (each with the error
	// object); the statuses every authenticated route can answer (401,
	// 429, 500, 503, and 400 for a bad body or query) are added.
	Errors []int
	// Query names the query parameters: "name" or "name: description".
	Query []string
	// Public routes take no bearer key (a page, a ticketed socket).
	Public bool
	// Scope is what a sandbox's own credential needs to call the route;
	// empty: it may not.
	Scope string
}

func typ[T any]() reflect.Type { return reflect.TypeFor[T]() }

// Refusal sets of the routes (see doc.Errors).
var (
	onSandbox = []int{403, 404, 409, 502, 504}
	onFiles   = []int{403, 404, 409, 413, 502, 504}
	onLease   = []int{402, 403, 404, 409}
	onOrg     = []int{403, 404}
)

// errorSchema is the error object every refusal carries.
var errorSchema = map[string]any{
	"type": "object", "required": []string{"error"}, "additionalProperties": false,
	"properties": map[string]any{"error": map[string]any{"type": "string", "description": "what went wrong, safe to show"}},
}

// schemaOptions say how Go types the API sends travel as JSON.
var schemaOptions = &jsonschema.ForOptions{TypeSchemas: map[reflect.Type]*jsonschema.Schema{
	typ[time.Time]():       {Type: "string", Format: "date-time"},
	typ[[]byte]():          {Type: "string", ContentEncoding: "base64"},
	typ[json.RawMessage](): {},
}}

// schemaFor is the JSON Schema (2020-12, which OpenAPI 3.1 uses) of t. A
// request body's schema requires nothing: a missing field is its zero value
// to the decoder, which refuses unknown fields as the schema does.
func schemaFor(t reflect.Type, request bool) (any, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem() // an answer of *T is a T, never null
	}
	s, err := jsonschema.ForType(t, schemaOptions)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var m any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	if request {
		dropRequired(m)
		// An empty body, or null, is the empty object to the decoder.
		if obj, ok := m.(map[string]any); ok && obj["type"] == "object" {
			obj["type"] = []any{"object", "null"}
		}
	}
	return m, nil
}

func dropRequired(v any) {
	switch v := v.(type) {
	case map[string]any:
		delete(v, "required")
		for _, c := range v {
			dropRequired(c)
		}
	case []any:
		for _, c := range v {
			dropRequired(c)
		}
	}
}

var pathParam = regexp.MustCompile(`\{([A-Za-z]+)(\.\.\.)?\}`)

// openAPI is the OpenAPI 3.1 document of the routes registered so far.
func (s *Server) openAPI(version string) ([]byte, error) {
	paths := map[string]map[string]any{}
	for _, r := range s.docs {
		method, pattern, _ := strings.Cut(r.pattern, " ")
		path := pathParam.ReplaceAllString(pattern, "{$1}")
		op, err := operation(method, path, r.doc)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s: %w", r.pattern, err)
		}
		if paths[path] == nil {
			paths[path] = map[string]any{}
		}
		paths[path][strings.ToLower(method)] = op
	}
	return json.MarshalIndent(map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{
			"title": "sandbox", "version": version,
			"description": "Lease isolated compute (a container under gVisor, or a pod under a sandboxing RuntimeClass), run commands in it, move its files, and end it. " +
				"Every route but the pages, the ticketed sockets and the health checks takes an API key as a bearer token; another org's id answers exactly like an unknown one (404).",
		},
		"security": []any{map[string]any{"bearer": []string{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer", "description": "an API key (sbk_…)"}},
			"schemas":         map[string]any{"Error": errorSchema},
		},
		"paths": paths,
	}, "", "  ")
}

func operation(method, path string, d doc) (map[string]any, error) {
	op := map[string]any{
		"operationId": operationID(method, path),
		"summary":     d.Summary,
	}
	var params []any
	for _, m := range pathParam.FindAllStringSubmatch(path, -1) {
		params = append(params, map[string]any{"name": m[1], "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
	}
	for _, q := range d.Query {
		name, desc, _ := strings.Cut(q, ":")
		p := map[string]any{"name": name, "in": "query", "schema": map[string]any{"type": "string"}}
		if desc != "" {
			p["description"] = strings.TrimSpace(desc)
		}
		params = append(params, p)
	}
	if params != nil {
		op["parameters"] = params
	}
	switch {
	case d.Body != nil:
		schema, err := schemaFor(d.Body, true)
		if err != nil {
			return nil, err
		}
		op["requestBody"] = map[string]any{"content": map[string]any{"application/json": map[string]any{"schema": schema}}}
	case d.BodyRaw != "":
		// Not required: an empty body is an empty file.
		content := map[string]any{}
		for _, mt := range strings.Split(d.BodyRaw, ",") {
			content[strings.TrimSpace(mt)] = map[string]any{}
		}
		op["requestBody"] = map[string]any{"content": content}
	}
	responses := map[string]any{}
	status := d.Status
	if status == 0 {
		status = http.StatusOK
	}
	ok := map[string]any{"description": http.StatusText(status)}
	content := map[string]any{}
	if d.Answer != nil {
		schema, err := schemaFor(d.Answer, false)
		if err != nil {
			return nil, err
		}
		content["application/json"] = map[string]any{"schema": schema}
	}
	if d.AnswerRaw != "" {
		for _, mt := range strings.Split(d.AnswerRaw, ",") {
			content[strings.TrimSpace(mt)] = map[string]any{}
		}
	}
	if len(content) > 0 {
		ok["content"] = content
	}
	responses[strconv.Itoa(status)] = ok
	errs := slices.Clone(d.Errors)
	if !d.Public {
		// 403 too: a sandbox's credential is refused the routes it has no
		// scope for.
		errs = append(errs, 400, 401, 403, 429, 500, 503)
	} else {
		op["security"] = []any{}
	}
	for _, code := range errs {
		responses[strconv.Itoa(code)] = map[string]any{
			"description": http.StatusText(code),
			"content":     map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Error"}}},
		}
	}
	op["responses"] = responses
	return op, nil
}

// operationID is a stable name of method and path: "post_v1_sandbox_id_exec".
func operationID(method, path string) string {
	id := strings.ToLower(method) + strings.NewReplacer("/", "_", "{", "", "}", "", "-", "_").Replace(path)
	return id
}
