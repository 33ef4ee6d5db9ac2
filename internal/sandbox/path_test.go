package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestResolvePath(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"", "/mnt/data", true},
		{".", "/mnt/data", true},
		{"a/b.txt", "/mnt/data/a/b.txt", true},
		{"./a//b/", "/mnt/data/a/b", true},
		{"/mnt/data", "/mnt/data", true},
		{"/mnt/data/x", "/mnt/data/x", true},
		{"/mnt/data//x/./y", "/mnt/data/x/y", true},
		{"..", "", false},
		{"../x", "", false},
		{"a/../b", "", false},
		{"a/..", "", false},
		{"/mnt/data/../etc", "", false},
		{"/etc/passwd", "", false},
		{"/mnt/database", "", false},
		{"/mnt", "", false},
		{"/", "", false},
		{"a\x00b", "", false},
		{strings.Repeat("a", 5000), "", false},
		{"...", "/mnt/data/...", true}, // a legal file name, not a climb
		{"a..b", "/mnt/data/a..b", true},
	} {
		got, err := ResolvePath("/mnt/data", tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ResolvePath(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("ResolvePath(%q): error %v is not KindInvalid", tc.in, err)
		}
	}
}

// FuzzResolvePath checks the confinement invariant on any input: an accepted
// path is clean, absolute, under the root, and free of NUL and "..".
func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"", "a", "../x", "/mnt/data/x", "/mnt/database", "a/./b", "//", "a\x00", "/mnt/data/..", "…/.."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		for _, root := range []string{"/mnt/data", "/work"} {
			got, err := ResolvePath(root, p)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error of the wrong kind: %v", err)
				}
				continue
			}
			if got != root && !strings.HasPrefix(got, root+"/") {
				t.Fatalf("ResolvePath(%q, %q) = %q escapes the root", root, p, got)
			}
			if strings.Contains(got, "\x00") || strings.Contains(got, "//") {
				t.Fatalf("ResolvePath(%q) = %q is not clean", p, got)
			}
			for _, el := range strings.Split(got, "/") {
				if el == ".." || el == "." {
					t.Fatalf("ResolvePath(%q) = %q keeps %q", p, got, el)
				}
			}
		}
	})
}
