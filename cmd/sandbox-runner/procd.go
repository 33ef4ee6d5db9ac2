package main

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/creack/pty"

	"github.com/sandboxd/sandbox/internal/procwire"
)

// The process daemon is PID 1 of a sandbox (`sandbox-runner init`). It
// does what init must — reap every orphan, outlive every signal — and owns
// the sandbox's background processes: it starts them as its own children,
// keeps each one's output in a ring, feeds its stdin and records its end.
//
// Being init is the point, not a convenience. A process started by `runsc
// exec` is tied to that exec's host-side stdio and does not survive a
// checkpoint; init's children do, so a sleeping or forked sandbox keeps its
// background processes running. And `kill -9 -1` (stop) spares init, so the
// records outlive the processes it kills.
//
// It is reached on the abstract unix socket procdSocket, through
// `sandbox-runner proc` run over the exec channel. One connection is one
// request: a JSON line, then for "stdin" the bytes to write; the answer is a
// JSON line, or for "output" a stream of frames (see frame). The caller is
// the server — or the sandbox's own code, which runs as the same user and
// can do nothing through the socket it could not do by itself.

const procdSocket = procwire.Socket

// Bounds. ringBytes is documented in the API: the output kept per process.
const (
	ringBytes   = 1 << 20
	maxRunning  = 256
	maxFinished = 128
	pingEvery   = 15 * time.Second
	drainGrace  = time.Second
	maxRequest  = procwire.MaxRequest
)

// The wire types are the server's too (internal/procwire).
type (
	request = procwire.Request
	record  = procwire.Record
	answer  = procwire.Answer
	frame   = procwire.Frame
)

type proc struct {
	rec     record
	ring    *ring
	stdin   *os.File // nil once closed
	tty     *os.File // the pty's master, for resize
	exited  bool
	readers int // output pipes still open
	drained bool
	notify  chan struct{}
	timer   *time.Timer
}

type daemon struct {
	boot string
	mu   sync.Mutex
	ps   map[int]*proc
	// Code contexts (contexts.go), by id and by their driver's pid.
	ctxs     map[string]*kctx
	ctxByPid map[int]*kctx
}

// initMain is `sandbox-runner init [STAMP]`. It first creates the empty file STAMP: its
// ctime is the sandbox's start, before which nothing the sandbox did can
// be (a pod's snapshot reads what changed after it, changes.go).
func initMain(args []string) int {
	if len(args) > 0 {
		if f, err := os.OpenFile(args[0], os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600); err == nil {
			f.Close()
		} else {
			fmt.Fprintln(os.Stderr, "sandbox-runner init: the start stamp:", err)
		}
	}
	// TERM ends init, and with it the sandbox: it is how the kubelet stops
	// a pod, which waits out its least grace (two seconds) for an init deaf
	// to it before the kill. From inside, only the sandbox's own code can
	// send it, and that code can end its own sandbox anyway. The other
	// signals are caught and dropped, not ignored: an ignored disposition
	// is inherited across exec, and every process init starts would then
	// be deaf to INT.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	go func() {
		for s := range sigs {
			if s == syscall.SIGTERM {
				os.Exit(0)
			}
		}
	}()
	b := make([]byte, 8)
	rand.Read(b)
	d := &daemon{boot: hex.EncodeToString(b), ps: map[int]*proc{}, ctxs: map[string]*kctx{}, ctxByPid: map[int]*kctx{}}
	go d.reap()
	ln, err := net.Listen("unix", procdSocket)
	initRelay() // after the listen: a stream to the daemon finds it
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner init: no process socket:", err)
		select {} // still init: keep reaping
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go d.serve(c)
	}
}

// reap waits for every child, its own and the orphans it inherits, and
// records the ends of its own. A child is registered under d.mu before the
// lock is released after its fork, so an end found here is never for a
// process not yet known.
func (d *daemon) reap() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGCHLD)
	// A missed signal is found anyway, once a minute. Rarely needed:
	// signal.Notify keeps one SIGCHLD pending, and every wake leaves no
	// child unreaped. Each wake of an idle sandbox costs ~1 ms of CPU under
	// systrap: a tick a second was most of what 300 idle sandboxes used
	// (17% of two cores; 3.6% with this one).
	tick := time.NewTicker(time.Minute)
	for {
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
			d.exited(pid, ws)
		}
		select {
		case <-ch:
		case <-tick.C:
		}
	}
}

