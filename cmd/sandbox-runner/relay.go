package main

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

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
	err := relay.Serve(stdio{}, relay.Targets{
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
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner relay:", err)
		return 1
	}
	return 0
}

// stdio is the relay's connection: stdin to read, stdout to write.
type stdio struct{}

func (stdio) Read(p []byte) (int, error)  { return os.Stdin.Read(p) }
func (stdio) Write(p []byte) (int, error) { return os.Stdout.Write(p) }
func (stdio) Close() error {
	os.Stdin.Close()
	return os.Stdout.Close()
}
