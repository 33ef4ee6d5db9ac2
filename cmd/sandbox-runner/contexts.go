package main

import (
	"bufio"
	_ "embed"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"sort"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/internal/procwire"
)

// Code contexts. A context is a Jupyter kernel that keeps its variables
// between runs, with a driver (ctxdriver.py, on Debian's jupyter_client)
// that speaks the kernel protocol to it and JSON lines to the daemon. The
// daemon starts the driver as its own child, like a background process, so
// a context is in the sandbox's checkpoint: it survives sleep and is
// carried by a fork, variables included. A stop (kill -9 -1) ends it as it
// ends every process but init.

// The drivers: Jupyter kernels and bash through ctxdriver.py, JavaScript
// through ctxdriver.js on node:vm.
var (
	//go:embed ctxdriver.py
	ctxDriver string
	//go:embed ctxdriver.js
	ctxDriverJS string
)

// Bounds: contexts per sandbox, a driver's line (a PNG is base64 in one),
// and how long a kernel may take to start under gVisor.
const (
	maxContexts  = 32
	maxEventLine = 32 << 20
	kernelStart  = 150 * time.Second
)

var ctxID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

type kctx struct {
	info      procwire.Context
	pid       int // the driver's
	kernelPid int
	in        *os.File
	out       *bufio.Reader
	outFile   *os.File
	busy      bool
}

// ctxDo answers the contexts' one-answer ops.
func (d *daemon) ctxDo(req request) answer {
	switch req.Op {
	case "ctxnew":
		return d.ctxNew(req)
	case "ctxlist":
		d.mu.Lock()
		defer d.mu.Unlock()
		a := answer{Boot: d.boot, Contexts: []*procwire.Context{}}
		for _, k := range d.ctxs {
			i := k.info
			i.Busy = k.busy
			a.Contexts = append(a.Contexts, &i)
		}
		sort.Slice(a.Contexts, func(i, j int) bool { return a.Contexts[i].Started < a.Contexts[j].Started })
		return a
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.ctxs[req.Ctx]
	if k == nil {
		return answer{Boot: d.boot, Error: "no such context"}
	}
	switch req.Op {
	case "ctxint":
		if k.kernelPid > 0 {
			syscall.Kill(k.kernelPid, syscall.SIGINT)
		}
	case "ctxdel":
		d.endContext(k)
	default:
		return answer{Boot: d.boot, Error: "unknown op " + req.Op}
	}
	i := k.info
	return answer{Boot: d.boot, Context: &i}
}

// endContext forgets k and ends its driver and kernel; d.mu held. The
// driver shuts its kernel down when its stdin closes; what is left after a
// grace is killed.
func (d *daemon) endContext(k *kctx) {
	delete(d.ctxs, k.info.ID)
	k.in.Close()
	pid, kpid := k.pid, k.kernelPid
	time.AfterFunc(2*time.Second, func() {
		k.outFile.Close()
		syscall.Kill(-pid, syscall.SIGKILL)
		if kpid > 0 {
			syscall.Kill(-kpid, syscall.SIGKILL)
			syscall.Kill(kpid, syscall.SIGKILL)
		}
	})
}

func (d *daemon) ctxNew(req request) answer {
	if !ctxID.MatchString(req.Ctx) {
		return answer{Boot: d.boot, Error: "bad context id"}
	}
	if !ctxID.MatchString(req.Kernel) {
		return answer{Boot: d.boot, Error: "bad kernel name"}
	}
	d.mu.Lock()
	if d.ctxs[req.Ctx] != nil {
		d.mu.Unlock()
		return answer{Boot: d.boot, Error: "the context exists"}
	}
	if len(d.ctxs) >= maxContexts {
		d.mu.Unlock()
		return answer{Boot: d.boot, Error: fmt.Sprintf("%d contexts are open; that is the most one sandbox keeps", maxContexts)}
	}
	prog, argv := "python3", []string{"python3", "-c", ctxDriver, req.Kernel}
	if req.Kernel == "node" {
		prog, argv = "node", []string{"node", "-e", ctxDriverJS}
	}
	path, err := lookPath(prog, req.Env)
	if err != nil {
		d.mu.Unlock()
		return answer{Boot: d.boot, Error: "this image has no " + prog + " to drive the context: code contexts run on the exec image"}
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		d.mu.Unlock()
		return answer{Boot: d.boot, Error: err.Error()}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		d.mu.Unlock()
		inR.Close()
		inW.Close()
		return answer{Boot: d.boot, Error: err.Error()}
	}
	// Its stderr is the driver's and the kernel's log: dropped.
	null, _ := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	env := append(os.Environ(), req.Env...)
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Dir: req.Dir, Env: env,
		Files: []uintptr{inR.Fd(), outW.Fd(), null.Fd()}, Sys: &syscall.SysProcAttr{Setsid: true}})
	inR.Close()
	outW.Close()
	null.Close()
	if err != nil {
		d.mu.Unlock()
		inW.Close()
		outR.Close()
		return answer{Boot: d.boot, Error: fmt.Sprintf("python3: %v", err)}
	}
	k := &kctx{info: procwire.Context{ID: req.Ctx, Kernel: req.Kernel, Dir: req.Dir, Started: time.Now().UnixMilli()},
		pid: pid, in: inW, out: bufio.NewReaderSize(outR, 64<<10), outFile: outR, busy: true}
	d.ctxs[req.Ctx] = k
	d.ctxByPid[pid] = k
	d.mu.Unlock()

	// The kernel's start is waited for off the lock.
	type hello struct {
		Ready     bool   `json:"ready"`
		KernelPid int    `json:"kernelPid"`
		Error     string `json:"error"`
	}
	got := make(chan hello, 1)
	go func() {
		var h hello
		line, err := readLine(k.out, maxEventLine)
		if err != nil {
			h.Error = "the kernel's driver ended before the kernel started"
		} else if json.Unmarshal(line, &h) != nil || (!h.Ready && h.Error == "") {
			h.Error = "the kernel's driver said nonsense"
		}
		got <- h
	}()
	var h hello
	select {
	case h = <-got:
	case <-time.After(kernelStart):
		h.Error = fmt.Sprintf("the kernel did not start in %s", kernelStart)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if h.Error != "" {
		if d.ctxs[req.Ctx] == k {
			d.endContext(k)
		}
		return answer{Boot: d.boot, Error: h.Error}
	}
	k.kernelPid, k.busy = h.KernelPid, false
	i := k.info
	return answer{Boot: d.boot, Context: &i}
}

