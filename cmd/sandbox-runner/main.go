// Command sandbox-runner is the server's one binary inside a sandbox. With
// no argument it runs ONE code-interpreter program and reports what it did
// (below); `sandbox-runner init` is the sandbox's PID 1 and its process
// daemon (procd.go); `sandbox-runner proc` is the exec channel's way to that
// daemon; `sandbox-runner changes` tars what a pod changed (changes.go);
// `sandbox-runner relay` relays port previews and process calls (relay.go),
// `sandbox-runner connect` one preview connection (connect.go: the way of
// servers before the relay);
// `sandbox-runner credential` writes the lease credential (credential.go);
// `sandbox-runner exec` runs a kube exec whose argv and environment come on
// stdin (exec.go);
// `sandbox-runner stats` reads the sandbox's use from inside (stats.go).
//
// The server bind-mounts it read-only into every sandbox and runs it over
// the exec channel; it is a static binary with no dependency on the image.
//
// It replaces a shell pipeline (sh, mkdir, cat, find, head, rm) whose six
// process starts cost more than the program itself: here the source is
// written, the build and the program started, and the workdir walked from
// one process.
//
// Input on stdin: one line of JSON (interp.RunSpec), then the source. Output:
// the program's stdout and stderr as they come (the program writes to this
// process's own descriptors), then, on stdout, the spec's nonce, the exit
// code and the files changed under the working directory, as
// interp.ParseTrailer reads them. The build's output goes to stderr.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// spec mirrors interp.RunSpec (this binary imports nothing of the server's,
// to stay small and stable).
type spec struct {
	Nonce  string     `json:"nonce"`
	Dir    string     `json:"dir"`
	Source string     `json:"source"`
	Build  [][]string `json:"build"`
	Run    []string   `json:"run"`
	Env    []string   `json:"env"`
	Args   []string   `json:"args"`
}

const maxFiles = 1000

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "init":
			os.Exit(initMain(os.Args[2:]))
		case "proc":
			os.Exit(procMain())
		case "changes":
			os.Exit(changesMain(os.Args[2:]))
		case "relay":
			os.Exit(relayMain(os.Args[2:]))
		case "connect":
			os.Exit(connectMain(os.Args[2:]))
		case "credential":
			os.Exit(credentialMain())
		case "exec":
			os.Exit(execMain())
		case "install":
			os.Exit(installMain(os.Args[2:]))
		case "stats":
			os.Exit(statsMain())
		case "watch":
			os.Exit(watchMain(os.Args[2:]))
		}
	}
	os.Exit(run())
}

func run() int {
	in := bufio.NewReaderSize(os.Stdin, 64<<10)
	line, err := in.ReadBytes('\n')
	var s spec
	if err != nil || json.Unmarshal(line, &s) != nil || s.Nonce == "" || s.Dir == "" || len(s.Run) == 0 {
		fmt.Fprintln(os.Stderr, "sandbox-runner: bad run spec")
		return 125
	}
	if err := os.Mkdir(s.Dir, 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner:", err)
		return 125
	}
	defer os.RemoveAll(s.Dir)
	src, err := os.Create(filepath.Join(s.Dir, s.Source))
	if err == nil {
		_, err = io.Copy(src, in)
		if cerr := src.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner: writing the source:", err)
		return 125
	}
	// The stamp's ctime is "before the run": a file with a later ctime was
	// created or changed by it (ctime cannot be set back by a program).
	stamp := filepath.Join(s.Dir, ".start")
	if err := os.WriteFile(stamp, nil, 0o600); err != nil {
		return 125
	}
	var st syscall.Stat_t
	if err := syscall.Stat(stamp, &st); err != nil {
		return 125
	}
	cwd, _ := os.Getwd()
	expand := func(v string) string {
		return strings.NewReplacer("{d}", s.Dir, "{cwd}", cwd).Replace(v)
	}
	env := os.Environ()
	for _, e := range s.Env {
		env = append(env, expand(e))
	}
	code := 0
	for _, b := range s.Build {
		// Compilers print diagnostics on stdout too; stdout is the program's.
		if code = start(expand, b, nil, env, os.Stderr); code != 0 {
			break
		}
	}
	if code == 0 {
		code = start(expand, s.Run, s.Args, env, os.Stdout)
	}
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	fmt.Fprintf(w, "%s%d\n", s.Nonce, code)
	changed(w, st.Ctim)
	w.Flush()
	return 0
}

// start runs argv (expanded) plus args with stdin from /dev/null and
// answers its exit code, 128+signal when killed by one.
func start(expand func(string) string, argv, args, env []string, stdout *os.File) int {
	full := make([]string, 0, len(argv)+len(args))
	for _, a := range argv {
		full = append(full, expand(a))
	}
	full = append(full, args...) // the caller's args are never expanded
	cmd := exec.Command(full[0], full[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, stdout, os.Stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return exit.ExitCode()
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(os.Stderr, "sandbox-runner: %s: not found\n", full[0])
		return 127
	default:
		fmt.Fprintf(os.Stderr, "sandbox-runner: %s: %v\n", full[0], err)
		return 126
	}
}

// changed writes "size TAB path NUL" for each regular file under the
// working directory, on its filesystem, whose ctime is after since.
func changed(w io.Writer, since syscall.Timespec) {
	root, err := os.Getwd()
	if err != nil {
		return
	}
	var rootDev uint64
	var rs syscall.Stat_t
	if syscall.Lstat(root, &rs) == nil {
		rootDev = rs.Dev
	}
	n := 0
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || n >= maxFiles {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) != nil {
			return nil
		}
		if d.IsDir() {
			if st.Dev != rootDev {
				return filepath.SkipDir // -xdev
			}
			return nil
		}
		if !d.Type().IsRegular() || !after(st.Ctim, since) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		fmt.Fprintf(w, "%d\t%s\x00", st.Size, rel)
		n++
		return nil
	})
}

func after(a, b syscall.Timespec) bool {
	return a.Sec > b.Sec || (a.Sec == b.Sec && a.Nsec > b.Nsec)
}
