package capture

import (
	"strings"
	"sync"
	"testing"
)

func TestBuffer(t *testing.T) {
	b := New(5)
	for _, s := range []string{"ab", "cdef", "gh"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d %v", s, n, err)
		}
	}
	if got := string(b.Bytes()); got != "abcde" {
		t.Errorf("Bytes = %q", got)
	}
	if got := b.String(); got != "abcde\n[sandbox: output truncated, 3 more bytes dropped]\n" {
		t.Errorf("String = %q", got)
	}
	b.Note("[note]")
	if got := string(b.Bytes()); got != "abcde[note]" {
		t.Errorf("after a note: %q", got)
	}
	if got := New(4).String(); got != "" {
		t.Errorf("empty: %q", got)
	}
}

// TestConcurrent: writers at once keep exactly max bytes (go test -race).
func TestConcurrent(t *testing.T) {
	b := New(1000)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				b.Write([]byte("0123456789"))
			}
		}()
	}
	wg.Wait()
	if got := b.String(); !strings.HasPrefix(got, strings.Repeat("0123456789", 100)+"\n") || !strings.Contains(got, "7000 more bytes dropped") {
		t.Errorf("String = %.80q…", got)
	}
}
