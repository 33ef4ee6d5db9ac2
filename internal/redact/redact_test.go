package redact

import (
	"bytes"
	"strings"
	"testing"
)

func TestSplitAcrossWrites(t *testing.T) {
	const secret = "hunter2-s3cr3t"
	in := "token=" + secret + " and again " + secret + "."
	// Every way of cutting the stream in two must redact both occurrences.
	for cut := 0; cut <= len(in); cut++ {
		var b bytes.Buffer
		w := NewWriter(&b, []string{secret})
		w.Write([]byte(in[:cut]))
		w.Write([]byte(in[cut:]))
		w.Close()
		if want := "token=[redacted] and again [redacted]."; b.String() != want {
			t.Fatalf("cut %d: got %q, want %q", cut, b.String(), want)
		}
	}
}

func TestByteAtATime(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, []string{"abc", "abcdef", "zz"})
	for _, c := range []byte("xabcdefyabcxzzzabcde") {
		w.Write([]byte{c})
	}
	w.Close()
	if want := "x[redacted]y[redacted]x[redacted]z[redacted]de"; b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
}

func TestHoldsBackOnlyAPrefix(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, []string{"secret"})
	w.Write([]byte("hello sec"))
	if b.String() != "hello " {
		t.Fatalf("after a partial match: %q passed, want %q", b.String(), "hello ")
	}
	w.Write([]byte("ond"))
	if b.String() != "hello second" {
		t.Fatalf("after the match failed: %q", b.String())
	}
}

func TestNoSecretsPassesThrough(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b, []string{""})
	w.Write([]byte("plain"))
	if b.String() != "plain" {
		t.Fatalf("got %q", b.String())
	}
}

// FuzzWriter checks, for any input, secrets and chunking, that no secret
// survives and that the output equals redacting the whole input at once.
func FuzzWriter(f *testing.F) {
	f.Add("aaXsecretYsecre", "secret", "ab", 3)
	f.Add("xxxxxxxx", "xx", "x", 1)
	f.Fuzz(func(t *testing.T, in, s1, s2 string, chunk int) {
		if chunk <= 0 || chunk > 64 {
			chunk = 1 + chunk&31
		}
		secrets := []string{s1, s2}
		var b bytes.Buffer
		w := NewWriter(&b, secrets)
		for i := 0; i < len(in); i += chunk {
			w.Write([]byte(in[i:min(i+chunk, len(in))]))
		}
		w.Close()
		if whole := String(in, secrets); b.String() != whole {
			t.Fatalf("chunked %q != whole %q", b.String(), whole)
		}
		for _, s := range secrets {
			// A secret that shares no byte with the mask cannot be built
			// across one, so it must not appear at all.
			if s != "" && !strings.ContainsAny(s, Mask) && strings.Contains(b.String(), s) {
				t.Fatalf("secret %q survived in %q", s, b.String())
			}
		}
	})
}
