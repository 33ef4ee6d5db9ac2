// Package interp is the code interpreter's knowledge: the 13 languages, how
// each is built and run inside an exec sandbox, and how the answer of one
// run is read back. It runs nothing itself; the service hands the script to
// the runtime.
//
// One run is ONE exec (the interpreter's latency is the point): a POSIX sh
// script reads a nonce line and the source from stdin, builds (build output
// goes to stderr), runs the program in the workdir with the caller's args
// and /dev/null as stdin, then prints the nonce, the exit code and the
// files changed under the workdir. The service splits stdout at the nonce.
// The nonce arrives over stdin, not argv or env, so a program cannot read it
// from /proc/$PPID/cmdline; a program that digs it out anyway can only
// forge its own answer.
package interp

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Lang is one language of the interpreter.
type Lang struct {
	Name   string // the API name: "py", "rs", ...
	Source string // file name of the source, in the run's private directory
	// Build and Run are sh fragments. $d is the run's private directory
	// (source and build products, removed after the run) and the program's
	// arguments are "$@". Build may be empty.
	Build string
	Run   string
}

// Languages is the closed table, in the order the errors list them.
var Languages = []Lang{
	{Name: "py", Source: "main.py", Run: `PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 "$d/main.py" "$@"`},
	{Name: "js", Source: "main.js", Run: `NODE_PATH="$PWD" node "$d/main.js" "$@"`},
	{Name: "ts", Source: "main.ts",
		Build: `tsc --pretty false --skipLibCheck --target es2020 --module commonjs --typeRoots /usr/share/nodejs/@types --types node --outDir "$d/out" "$d/main.ts"`,
		Run:   `NODE_PATH="$PWD" node "$d/out/main.js" "$@"`},
	{Name: "bash", Source: "main.sh", Run: `bash "$d/main.sh" "$@"`},
	{Name: "r", Source: "main.R", Run: `Rscript "$d/main.R" "$@"`},
	{Name: "php", Source: "main.php", Run: `php "$d/main.php" "$@"`},
	{Name: "go", Source: "main.go",
		// A single file outside any module, as `go run main.go` would build it.
		Build: `GO111MODULE=off GOFLAGS= go build -o "$d/main" "$d/main.go"`, Run: `"$d/main" "$@"`},
	{Name: "rs", Source: "main.rs", Build: `rustc --edition 2021 -o "$d/main" "$d/main.rs"`, Run: `"$d/main" "$@"`},
	{Name: "c", Source: "main.c", Build: `gcc -O2 -o "$d/main" "$d/main.c" -lm`, Run: `"$d/main" "$@"`},
	{Name: "cpp", Source: "main.cpp", Build: `g++ -O2 -o "$d/main" "$d/main.cpp"`, Run: `"$d/main" "$@"`},
	// Java's source-file launcher (JEP 330): the first class declared is run;
	// its name need not match the file's.
	{Name: "java", Source: "Main.java", Run: `java "$d/Main.java" "$@"`},
	{Name: "d", Source: "main.d", Build: `gdc -O2 -o "$d/main" "$d/main.d"`, Run: `"$d/main" "$@"`},
	{Name: "f90", Source: "main.f90", Build: `gfortran -O2 -o "$d/main" "$d/main.f90"`, Run: `"$d/main" "$@"`},
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

// Script is the sh program of one run of l. It runs with the workdir as
// its directory; $0 is the run's private directory (see RunDir) and the
// rest of its argv are the program's arguments; its stdin is the nonce line
// followed by the source.
func (l Lang) Script() string {
	build := ":"
	if l.Build != "" {
		// Compilers print diagnostics on stdout too (tsc does); the program's
		// stdout is the program's alone.
		build = "{ " + l.Build + "; } </dev/null >&2"
	}
	return fmt.Sprintf(`set -u
d=$0
IFS= read -r n || exit 125
mkdir -m 0700 "$d" || exit 125
cat >"$d/%s" || exit 125
: >"$d/.start"
%s && { %s; } </dev/null
c=$?
printf '%%s%%d\n' "$n" "$c"
%s
`, l.Source, build, l.Run, ChangedScript)
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
type File struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
}

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
