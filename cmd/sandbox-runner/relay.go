package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/relay"
)

// relayMain is `sandbox-runner relay`: the preview relay's end inside.
// One session (internal/relay) runs over stdin and stdout for as long as
// the server keeps the exec; each stream is a connection to a port on the
// sandbox's own loopback, or to the process daemon (as `sandbox-runner
// proc` is, without its process start). Asked by the server, it also
// listens on the sandbox's API socket (apisock.go) and relays each
// connection made to it the other way, and writes the lease credential
// the server sends (as the user, into the user's own /run/sandbox).
func relayMain(args []string) int {
	if len(args) != 0 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-runner relay")
		return 2
	}
	if err := relay.Serve(stdio{}, relayTargets()); err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner relay:", err)
		return 1
	}
	return 0
}

// relayTargets are what the relay's streams reach, from an exec of
// `sandbox-runner relay` and from init alike.
func relayTargets() relay.Targets {
	return relay.Targets{
		Port: func(port int) (net.Conn, error) {
			return net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), 10*time.Second)
		},
		Procd:  dialProcd,
		Inward: func() (net.Listener, error) { return listenAPI(apiSocket) },
		Credential: func(token []byte) error {
			if os.Getuid() == 0 {
				return errors.New("the relay runs as root: the credential is written by its own exec")
			}
			return writeCredential(filepath.Dir(apiSocket), token)
		},
	}
}

// initRelay serves the relay from init, on the socket the server gave it
// as its stdin (the gVisor backend does, at a sandbox's start): the relay
// is there from the sandbox's first instant and no process starts for it.
// Any other stdin (/dev/null on a restored sandbox, a pod's) is no relay:
// the server starts one by an exec when it needs one. The socket leaves
// fd 0 for a descriptor no child inherits (/dev/null takes its place), so
// a process init starts never holds the server's link. The relay's end
// closes the socket; init goes on without it.
func initRelay() {
	var st syscall.Stat_t
	if err := syscall.Fstat(0, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFSOCK {
		return
	}
	fd, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner init: the relay's socket:", err)
		return
	}
	if null, err := os.Open(os.DevNull); err == nil {
		unix.Dup3(int(null.Fd()), 0, 0)
		null.Close()
	}
	f := os.NewFile(uintptr(fd), "relay")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner init: the relay's socket:", err)
		return
	}
	go func() {
		defer c.Close()
		if err := relay.Serve(c, relayTargets(), relay.Quiet); err != nil {
			fmt.Fprintln(os.Stderr, "sandbox-runner init: relay:", err)
		}
	}()
}

// stdio is the relay's connection: stdin to read, stdout to write.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error {
	os.Stdin.Close()
	return os.Stdout.Close()
}
