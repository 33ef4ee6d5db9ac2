package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// apiSocket is where code in the sandbox reaches the server's API
// (relay.Targets.Inward): beside the lease credential, in the sandbox
// user's own 0700 directory, so only that user's programs can use it.
const apiSocket = "/run/sandbox/api.sock"

// listenAPI listens on path for as long as the relay's server asks. The
// socket is made under a name of this process's and renamed into place, so
// a relay ending while its successor starts never removes the successor's
// socket: on close, the name is removed only while it is still this one.
//
// The server may start the relay beside the credential's first write,
// which makes the directory: until it is there and the user's, the listen
// is tried again, for a few seconds.
func listenAPI(path string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := tryListenAPI(path)
		if err == nil || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func tryListenAPI(path string) (net.Listener, error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	tmp := filepath.Join(dir, ".api-"+strconv.Itoa(os.Getpid())+".sock")
	os.Remove(tmp)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(tmp, &st); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, err
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("placing the API socket: %w", err)
	}
	return &apiListener{UnixListener: ln, path: path, ino: st.Ino, dev: st.Dev}, nil
}

type apiListener struct {
	*net.UnixListener
	path     string
	ino, dev uint64
}

func (l *apiListener) Close() error {
	var st syscall.Stat_t
	if syscall.Lstat(l.path, &st) == nil && st.Ino == l.ino && uint64(st.Dev) == l.dev {
		os.Remove(l.path)
	}
	return l.UnixListener.Close()
}
