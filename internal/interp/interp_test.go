package interp

import (
	"bytes"
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	want := "py js ts bash r php go rs c cpp java d f90"
	if got := strings.Join(Names(), " "); got != want {
		t.Fatalf("languages %q, want %q", got, want)
	}
	for _, l := range Languages {
		if l.Source == "" || len(l.Run) == 0 {
			t.Errorf("%s: no source name or run command", l.Name)
		}
		// In the script, the args follow the run command and nothing else.
		sc := l.Script()
		if strings.Count(sc, `"$@"`) != 1 || !strings.Contains(sc, shLine(l.Run)+` "$@"`) {
			t.Errorf("%s: args do not reach the program alone:\n%s", l.Name, sc)
		}
	}
}

func TestShWord(t *testing.T) {
	for in, want := range map[string]string{
		"{d}/main":         `"$d"'/main'`,
		"PYTHONPATH={cwd}": `'PYTHONPATH='"$PWD"`,
		"it's":             `'it'\''s'`,
		"-O2":              `'-O2'`,
	} {
		if got := shWord(in); got != want {
			t.Errorf("shWord(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestSplitterEveryCut(t *testing.T) {
	const nonce = "N0nce-0123456789abcdef"
	stream := "out: N0nce-01 is not it\n" + nonce + "3\n12\ta.txt\x00"
	for cut := 0; cut <= len(stream); cut++ {
		var out bytes.Buffer
		s := NewSplitter(&out, nonce)
		s.Write([]byte(stream[:cut]))
		s.Write([]byte(stream[cut:]))
		tr, ok := s.Trailer()
		if !ok || out.String() != "out: N0nce-01 is not it\n" || string(tr) != "3\n12\ta.txt\x00" {
			t.Fatalf("cut %d: ok=%v out=%q trailer=%q", cut, ok, out.String(), tr)
		}
	}
}

func TestSplitterNoNonce(t *testing.T) {
	var out bytes.Buffer
	s := NewSplitter(&out, "NONCE")
	s.Write([]byte("killed mid-way NON"))
	if _, ok := s.Trailer(); ok || out.String() != "killed mid-way NON" {
		t.Fatalf("ok=%v out=%q", ok, out.String())
	}
}

func TestParseTrailer(t *testing.T) {
	tr, ok := ParseTrailer([]byte("7\n5\tb.txt\x00x\tbad\x00-1\tneg\x003\t../up\x004\t/abs\x002\tdir/a.txt\x00"))
	if !ok || tr.ExitCode != 7 {
		t.Fatalf("ok=%v %+v", ok, tr)
	}
	if len(tr.Files) != 2 || tr.Files[0] != (File{Path: "b.txt", Size: 5}) || tr.Files[1] != (File{Path: "dir/a.txt", Size: 2}) {
		t.Fatalf("files %+v", tr.Files)
	}
	for _, bad := range []string{"", "7", "x\n", "300\n", "-1\n"} {
		if _, ok := ParseTrailer([]byte(bad)); ok {
			t.Errorf("%q parsed", bad)
		}
	}
}

// FuzzParseTrailer: the trailer comes from inside the sandbox.
func FuzzParseTrailer(f *testing.F) {
	f.Add([]byte("0\n12\ta\x00"))
	f.Add([]byte("255\n\x00\t\x00\t\t\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, ok := ParseTrailer(b)
		if !ok {
			return
		}
		if tr.ExitCode < 0 || tr.ExitCode > 255 || len(tr.Files) > MaxFiles {
			t.Fatalf("accepted %+v", tr)
		}
		for _, f := range tr.Files {
			if f.Size < 0 || f.Path == "" || strings.HasPrefix(f.Path, "/") || strings.Contains("/"+f.Path+"/", "/../") {
				t.Fatalf("accepted file %+v", f)
			}
		}
	})
}

// FuzzSplitter: whatever the program prints and however it is chunked, the
// program's bytes before the nonce pass intact and the rest is the trailer.
func FuzzSplitter(f *testing.F) {
	f.Add("hello", "tail", 3)
	f.Fuzz(func(t *testing.T, before, after string, chunk int) {
		const nonce = "\x00sandbox-nonce-abcdef"
		if strings.Contains(before, "\x00sandbox") {
			return
		}
		chunk = 1 + (chunk&0xff)%17
		stream := before + nonce + after
		var out bytes.Buffer
		s := NewSplitter(&out, nonce)
		for i := 0; i < len(stream); i += chunk {
			s.Write([]byte(stream[i:min(i+chunk, len(stream))]))
		}
		tr, ok := s.Trailer()
		if !ok || out.String() != before || string(tr) != after {
			t.Fatalf("ok=%v out=%q trailer=%q", ok, out.String(), tr)
		}
	})
}