// ctxRun runs req.Code in its context and streams the driver's events to
// c, one JSON line each, ending with the "end" event. The driver's lines
// are read to the end even when c has gone, so the next run starts clean;
// a caller that went away (a write fails: the server closes its stream, or
// ends the exec, when its caller goes) interrupts the kernel.
func (d *daemon) ctxRun(c net.Conn, req request) {
	enc := json.NewEncoder(c)
	d.mu.Lock()
	k := d.ctxs[req.Ctx]
	switch {
	case k == nil:
		d.mu.Unlock()
		enc.Encode(procwire.Event{Error: "no such context"})
		return
	case k.busy:
		d.mu.Unlock()
		enc.Encode(procwire.Event{Error: "the context is busy with another run"})
		return
	}
	k.busy = true
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		k.busy = false
		d.mu.Unlock()
	}()
	line, _ := json.Marshal(map[string]any{"code": req.Code, "timeout": req.TimeoutSec})
	if _, err := k.in.Write(append(line, '\n')); err != nil {
		enc.Encode(procwire.Event{Error: "the context's kernel has ended"})
		return
	}
	interrupted := false
	failed := false
	for {
		ev, err := readLine(k.out, maxEventLine)
		if err != nil {
			k.outFile.Close()
			if !failed {
				enc.Encode(procwire.Event{Type: "error", Name: "KernelDied", Value: "the context's kernel has ended; its state is lost"})
				enc.Encode(procwire.Event{Type: "end"})
			}
			return
		}
		if !failed {
			if _, err := c.Write(append(ev, '\n')); err != nil {
				failed = true
			}
		}
		if failed && !interrupted && k.kernelPid > 0 {
			interrupted = true
			syscall.Kill(k.kernelPid, syscall.SIGINT)
		}
		var e procwire.Event
		if json.Unmarshal(ev, &e) == nil && e.Type == "end" {
			return
		}
	}
}

// ctxExited notes that a context's driver has ended; d.mu held.
func (d *daemon) ctxExited(pid int) {
	k := d.ctxByPid[pid]
	if k == nil {
		return
	}
	delete(d.ctxByPid, pid)
	if d.ctxs[k.info.ID] == k {
		delete(d.ctxs, k.info.ID)
	}
	k.in.Close()
}
