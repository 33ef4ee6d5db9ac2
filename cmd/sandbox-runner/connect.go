package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
)

// connectMain is `sandbox-runner connect PORT`: one preview connection,
// an exec each (the server's fallback where a sandbox's runner predates
// `relay`; relay.go carries every connection on one exec). It dials PORT on the sandbox's own loopback and, once
// connected, writes one NUL byte (so the server tells "connected" from
// "nothing listens"), then pipes stdin to the connection and the
// connection to stdout. Nothing listening is exit 4, before any byte.
func connectMain(args []string) int {
	if len(args) != 1 {
		fmt.Fprintln(os.Stderr, "usage: sandbox-runner connect PORT")
		return 2
	}
	port, err := strconv.Atoi(args[0])
	if err != nil || port < 1 || port > 65535 {
		fmt.Fprintln(os.Stderr, "sandbox-runner connect: bad port")
		return 2
	}
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		fmt.Fprintf(os.Stderr, "nothing listens on port %d in this sandbox\n", port)
		return 4
	}
	tc := c.(*net.TCPConn)
	if _, err := os.Stdout.Write([]byte{0}); err != nil {
		return 1
	}
	go func() {
		io.Copy(tc, os.Stdin)
		tc.CloseWrite()
	}()
	io.Copy(os.Stdout, tc)
	return 0
}
