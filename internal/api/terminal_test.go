package api

import (
	"encoding/json"
	"testing"
)

func TestParseResize(t *testing.T) {
	for in, want := range map[string]bool{
		`{"resize":{"cols":80,"rows":24}}`:              true,
		` {"resize":{"rows":24,"cols":80}} `:            true,
		`{"resize":{"cols":80}}`:                        false,
		`{"resize":{"cols":0,"rows":24}}`:               false,
		`{"resize":{"cols":80,"rows":24},"x":1}`:        false,
		`{"resize":{"cols":80,"rows":24,"px":1}}`:       false,
		`{"resize":{"cols":80,"rows":24}}{"more":true}`: false,
		`{"resize":{"cols":70000,"rows":24}}`:           false,
		`ls -la`:                                        false,
		`{"resize":{"cols":-1,"rows":24}}`:              false,
	} {
		if _, got := parseResize([]byte(in)); got != want {
			t.Errorf("parseResize(%s) = %v, want %v", in, got, want)
		}
	}
}

// FuzzParseResize: any text frame from a client either is exactly a
// resize with positive sizes, or is stdin.
func FuzzParseResize(f *testing.F) {
	f.Add([]byte(`{"resize":{"cols":80,"rows":24}}`))
	f.Add([]byte(`{"resize":null}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sz, ok := parseResize(b)
		if !ok {
			return
		}
		if sz.Cols == 0 || sz.Rows == 0 {
			t.Fatalf("accepted %q as %+v", b, sz)
		}
		var m map[string]map[string]json.Number
		if err := json.Unmarshal(b, &m); err != nil || len(m) != 1 || len(m["resize"]) != 2 {
			t.Fatalf("accepted %q, which is not exactly a resize object", b)
		}
	})
}
