package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// A terminal's stdin, after the exec header, is a sequence of frames, so
// that a resize is ordered with the keys around it:
//
//	'd' len:uint32be bytes[len]   keys for the terminal (1 ≤ len ≤ maxFrame)
//	'r' cols:uint16be rows:uint16be   a new size (neither 0)
//
// The kube backend writes them (internal/runtime/kube, ttyFrames).
const (
	frameData   = 'd'
	frameResize = 'r'
	maxFrame    = 64 << 10
)

// ttyMain is `sandbox-runner exec` with the header's TTY: the kube
// backend's terminal. The exec subresource's own terminal (TTY in its
// URL) takes the command in the URL — the apiserver's audit log records
// it — and sends a resize on a stream beside the keys, which the node
// applies when it gets to it: a shell typed `tput cols` right after a
// resize could answer the old size. Here the command came in the header
// and the exec is a plain one: the runner opens the terminal, starts the
// program on it (its session's leader, the terminal its controlling one),
// and applies keys and sizes in the order they come.
//
// The end of stdin is the caller gone (a terminal's caller closes it only
// once the program has ended): the program's process group is killed, as
// the gvisor backend kills it when its caller goes. After the program
// exits, its output is copied for at most 2 s more: a background process
// may hold the terminal open. The exit status is the program's, 128+N for
// signal N.
func ttyMain(h *execHeader, path string, argv []string, in io.Reader) int {
	master, slave, err := openPTY()
	if err != nil {
		fmt.Fprintf(os.Stdout, "sandbox-runner exec: a terminal: %v\r\n", err)
		return 126
	}
	p, err := os.StartProcess(path, argv, &os.ProcAttr{
		Env:   h.Env,
		Files: []*os.File{slave, slave, slave},
		Sys:   &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0},
	})
	slave.Close()
	if err != nil {
		master.Close()
		fmt.Fprintf(os.Stdout, "sandbox-runner exec: %s: %v\r\n", h.Argv[0], errors.Unwrap(err))
		if errors.Is(err, syscall.ENOENT) {
			return 127
		}
		return 126
	}
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		io.Copy(os.Stdout, master) // ends with EIO once no one holds the terminal, or at Close
	}()
	// The group is killed only while the program is not yet waited for:
	// after, its number may be another's.
	var mu sync.Mutex
	waited := false
	go func() {
		readFrames(in, func(b []byte) error {
			_, err := master.Write(b)
			return err
		}, func(cols, rows uint16) {
			setSize(master, cols, rows, p.Pid)
		})
		mu.Lock()
		defer mu.Unlock()
		if !waited {
			syscall.Kill(-p.Pid, syscall.SIGKILL)
		}
	}()
	st, err := p.Wait()
	mu.Lock()
	waited = true
	mu.Unlock()
	select {
	case <-copied:
	case <-time.After(2 * time.Second):
	}
	master.Close()
	<-copied
	if err != nil {
		fmt.Fprintf(os.Stdout, "sandbox-runner exec: %v\r\n", err)
		return 125
	}
	ws := st.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// readFrames reads frames from r until it ends or says something that is
// no frame, handing keys to data and sizes to resize.
func readFrames(r io.Reader, data func([]byte) error, resize func(cols, rows uint16)) error {
	br := bufio.NewReaderSize(r, maxFrame)
	buf := make([]byte, maxFrame)
	var n [4]byte
	for {
		t, err := br.ReadByte()
		if err != nil {
			return err
		}
		if _, err := io.ReadFull(br, n[:]); err != nil {
			return err
		}
		switch t {
		case frameData:
			size := binary.BigEndian.Uint32(n[:])
			if size == 0 || size > maxFrame {
				return fmt.Errorf("a frame of %d bytes", size)
			}
			if _, err := io.ReadFull(br, buf[:size]); err != nil {
				return err
			}
			if err := data(buf[:size]); err != nil {
				return err
			}
		case frameResize:
			cols, rows := binary.BigEndian.Uint16(n[:2]), binary.BigEndian.Uint16(n[2:])
			if cols == 0 || rows == 0 {
				return fmt.Errorf("a size of %dx%d", cols, rows)
			}
			resize(cols, rows)
		default:
			return fmt.Errorf("a frame of type %#x", t)
		}
	}
}

// openPTY opens a terminal whose master is non-blocking, in Go's poller,
// so that Close ends a read under way: creack/pty's Open leaves it blocking
// (its ioctls go through Fd), and a blocking master's read ends only when
// every holder of the terminal has closed it — a background process left
// on it would hold the runner for as long as it lives.
func openPTY() (master, slave *os.File, err error) {
	p, slave, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	fd, err := unix.FcntlInt(p.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		if err = unix.SetNonblock(fd, true); err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		slave.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), slave, nil
}

// setSize sets the terminal's size through the master's raw connection
// (Fd would make it blocking again) and tells the terminal's foreground
// process group, else the program's (pid), with SIGWINCH: gVisor's
// terminal does not signal a resize by itself, Linux's does (a second
// SIGWINCH is harmless).
func setSize(master *os.File, cols, rows uint16, pid int) {
	rc, err := master.SyscallConn()
	if err != nil {
		return
	}
	pgrp := 0
	rc.Control(func(fd uintptr) {
		unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
		pgrp, _ = unix.IoctlGetInt(int(fd), unix.TIOCGPGRP)
	})
	if pgrp <= 0 {
		pgrp = pid
	}
	syscall.Kill(-pgrp, syscall.SIGWINCH)
}
