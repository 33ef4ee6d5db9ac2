package redact

import (
	"bytes"
	"io"
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

// FuzzSameAsNaive: the matcher answers exactly what the earlier scan (every
// secret tried at every byte) answers, for any input, secrets and
// chunking — the longest secret at each position, left to right.
func FuzzSameAsNaive(f *testing.F) {
	f.Add("aaaaabaaab", "aab", "ab", "aaaab", 3)
	f.Add("the key is k3y-k3y-k3y!", "k3y", "k3y-k3y", "", 1)
	f.Add("abcabcabd", "abcabd", "bca", "c", 2)
	f.Fuzz(func(t *testing.T, in, s1, s2, s3 string, chunk int) {
		secrets := []string{s1, s2, s3}
		chunk = 1 + abs(chunk)%7
		var got, want strings.Builder
		w, n := NewWriter(&got, secrets), newNaive(&want, secrets)
		for i := 0; i < len(in); i += chunk {
			part := []byte(in[i:min(len(in), i+chunk)])
			w.Write(part)
			n.Write(part)
			if got.String() != want.String() {
				t.Fatalf("after %d bytes: %q, the naive scan %q (secrets %q)", i+len(part), got.String(), want.String(), secrets)
			}
		}
		w.Close()
		n.Close()
		if got.String() != want.String() {
			t.Fatalf("%q: %q, the naive scan %q (secrets %q)", in, got.String(), want.String(), secrets)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// adversarial is 32 secrets of 4 KiB that each almost match a flood of
// 'a's: the worst case of trying every secret at every byte.
func adversarial() []string {
	var secrets []string
	for i := range 32 {
		secrets = append(secrets, strings.Repeat("a", 4000+i)+"b")
	}
	return secrets
}

// BenchmarkAdversarialSecrets: the matcher over 64 KiB of 'a' against the
// adversarial secrets, beside the earlier scan over the same input (its
// floor is the plain pass-through, BenchmarkPlain).
func BenchmarkAdversarialSecrets(b *testing.B) {
	flood := []byte(strings.Repeat("a", 64<<10))
	b.Run("matcher", func(b *testing.B) {
		b.SetBytes(int64(len(flood)))
		for b.Loop() {
			w := NewWriter(io.Discard, adversarial())
			w.Write(flood)
			w.Close()
		}
	})
	b.Run("naive", func(b *testing.B) {
		b.SetBytes(int64(len(flood)))
		for b.Loop() {
			w := newNaive(io.Discard, adversarial())
			w.Write(flood)
			w.Close()
		}
	})
}

// BenchmarkPlain: the same bytes with no secret.
func BenchmarkPlain(b *testing.B) {
	flood := []byte(strings.Repeat("a", 64<<10))
	b.SetBytes(int64(len(flood)))
	for b.Loop() {
		w := NewWriter(io.Discard, nil)
		w.Write(flood)
		w.Close()
	}
}