func (d *daemon) exited(pid int, ws syscall.WaitStatus) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ctxExited(pid)
	p := d.ps[pid]
	if p == nil || p.exited {
		return
	}
	p.exited = true
	p.rec.Ended = time.Now().UnixMilli()
	code := ws.ExitStatus()
	if ws.Signaled() {
		p.rec.Signal = int(ws.Signal())
		code = 128 + int(ws.Signal())
	}
	if p.rec.TimedOut {
		code = 124
	}
	p.rec.ExitCode = &code
	if p.timer != nil {
		p.timer.Stop()
	}
	p.closeStdin()
	// Output a grandchild still holds open is not waited for long.
	time.AfterFunc(drainGrace, func() {
		d.mu.Lock()
		p.drained = true
		p.wake()
		d.mu.Unlock()
	})
	p.wake()
	d.prune()
}

// prune forgets the oldest finished processes beyond maxFinished (the
// server keeps their records).
func (d *daemon) prune() {
	var done []*proc
	for _, p := range d.ps {
		if p.exited {
			done = append(done, p)
		}
	}
	if len(done) <= maxFinished {
		return
	}
	sort.Slice(done, func(i, j int) bool { return done[i].rec.Ended < done[j].rec.Ended })
	for _, p := range done[:len(done)-maxFinished] {
		delete(d.ps, p.rec.Pid)
	}
}

func (p *proc) wake() {
	close(p.notify)
	p.notify = make(chan struct{})
}

func (p *proc) closeStdin() {
	if p.stdin != nil {
		if p.stdin != p.tty {
			p.stdin.Close()
		}
		p.stdin = nil
		p.rec.StdinOpen = false
	}
}

// snapshot is p's record now; d.mu held.
func (p *proc) snapshot() *record {
	r := p.rec
	r.Output, r.Dropped = p.ring.end, p.ring.start()
	return &r
}

func (d *daemon) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	line, err := readLine(br, maxRequest)
	var req request
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	enc := json.NewEncoder(c)
	if err != nil {
		enc.Encode(answer{Error: "bad request: " + err.Error()})
		return
	}
	switch req.Op {
	case "output":
		d.output(c, req)
		return
	case "stdin":
		enc.Encode(d.stdin(br, req))
		return
	case "ctxrun":
		d.ctxRun(c, req)
		return
	case "ctxnew", "ctxlist", "ctxint", "ctxdel":
		enc.Encode(d.ctxDo(req))
		return
	}
	enc.Encode(d.do(req))
}

func readLine(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, more, err := br.ReadLine()
		if err != nil {
			return nil, err
		}
		line = append(line, part...)
		if len(line) > max {
			return nil, errors.New("request too long")
		}
		if !more {
			return line, nil
		}
	}
}

