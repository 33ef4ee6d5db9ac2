// Package interp is the code interpreter: the 13 languages, how each is
// built and run inside an exec sandbox, how the answer of one run is read
// back (this file), and its sandboxes (run.go): a run's sandbox is an exec
// sandbox, leased on the first run and reused while it lives, reached only
// through the Sandboxes interface the package owns — the service's Run, its
// one exec primitive, and the lease calls.
//
// One run is ONE exec (the interpreter's latency is the point): a POSIX sh
// script reads a nonce line and the source from stdin, builds (build output
// goes to stderr), runs the program in the workdir with the caller's args
// and /dev/null as stdin, then prints the nonce, the exit code and the
// files changed under the workdir. The interpreter splits stdout at the nonce.
// The nonce arrives over stdin, not argv or env, so a program cannot read it
// from /proc/$PPID/cmdline; a program that digs it out anyway can only
// forge its own answer.
package interp

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"github.com/sandboxd/sandbox/wire"
	"slices"
	"strconv"
	"strings"
)

// Lang is one language of the interpreter. Its commands are argv lists in
// which "{d}" stands for the run's private directory (source and build
// products, removed after the run) and "{cwd}" for the working directory;
// the caller's args are appended to Run and reach the program only.
type Lang struct {
	Name   string // the API name: "py", "rs", ...
	Source string // file name of the source in {d}
	Build  [][]string
	Run    []string
	Env    []string // added to the environment of Build and Run
	// Inline, when set, is an argv that does the runner's whole job in the
	// language's own process (reading the RunSpec line from stdin), saving
	// the runner's process start where the program itself is cheap.
	Inline []string
}

// Languages is the closed table, in the order the errors list them.
var Languages = []Lang{
	// Local modules next to the program's data import as they would from
	// the working directory.
	{Name: "py", Source: "main.py", Run: []string{"python3", "{d}/main.py"}, Env: []string{"PYTHONPATH={cwd}", "PYTHONDONTWRITEBYTECODE=1"},
		Inline: []string{"python3", "-c", pythonPrelude}},
	{Name: "js", Source: "main.js", Run: []string{"node", "{d}/main.js"}, Env: []string{"NODE_PATH={cwd}"}},
	{Name: "ts", Source: "main.ts",
		Build: [][]string{{"tsc", "--pretty", "false", "--skipLibCheck", "--target", "es2020", "--module", "commonjs",
			"--typeRoots", "/usr/share/nodejs/@types", "--types", "node", "--outDir", "{d}/out", "{d}/main.ts"}},
		Run: []string{"node", "{d}/out/main.js"}, Env: []string{"NODE_PATH={cwd}"}},
	{Name: "bash", Source: "main.sh", Run: []string{"bash", "{d}/main.sh"}},
	{Name: "r", Source: "main.R", Run: []string{"Rscript", "{d}/main.R"}},
	{Name: "php", Source: "main.php", Run: []string{"php", "{d}/main.php"}},
	// A single file outside any module, as `go run main.go` builds it.
	{Name: "go", Source: "main.go", Build: [][]string{{"go", "build", "-o", "{d}/main", "{d}/main.go"}},
		Run: []string{"{d}/main"}, Env: []string{"GO111MODULE=off", "GOFLAGS="}},
	{Name: "rs", Source: "main.rs", Build: [][]string{{"rustc", "--edition", "2021", "-o", "{d}/main", "{d}/main.rs"}}, Run: []string{"{d}/main"}},
	{Name: "c", Source: "main.c", Build: [][]string{{"gcc", "-O2", "-o", "{d}/main", "{d}/main.c", "-lm"}}, Run: []string{"{d}/main"}},
	{Name: "cpp", Source: "main.cpp", Build: [][]string{{"g++", "-O2", "-o", "{d}/main", "{d}/main.cpp"}}, Run: []string{"{d}/main"}},
	// Java's source-file launcher (JEP 330): the first class declared is
	// run; its name need not match the file's.
	{Name: "java", Source: "Main.java", Run: []string{"java", "{d}/Main.java"}},
	{Name: "d", Source: "main.d", Build: [][]string{{"gdc", "-O2", "-o", "{d}/main", "{d}/main.d"}}, Run: []string{"{d}/main"}},
	{Name: "f90", Source: "main.f90", Build: [][]string{{"gfortran", "-O2", "-o", "{d}/main", "{d}/main.f90"}}, Run: []string{"{d}/main"}},
}

// Names lists the language names, in table order.
func Names() []string {
	out := make([]string, len(Languages))
	for i, l := range Languages {
		out[i] = l.Name
	}
	return out
}

// Lookup finds a language by its API name.
func Lookup(name string) (Lang, bool) {
	i := slices.IndexFunc(Languages, func(l Lang) bool { return l.Name == name })
	if i < 0 {
		return Lang{}, false
	}
	return Languages[i], true
}

// MaxFiles bounds the changed-files list of one run.
const MaxFiles = 1000

// RunSpec is the first line of a run's stdin for cmd/sandbox-runner.
type RunSpec struct {
	Nonce  string     `json:"nonce"`
	Dir    string     `json:"dir"`
	Source string     `json:"source"`
	Build  [][]string `json:"build,omitempty"`
	Run    []string   `json:"run"`
	Env    []string   `json:"env,omitempty"`
	Args   []string   `json:"args,omitempty"`
}

// Spec is the runner's spec of one run of l.
func (l Lang) Spec(nonce, dir string, args []string) RunSpec {
	return RunSpec{Nonce: nonce, Dir: dir, Source: l.Source, Build: l.Build, Run: l.Run, Env: l.Env, Args: args}
}

