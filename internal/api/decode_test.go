package api

import (
	"errors"
	"strings"
	"testing"

	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/service"
)

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{``, true},
		{`{}`, true},
		{`{"class":"dev","project":"p","ttlSec":10}`, true},
		{`{"class":"dev"} `, true},
		{`{"class":1}`, false},
		{`{"org":"x"}`, false},
		{`{} {}`, false},
		{`[]`, false},
		{`{`, false},
		{`null`, true},
		{`{"ttlSec": 1e400}`, false},
	} {
		var req service.LeaseRequest
		err := decode(strings.NewReader(tc.body), &req)
		if tc.ok != (err == nil) {
			t.Errorf("decode(%q) = %v", tc.body, err)
		}
		if err != nil && !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("decode(%q): error %v is not KindInvalid", tc.body, err)
		}
	}
	huge := `{"command":"` + strings.Repeat("a", maxJSONBody+10) + `"}`
	var req service.ExecRequest
	if err := decode(strings.NewReader(huge), &req); err == nil {
		t.Error("oversized body accepted")
	}
}

func TestBearer(t *testing.T) {
	for _, tc := range []struct {
		h, want string
		ok      bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer  abc ", "abc", true},
		{"Bearer ", "", false},
		{"Basic abc", "", false},
		{"", "", false},
		{"Bearer " + strings.Repeat("x", maxBearer+1), "", false},
	} {
		got, ok := bearer(tc.h)
		if got != tc.want && tc.ok || ok != tc.ok {
			t.Errorf("bearer(%q) = %q, %v", tc.h, got, ok)
		}
	}
}

// FuzzDecode feeds arbitrary bodies to every request decoder: each must
// either decode or fail with KindInvalid and a message free of the input's
// raw bytes beyond a field name, and never panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{}`, `{"argv":["a"]}`, `{"env":{"A":"b"}}`, `{"ttlSec":-1}`, `{"x":1}`, `[`, "\xff", `{"class":"\u0000"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		targets := []any{&service.LeaseRequest{}, &service.ExecRequest{}, &renewRequest{}}
		for _, v := range targets {
			err := decode(strings.NewReader(body), v)
			if err == nil {
				continue
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Fatalf("decode(%q): %v is not KindInvalid", body, err)
			}
			if msg := sandbox.Message(err); msg == "internal error" || len(msg) > 300 {
				t.Fatalf("decode(%q): unusable message %q", body, msg)
			}
		}
	})
}