func (d *daemon) do(req request) answer {
	switch req.Op {
	case "boot":
		return answer{Boot: d.boot}
	case "start":
		return d.start(req)
	case "list":
		d.mu.Lock()
		defer d.mu.Unlock()
		a := answer{Boot: d.boot, Processes: []*record{}}
		for _, p := range d.ps {
			a.Processes = append(a.Processes, p.snapshot())
		}
		sort.Slice(a.Processes, func(i, j int) bool { return a.Processes[i].Started < a.Processes[j].Started })
		return a
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.ps[req.Pid]
	if p == nil {
		return answer{Boot: d.boot, Error: "no such process"}
	}
	switch req.Op {
	case "get":
	case "signal":
		if p.exited {
			return answer{Boot: d.boot, Error: "the process has ended", Process: p.snapshot()}
		}
		if req.Signal <= 0 || req.Signal > 64 {
			return answer{Boot: d.boot, Error: "bad signal"}
		}
		// The process leads its own group: the signal reaches what it
		// started too, as a terminal's ^C would.
		if err := syscall.Kill(-p.rec.Pid, syscall.Signal(req.Signal)); err != nil {
			syscall.Kill(p.rec.Pid, syscall.Signal(req.Signal))
		}
	case "resize":
		if p.tty == nil {
			return answer{Boot: d.boot, Error: "the process has no terminal"}
		}
		if req.Cols == 0 || req.Rows == 0 {
			return answer{Boot: d.boot, Error: "bad size"}
		}
		pty.Setsize(p.tty, &pty.Winsize{Cols: req.Cols, Rows: req.Rows})
	default:
		return answer{Boot: d.boot, Error: "unknown op " + req.Op}
	}
	return answer{Boot: d.boot, Process: p.snapshot()}
}

func (d *daemon) start(req request) answer {
	if len(req.Argv) == 0 || req.Argv[0] == "" {
		return answer{Boot: d.boot, Error: "argv is empty"}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	running := 0
	for _, p := range d.ps {
		if !p.exited {
			running++
		}
	}
	if running >= maxRunning {
		return answer{Boot: d.boot, Error: fmt.Sprintf("%d processes are running; that is the most one sandbox keeps", maxRunning)}
	}
	path, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		return answer{Boot: d.boot, Error: err.Error()}
	}
	env := append(os.Environ(), req.Env...)
	p := &proc{ring: newRing(ringBytes), notify: make(chan struct{})}
	var files []uintptr
	var closeAfter []*os.File
	var outs []*os.File
	attr := &syscall.SysProcAttr{Setsid: true}
	if req.TTY {
		master, slave, err := pty.Open()
		if err != nil {
			return answer{Boot: d.boot, Error: "no terminal: " + err.Error()}
		}
		if req.Cols > 0 && req.Rows > 0 {
			pty.Setsize(master, &pty.Winsize{Cols: req.Cols, Rows: req.Rows})
		}
		files = []uintptr{slave.Fd(), slave.Fd(), slave.Fd()}
		closeAfter = []*os.File{slave}
		attr.Setctty, attr.Ctty = true, 0
		p.tty, p.stdin = master, master
		outs = []*os.File{master}
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			return answer{Boot: d.boot, Error: err.Error()}
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			return answer{Boot: d.boot, Error: err.Error()}
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			inR.Close()
			inW.Close()
			outR.Close()
			outW.Close()
			return answer{Boot: d.boot, Error: err.Error()}
		}
		files = []uintptr{inR.Fd(), outW.Fd(), errW.Fd()}
		closeAfter = []*os.File{inR, outW, errW}
		p.stdin = inW
		outs = []*os.File{outR, errR}
	}
	pid, err := syscall.ForkExec(path, req.Argv, &syscall.ProcAttr{Dir: req.Dir, Env: env, Files: files, Sys: attr})
	for _, f := range closeAfter {
		f.Close()
	}
	if err != nil {
		p.stdin.Close()
		for _, f := range outs {
			if f != p.stdin {
				f.Close()
			}
		}
		return answer{Boot: d.boot, Error: fmt.Sprintf("%s: %v", req.Argv[0], err)}
	}
	p.rec = record{Pid: pid, Argv: req.Argv, Dir: req.Dir, TTY: req.TTY, Started: time.Now().UnixMilli(), StdinOpen: true}
	d.ps[pid] = p
	p.readers = len(outs)
	for i, f := range outs {
		go d.copyOut(p, byte(i+1), f)
	}
	if req.Stdin != "" {
		// Written off the lock: a program not reading yet must not hold
		// the daemon.
		go func(w *os.File, s string) { w.Write([]byte(s)) }(p.stdin, req.Stdin)
	}
	if req.TimeoutSec > 0 {
		p.timer = time.AfterFunc(time.Duration(req.TimeoutSec)*time.Second, func() {
			d.mu.Lock()
			if !p.exited {
				p.rec.TimedOut = true
				syscall.Kill(-pid, syscall.SIGKILL)
				syscall.Kill(pid, syscall.SIGKILL)
			}
			d.mu.Unlock()
		})
	}
	return answer{Boot: d.boot, Process: p.snapshot()}
}

// lookPath finds argv[0] as a shell would, on the request's PATH if it
// sets one.
func lookPath(file string, env []string) (string, error) {
	if file == "" {
		return "", errors.New("empty program name")
	}
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := os.Getenv("PATH")
	for _, e := range env {
		if v, ok := strings.CutPrefix(e, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		full := dir + "/" + file
		if st, err := os.Stat(full); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return full, nil
		}
	}
	return "", fmt.Errorf("%s: not found", file)
}