// InlineHeader is the first stdin line of an Inline run: the nonce, then
// the run's directory, the source's name and each arg, hex-encoded (exact
// bytes, no quoting to get wrong, and nothing to import to read it).
func (l Lang) InlineHeader(nonce, dir string, args []string) string {
	var b strings.Builder
	b.WriteString(hex.EncodeToString([]byte(nonce)))
	for _, f := range append([]string{dir, l.Source}, args...) {
		b.WriteByte(' ')
		b.WriteString(hex.EncodeToString([]byte(f)))
	}
	b.WriteByte('\n')
	return b.String()
}

// Script is the same run as a POSIX sh program, for a server without the
// runner (it costs a handful of process starts more). It runs with the
// workdir as its directory; $0 is the run's private directory and the rest
// of its argv are the program's arguments; its stdin is the nonce line
// followed by the source.
func (l Lang) Script() string {
	var b strings.Builder
	b.WriteString("set -u\nd=$0\nIFS= read -r n || exit 125\nmkdir -m 0700 \"$d\" || exit 125\n")
	fmt.Fprintf(&b, "cat >\"$d/%s\" || exit 125\n: >\"$d/.start\"\n", l.Source)
	for _, e := range l.Env {
		fmt.Fprintf(&b, "export %s\n", shWord(e))
	}
	for _, c := range l.Build {
		// Compilers print diagnostics on stdout too (tsc does); the
		// program's stdout is the program's alone.
		fmt.Fprintf(&b, "%s </dev/null >&2 &&\n", shLine(c))
	}
	fmt.Fprintf(&b, "%s \"$@\" </dev/null\nc=$?\nprintf '%%s%%d\\n' \"$n\" \"$c\"\n%s\n", shLine(l.Run), ChangedScript)
	return b.String()
}

func shLine(argv []string) string {
	words := make([]string, len(argv))
	for i, a := range argv {
		words[i] = shWord(a)
	}
	return strings.Join(words, " ")
}

// shWord quotes a for sh, with {d} and {cwd} turned into "$d" and "$PWD".
func shWord(a string) string {
	var b strings.Builder
	lit := func(s string) {
		if s != "" {
			b.WriteString("'" + strings.ReplaceAll(s, "'", `'\''`) + "'")
		}
	}
	for a != "" {
		i := strings.IndexByte(a, '{')
		if i < 0 {
			lit(a)
			break
		}
		switch rest := a[i:]; {
		case strings.HasPrefix(rest, "{d}"):
			lit(a[:i])
			b.WriteString(`"$d"`)
			a = rest[len("{d}"):]
		case strings.HasPrefix(rest, "{cwd}"):
			lit(a[:i])
			b.WriteString(`"$PWD"`)
			a = rest[len("{cwd}"):]
		default:
			lit(a[:i+1])
			a = rest[1:]
		}
	}
	if b.Len() == 0 {
		return "''"
	}
	return b.String()
}

// ChangedScript prints, as ParseFiles reads them, the files under the
// working directory changed since the run began (ctime, which a program
// cannot set back), and removes the run's directory $d. A run that was
// killed before printing them gets it run on its own.
const ChangedScript = `find . -xdev -type f -cnewer "$d/.start" -printf '%s\t%P\0' 2>/dev/null | head -z -n 1000
rm -rf "$d"`

// ListScript prints every file under the working directory, as ParseFiles
// reads them.
const ListScript = `find . -xdev -type f -printf '%s\t%P\0' 2>/dev/null | head -z -n 1000`

// RunDir is a fresh private directory name for one run. It is not secret
// (a program can list /tmp); the nonce is what must not be guessed.
func RunDir() string { return "/tmp/.run." + rand.Text() }

// Nonce is a fresh marker for one run: 26 random base32 characters, so a
// program cannot print it by chance.
func Nonce() string { return "sandbox-run-end-" + rand.Text() }

// File is one file a run created or changed, relative to the workdir.
type File = wire.RunFile

// Trailer is what the script prints after the nonce.
type Trailer struct {
	ExitCode int
	Files    []File
}

// ParseTrailer reads the bytes after the nonce. They come from inside the
// sandbox and are untrusted: anything malformed is skipped, never trusted.
// ok is false when not even the exit code is there.
func ParseTrailer(b []byte) (t Trailer, ok bool) {
	line, rest, found := bytes.Cut(b, []byte("\n"))
	if !found {
		return t, false
	}
	code, err := strconv.Atoi(string(line))
	if err != nil || code < 0 || code > 255 {
		return t, false
	}
	t.ExitCode = code
	t.Files = ParseFiles(rest)
	return t, true
}

// ParseFiles reads a file list printed by ChangedScript or ListScript:
// NUL-terminated "size TAB path" records. Malformed records, absolute paths
// and paths with ".." are dropped; at most MaxFiles are kept.
func ParseFiles(b []byte) []File {
	var files []File
	// Only NUL-terminated records: a list cut short (by a cap) must not
	// report its last path cut short too.
	if i := bytes.LastIndexByte(b, 0); i >= 0 {
		b = b[:i]
	} else {
		b = nil
	}
	for _, rec := range bytes.Split(b, []byte{0}) {
		size, name, found := bytes.Cut(rec, []byte("\t"))
		if !found || len(name) == 0 || len(files) == MaxFiles {
			continue
		}
		n, err := strconv.ParseInt(string(size), 10, 64)
		if err != nil || n < 0 {
			continue
		}
		p := string(name)
		if strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..") {
			continue
		}
		files = append(files, File{Path: p, Size: n})
	}
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	return files
}
