package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// execHeader is what `sandbox-runner exec` reads before the program's
// stdin: where to run, with which environment, what.
type execHeader struct {
	Dir  string   `json:"dir"`
	Env  []string `json:"env"`
	Argv []string `json:"argv"`
	// TTY runs the program on a terminal of the runner's own; the rest of
	// stdin is then frames, its size among them (see tty.go).
	TTY bool `json:"tty,omitempty"`
}

// maxExecHeader bounds the header (argv and environment together): Linux
// takes no more than a few MiB of them either.
const maxExecHeader = 4 << 20

// execMain is `sandbox-runner exec`: the kube backend's exec of a command
// whose directory, environment and argv come on stdin, not in the exec
// subresource's URL — which the apiserver's audit log records (at the
// Metadata level too: the request URI) and every proxy on the way may. A
// caller's env often holds its own secrets (an API key for the program).
//
// Stdin starts with the header's length in 8 hex digits and that many
// bytes of JSON (execHeader); the rest is the program's. Exactly those
// bytes are read (os.Stdin is not buffered), then the program replaces
// this process with the rest of stdin unread. It answers as the shell
// wrapper before it did: 126 for a directory it cannot enter or a program
// it cannot run, 127 for one not found (on the header's PATH, nor by the
// image's env(1)). With the header's TTY, the program runs on a terminal
// instead, under this process (ttyMain); what the runner says of its own
// then goes to stdout, the terminal's one stream.
func execMain() int {
	h, err := readExecHeader(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner exec:", err)
		return 125
	}
	say, eol := io.Writer(os.Stderr), "\n"
	if h.TTY {
		say, eol = os.Stdout, "\r\n"
	}
	if h.Dir != "" {
		if err := os.Chdir(h.Dir); err != nil {
			fmt.Fprintf(say, "sandbox-runner exec: cd %s: %v%s", h.Dir, errors.Unwrap(err), eol)
			return 126
		}
	}
	argv := h.Argv
	path, err := lookPath(argv[0], h.Env)
	if err != nil {
		// Not a file on PATH: the image's own env(1) may still run it, as
		// it did under the shell wrapper (busybox's runs its applets by
		// name, with no link on PATH); it answers 127 if it cannot.
		if path, err = lookPath("env", h.Env); err != nil {
			fmt.Fprintf(say, "sandbox-runner exec: %s: not found%s", argv[0], eol)
			return 127
		}
		argv = append(append([]string{"env", "-i"}, h.Env...), argv...)
	}
	if h.TTY {
		return ttyMain(h, path, argv, os.Stdin)
	}
	err = syscall.Exec(path, argv, h.Env)
	fmt.Fprintf(say, "sandbox-runner exec: %s: %v%s", h.Argv[0], err, eol)
	if errors.Is(err, syscall.ENOENT) {
		return 127
	}
	return 126
}

func readExecHeader(r io.Reader) (*execHeader, error) {
	var n [8]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, fmt.Errorf("the header's length: %w", err)
	}
	size, err := strconv.ParseUint(string(n[:]), 16, 32)
	if err != nil || size > maxExecHeader {
		return nil, fmt.Errorf("the header's length %q", n[:])
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, fmt.Errorf("the header: %w", err)
	}
	var h execHeader
	if err := json.Unmarshal(b, &h); err != nil {
		return nil, fmt.Errorf("the header: %w", err)
	}
	if len(h.Argv) == 0 || h.Argv[0] == "" {
		return nil, errors.New("the header has no argv")
	}
	return &h, nil
}