func (d *daemon) copyOut(p *proc, stream byte, f *os.File) {
	defer f.Close()
	buf := make([]byte, maxChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			d.mu.Lock()
			p.ring.write(stream, buf[:n])
			p.wake()
			d.mu.Unlock()
		}
		if err != nil { // EOF, or EIO from a pty whose last holder closed
			break
		}
	}
	d.mu.Lock()
	p.readers--
	p.wake()
	d.mu.Unlock()
}

func (d *daemon) stdin(br *bufio.Reader, req request) answer {
	d.mu.Lock()
	p := d.ps[req.Pid]
	var w *os.File
	if p != nil {
		w = p.stdin
	}
	d.mu.Unlock()
	if p == nil {
		return answer{Boot: d.boot, Error: "no such process"}
	}
	if w == nil {
		return answer{Boot: d.boot, Error: "the process's stdin is closed"}
	}
	n, err := io.Copy(w, br)
	if err != nil {
		return answer{Boot: d.boot, Error: "writing stdin: " + err.Error(), Written: n}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if req.EOF {
		if p.tty != nil {
			// A terminal's end of input is ^D at the start of a line.
			p.tty.Write([]byte{4})
		} else {
			p.closeStdin()
		}
	}
	return answer{Boot: d.boot, Written: n, Process: p.snapshot()}
}

// output streams the bytes after req.From, then, with Follow, what comes,
// until the process has ended and its output is drained.
func (d *daemon) output(c net.Conn, req request) {
	w := bufio.NewWriterSize(c, 64<<10)
	send := func(f frame, data []byte) error {
		b, _ := json.Marshal(f)
		w.Write(append(b, '\n'))
		_, err := w.Write(data)
		return err
	}
	from := req.From
	ping := time.NewTicker(pingEvery)
	defer ping.Stop()
	for {
		d.mu.Lock()
		p := d.ps[req.Pid]
		if p == nil {
			d.mu.Unlock()
			json.NewEncoder(c).Encode(answer{Boot: d.boot, Error: "no such process"})
			return
		}
		chunks, dropped := p.ring.since(from)
		done := p.exited && (p.readers == 0 || p.drained)
		var end *record
		if done {
			end = p.snapshot()
		}
		notify := p.notify
		d.mu.Unlock()
		if dropped > 0 {
			from += dropped
			send(frame{S: "dropped", Off: from, N: int(dropped)}, nil)
		}
		for _, ch := range chunks {
			s := "stdout"
			if ch.stream == 2 {
				s = "stderr"
			}
			send(frame{S: s, Off: ch.off, N: len(ch.data)}, ch.data)
			from = ch.off + int64(len(ch.data))
		}
		if done || !req.Follow {
			if end == nil {
				d.mu.Lock()
				end = p.snapshot()
				d.mu.Unlock()
				send(frame{S: "state", End: end}, nil)
			} else {
				send(frame{S: "end", End: end}, nil)
			}
			w.Flush()
			return
		}
		if err := w.Flush(); err != nil {
			return
		}
		select {
		case <-notify:
		case <-ping.C:
			if send(frame{S: "ping"}, nil) != nil || w.Flush() != nil {
				return
			}
		}
	}
}

// procMain is `sandbox-runner proc`: a pipe between the exec channel and
// the daemon's socket. Everything on stdin goes to the daemon (the request
// line, then any stdin data) and everything it answers to stdout.
// dialProcd connects to the daemon, waiting up to a second for it: a
// sandbox's first call can come before its init has started listening.
func dialProcd() (net.Conn, error) {
	var c net.Conn
	var err error
	for i := 0; i < 20; i++ {
		if c, err = net.Dial("unix", procdSocket); err == nil {
			return c, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil, err
}

func procMain() int {
	c, err := dialProcd()
	if err != nil {
		fmt.Fprintln(os.Stderr, "sandbox-runner proc: no process daemon in this sandbox (it was started before background processes existed): ", err)
		return 3
	}
	uc := c.(*net.UnixConn)
	go func() {
		io.Copy(uc, os.Stdin)
		uc.CloseWrite()
	}()
	if _, err := io.Copy(os.Stdout, uc); err != nil {
		return 1
	}
	return 0
}
