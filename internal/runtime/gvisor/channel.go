package gvisor

import (
	"context"
	"debug/buildinfo"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/creack/pty"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/log"
	"gvisor.dev/gvisor/pkg/sentry/control"
	"gvisor.dev/gvisor/pkg/sentry/kernel/auth"
	"gvisor.dev/gvisor/pkg/urpc"
	"gvisor.dev/gvisor/runsc/boot"
	"gvisor.dev/gvisor/runsc/config"
	"gvisor.dev/gvisor/runsc/container"
	"gvisor.dev/gvisor/runsc/specutils"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// The exec channel: a command goes to the sandbox's control socket through
// runsc's own Go packages — the calls `runsc exec` makes (container.Load,
// Execute, WaitPID, signals) — in this process, so no command pays for a
// runsc process start (~70 ms of every exec on this machine's kind). The
// packages are linked at the version of the pinned runsc (go.mod requires
// it; TestPinnedRunscIsLinked holds the two together): the control
// protocol is that build's own. A runsc of another build is driven
// through its CLI (exec.go).

// linkedGVisor is the gvisor.dev/gvisor version go.mod requires, which
// this binary links (TestPinnedRunscIsLinked reads go.mod to hold them
// together; a test binary's build info lists no modules to ask).
const linkedGVisor = "v0.0.0-20260905035102-160fafc42237"

// sameBuild says whether the runsc binary at path was built from the
// gvisor.dev/gvisor version this binary links, and if not, why.
func sameBuild(path string) (bool, string) {
	linked := linkedGVisor
	bi, err := buildinfo.ReadFile(path)
	if err != nil {
		return false, "reading " + path + "'s build info: " + err.Error()
	}
	v := bi.Main.Version
	if bi.Main.Path != "gvisor.dev/gvisor" {
		for _, d := range bi.Deps {
			if d.Path == "gvisor.dev/gvisor" {
				v = d.Version
			}
		}
	}
	if v != linked {
		return false, fmt.Sprintf("%s is gvisor.dev/gvisor %q, this binary links %q", path, v, linked)
	}
	return true, ""
}

// runscLog carries what runsc's packages log in this process (a warning
// such as "Cannot find if container … exists" when a sandbox died) into the
// server's log, as one component of it, instead of their own lines on
// stderr. Their log is process-wide: the first runtime's logger takes it.
type runscLog struct{ log *slog.Logger }

var runscLogOnce sync.Once

// Its level stays at Info whatever the server's: runsc's debug lines carry
// each command's argv and environment ("Execute in container, … args"),
// the caller's to keep, never the operator's log's.
func logRunscTo(l *slog.Logger) {
	runscLogOnce.Do(func() {
		log.SetTarget(runscLog{l})
		log.SetLevel(log.Info)
	})
}

func (l runscLog) Emit(_ int, level log.Level, _ time.Time, format string, v ...any) {
	// Only runsc's warnings reach the server's log at its default level:
	// its info lines are the CLI's narration of a start or a delete.
	lv := slog.LevelDebug
	if level == log.Warning {
		lv = slog.LevelWarn
	}
	l.log.Log(context.Background(), lv, strings.TrimSpace(fmt.Sprintf(format, v...)), "component", "runsc")
}

// container is the running container name as runsc loads it, loaded once
// and kept until its teardown: a command, a port forward or a stats read
// needs only its control socket, which lives as long as the container,
// while a load is a locked read of its state file and a control call that
// asks the sentry whether the container runs (a tenth of an exec's cost,
// measured). Names are never reused, so a kept container is never another
// sandbox's; one that died answers its calls with a connection error,
// which the callers tell from a program's by IsSandboxRunning, as before.
// A container that does not run is answered, not kept.
func (r *Runtime) container(name string) (*container.Container, error) {
	if v, ok := r.loaded.Load(name); ok {
		return v.(*container.Container), nil
	}
	c, err := container.Load(r.root, exactID(name), container.LoadOpts{Exact: true})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, runtime.ErrNotFound
		}
		return nil, err
	}
	if c.Status == container.Running {
		r.loaded.Store(name, c)
		if r.tornDown(name) {
			r.loaded.CompareAndDelete(name, c)
		}
	}
	return c, nil
}

// exactID names the container name alone, never one whose name it begins
// (runsc's own Load, as the CLI calls it, takes a prefix): a sandbox is its
// own root container, its sandbox id its container id.
func exactID(name string) container.FullID {
	return container.FullID{SandboxID: name, ContainerID: name}
}

// tornDown says name's bundle is gone: its teardown removed it, and may
// have forgotten the sandbox's kept entries before a caller that loaded
// it earlier stored one. A caller that stores an entry asks after: if the
// bundle was there, the teardown (which removes it first) forgets the
// entry after; if not, the caller forgets it. One stat, on a first use.
func (r *Runtime) tornDown(name string) bool {
	_, err := os.Stat(filepath.Join(r.bundles, name, "meta.json"))
	return errors.Is(err, os.ErrNotExist)
}

// statsChannel is Stats over the control channel: the call `runsc events
// --stats` makes (container.Event), in this process.
func (r *Runtime) statsChannel(name string) (runtime.Stats, error) {
	c, err := r.container(name)
	if errors.Is(err, runtime.ErrNotFound) {
		return runtime.Stats{}, err
	}
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("gvisor: stats of %s: %w", name, err)
	}
	ev, err := c.Event()
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("gvisor: stats of %s: %w", name, err)
	}
	d := ev.Event.Data
	return runtime.Stats{CPUSeconds: float64(d.CPU.Usage.Total) / 1e9, MemoryBytes: int64(d.Memory.Usage.Usage), Processes: int(d.Pids.Current)}, nil
}

// runningChannel is `runsc state` (and, with answers, `runsc ps`) in this
// process: the state file and the sandbox's process, then the sentry asked
// for its container's state (a container whose init ended, its sandbox not
// yet gone, is not running) and, with answers, for its processes — the
// real test that the sandbox still answers (one the host killed in part
// can keep a process and a "running" state file). It is never held by the
// sentry: one stuck in a port forward's connect (see ForwardPort) answers
// only minutes later, which held the list of every sandbox (the reaper's
// sweep, the pools') for 114 s, measured. So a sandbox with a forward
// under way is not asked, and one that has not answered in listAskBound is
// judged by its state file and its process alone (alive: a sentry that is
// gone answers at once, refused).
func (r *Runtime) runningChannel(name string, answers bool) bool {
	c, err := container.Load(r.root, exactID(name), container.LoadOpts{Exact: true, SkipCheck: true})
	if err != nil || c.Status != container.Running || !c.IsSandboxRunning() {
		return false
	}
	if r.forwarding(name) {
		return true
	}
	asked := make(chan bool, 1)
	go func() {
		c.CheckStopped()
		ok := c.Status == container.Running
		if ok && answers {
			_, err := c.Processes()
			ok = err == nil
		}
		asked <- ok
	}()
	select {
	case ok := <-asked:
		return ok
	case <-time.After(listAskBound):
		return true
	}
}

// runningAll is runningChannel (as `runsc list` asks: no processes) of
// each of names, listWorkers at a time, not one after the other as runsc
// list asks them.
func (r *Runtime) runningAll(names []string) map[string]bool {
	var (
		mu      sync.Mutex
		running = make(map[string]bool, len(names))
		wg      sync.WaitGroup
		sem     = make(chan struct{}, listWorkers)
	)
	for _, name := range names {
		wg.Go(func() {
			sem <- struct{}{}
			alive := r.runningChannel(name, false)
			<-sem
			mu.Lock()
			running[name] = alive
			mu.Unlock()
		})
	}
	wg.Wait()
	return running
}

// sweepChannel sends SIGKILL, from the host, to every process group of
// sandbox name but its init's, one call of the control channel each (what
// `runsc kill --pgid` sends), and to each other process of init's group:
// Stop's first round, before its killer. A fork bomb churning at its
// process limit is one group (a command is its group's leader, and its
// shell's jobs stay in it) and fills its sandbox's CPU: a new process
// inside — the killer — started in 2-4 s there on an idle host, past
// Stop's bound on a loaded one, and the next command met the limit (CI);
// killed one process at a time from the host, the bomb refilled its slots
// for 27-41 s. Killed by group, in the sentry and at once, it is gone in
// ~0.1 s, and the killer starts in a quiet sandbox to do the rest (what
// forked meanwhile, and the wait until init has reaped them). Best effort:
// the killer decides; none while a forward may hold the control server.
func (r *Runtime) sweepChannel(name string) {
	if r.forwarding(name) {
		return
	}
	c, err := r.container(name)
	if err != nil {
		return
	}
	ps, err := c.Processes()
	if err != nil {
		return
	}
	initGroup := int32(-1)
	for _, p := range ps {
		if p.PID == 1 {
			initGroup = int32(p.PGID)
		}
	}
	killed := map[int32]bool{}
	for _, p := range ps {
		switch pid, pgid := int32(p.PID), int32(p.PGID); {
		case pid == 1:
		case initGroup == -1 || pgid == initGroup:
			c.SignalProcess(unix.SIGKILL, pid)
		case !killed[pgid]:
			killed[pgid] = true
			c.SignalProcessGroup(unix.SIGKILL, pgid)
		}
	}
}

// listWorkers and listAskBound bound runningChannel and runningAll:
// sentries asked at once, and how long one is waited for (an answer takes
// ~0.6 ms).
const (
	listWorkers  = 16
	listAskBound = 3 * time.Second
)

// deleteChannel is `runsc delete --force` in this process: the same
// container.Load and Destroy (the sandbox and its gofer killed and waited
// for, their state, filestores and cgroup removed); a container runsc does
// not know is already gone.
func (r *Runtime) deleteChannel(name string) error {
	// No check of the container's state on its load (a control call,
	// which a sentry stuck in a forward's connect answers only minutes
	// later): Destroy kills the sandbox whatever state it is in.
	c, err := container.Load(r.root, exactID(name), container.LoadOpts{Exact: true, SkipCheck: true})
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("gvisor: delete %s: %w", name, err)
	}
	if err := c.Destroy(); err != nil {
		return fmt.Errorf("gvisor: delete %s: %w", name, err)
	}
	return nil
}

// execChannel runs proc in the container name over its control socket,
// with req's stdio, terminal and resizes. Its answers are Exec's: nil,
// *runtime.ExitError (128+n for a signal; 127 with the sentry's reason on
// stderr when the program cannot start), ctx's error after the program's
// process group was killed inside, or an error when the container is not
// running.
func (r *Runtime) execChannel(ctx context.Context, name string, proc process, req runtime.ExecRequest) error {
	c, err := r.container(name)
	if errors.Is(err, runtime.ErrNotFound) {
		return err
	}
	if err != nil {
		return fmt.Errorf("gvisor: exec in %s: %w", name, err)
	}
	if !c.IsSandboxRunning() {
		return fmt.Errorf("gvisor: exec in %s: the container is not running", name)
	}
	caps := proc.Capabilities
	tc, err := specutils.Capabilities(false, &specs.LinuxCapabilities{
		Bounding: caps["bounding"], Effective: caps["effective"], Permitted: caps["permitted"],
		Inheritable: caps["inheritable"], Ambient: caps["ambient"],
	})
	if err != nil {
		return fmt.Errorf("gvisor: exec: %w", err)
	}
	args := &control.ExecArgs{
		Argv: proc.Args, Envv: proc.Env, WorkingDirectory: proc.Cwd,
		KUID: auth.KUID(proc.User["uid"]), KGID: auth.KGID(proc.User["gid"]),
		Capabilities: tc, NoNewPrivileges: proc.NoNewPrivileges,
		StdioIsPty: req.TTY, SupportTTYs: true,
	}

	// The program's stdio are always our own pipes or terminal, never a
	// file of the host's: runsc hands the sandbox's user the ownership of
	// what it is given as stdio.
	var (
		theirs []*os.File // the program's ends: closed here once passed
		ours   []*os.File // ours: closed when the program's output is done
		copies sync.WaitGroup
		term   *terminal // with TTY
	)
	closeAll := func(fs []*os.File) {
		for _, f := range fs {
			f.Close()
		}
	}
	defer func() { closeAll(theirs) }()
	copyOut := func(w io.Writer, f *os.File) {
		if w == nil {
			w = io.Discard
		}
		copies.Go(func() { io.Copy(w, f) })
	}
	if req.TTY {
		ptmx, tty, err := openPTY()
		if err != nil {
			return fmt.Errorf("gvisor: exec: %w", err)
		}
		theirs, ours = []*os.File{tty}, []*os.File{ptmx}
		args.FilePayload = control.NewFilePayload(map[int]*os.File{0: tty, 1: tty, 2: tty}, nil)
		term = startTerminal(ptmx, req.Stdin, req.Resize)
		defer term.stop()
		copyOut(req.Stdout, ptmx)
	} else {
		inR, inW, err := os.Pipe()
		if err != nil {
			return fmt.Errorf("gvisor: exec: %w", err)
		}
		outR, outW, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{inR, inW})
			return fmt.Errorf("gvisor: exec: %w", err)
		}
		errR, errW, err := os.Pipe()
		if err != nil {
			closeAll([]*os.File{inR, inW, outR, outW})
			return fmt.Errorf("gvisor: exec: %w", err)
		}
		theirs, ours = []*os.File{inR, outW, errW}, []*os.File{outR, errR}
		args.FilePayload = control.NewFilePayload(map[int]*os.File{0: inR, 1: outW, 2: errW}, nil)
		if req.Stdin != nil {
			go func() { io.Copy(inW, req.Stdin); inW.Close() }()
			defer inW.Close() // a reader that never ends: its copy ends at its next write
		} else {
			inW.Close()
		}
		copyOut(req.Stdout, outR)
		copyOut(req.Stderr, errR)
	}

	// The sentry takes the call under the lock of its whole control
	// server, which a port forward's connect can hold for TCP's retries
	// (see ForwardPort). While one of the sandbox's forwards is under way
	// the call runs beside the caller's ctx: a caller whose ctx ends first
	// goes at once, and a program that starts after all is killed. Else it
	// runs here (a goroutine's handoff cost ~0.4 ms of a 10 ms command).
	execute := func() (int32, error) {
		pid, err := c.Execute(&config.Config{RootDir: r.root}, args)
		// A control socket that refused the connection ran nothing (seen
		// once in a burst of 100 leases): asked again, a few times, shortly.
		for wait := 10 * time.Millisecond; err != nil && unconnected(err) && wait <= 80*time.Millisecond && ctx.Err() == nil; wait *= 2 {
			time.Sleep(wait)
			pid, err = c.Execute(&config.Config{RootDir: r.root}, args)
		}
		return pid, err
	}
	var pid int32
	if !r.forwarding(name) {
		pid, err = execute()
		closeAll(theirs) // the sentry holds its own copies
		theirs = nil
	} else {
		type started struct {
			pid int32
			err error
		}
		startedc := make(chan started, 1)
		passed := theirs
		theirs = nil // closed by the call's goroutine, once the call has sent them
		go func() {
			pid, err := execute()
			// The sentry holds its own copies now. Not before: a number
			// closed while the call sends it could be another file's by then.
			closeAll(passed)
			startedc <- started{pid, err}
		}()
		select {
		case st := <-startedc:
			pid, err = st.pid, st.err
		case <-ctx.Done():
			go func() {
				if st := <-startedc; st.err == nil {
					if err := c.SignalProcessGroup(unix.SIGKILL, st.pid); err != nil {
						c.SignalProcess(unix.SIGKILL, st.pid)
					}
				}
			}()
			closeAll(ours) // nothing ran yet: no output to wait for
			copies.Wait()
			return ctx.Err()
		}
	}
	if err != nil {
		closeAll(ours)
		copies.Wait()
		if !c.IsSandboxRunning() {
			return fmt.Errorf("gvisor: exec in %s: the container is not running", name)
		}
		if !errors.As(err, new(urpc.RemoteError)) {
			// The channel failed, not the program: no exit status of the
			// caller's (the service answers 502).
			return fmt.Errorf("gvisor: exec in %s: %s", name, strings.ReplaceAll(err.Error(), name, "sandbox"))
		}
		// The program could not be started (no such executable, a bad
		// working directory): the caller's mistake, answered like a
		// shell's 127 with the sentry's reason.
		w, eol := req.Stderr, "\n"
		if req.TTY { // a terminal has one stream
			w, eol = req.Stdout, "\r\n"
		}
		if w != nil {
			fmt.Fprintf(w, "%s: %s%s", proc.Args[0], strings.ReplaceAll(err.Error(), name, "sandbox"), eol)
		}
		return &runtime.ExitError{Code: 127}
	}
	// A size from now on is signalled to the program (SIGWINCH) until the
	// terminal stops, before the program is waited for (after which its
	// pid may be another's) and before the terminal closes.
	stopTerminal := func() {}
	if term != nil {
		term.started(c, pid)
		stopTerminal = term.stop
	}

	type waited struct {
		ws  unix.WaitStatus
		err error
	}
	done := make(chan waited, 1)
	go func() {
		ws, err := c.WaitPID(pid)
		done <- waited{ws, err}
	}()
	var w waited
	select {
	case w = <-done:
	case <-ctx.Done():
		// Killed inside: the program is its session's and process
		// group's leader, so the group takes its children with it. The
		// signal waits for the control server like any call (see above):
		// the wait for the end is bounded, the signal's own goroutine is not.
		// A terminal's foreground job first has the hangup a closed
		// terminal gives it (a job-control shell runs it in a group of its
		// own, which the kill leaves; the sentry does not hang up a
		// terminal whose host side closes), as the runner's does on
		// Kubernetes.
		go func() {
			if req.TTY {
				c.Sandbox.SignalProcess(c.ID, pid, unix.SIGHUP, true)
			}
			if err := c.SignalProcessGroup(unix.SIGKILL, pid); err != nil {
				c.SignalProcess(unix.SIGKILL, pid)
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		stopTerminal()
		drain(ours, &copies)
		return ctx.Err()
	}
	// A background child may hold the output open: the program has
	// exited, and its output is cut 2 s after.
	stopTerminal()
	drain(ours, &copies)
	switch {
	case w.err != nil:
		if !c.IsSandboxRunning() {
			return fmt.Errorf("gvisor: exec in %s: the container is not running", name)
		}
		return fmt.Errorf("gvisor: exec: %s", strings.ReplaceAll(w.err.Error(), name, "sandbox"))
	case w.ws.Signaled():
		return &runtime.ExitError{Code: 128 + int(w.ws.Signal())}
	case w.ws.ExitStatus() != 0:
		return &runtime.ExitError{Code: w.ws.ExitStatus()}
	}
	return nil
}

// unconnected says err is runsc's failure to connect to a sandbox's
// control socket (runsc/sandbox's connError): the call was never sent.
func unconnected(err error) bool {
	return strings.Contains(err.Error(), "connecting to control server at PID")
}

// drain waits up to 2 s for the output's copies, then closes our ends,
// which ends them.
func drain(ours []*os.File, copies *sync.WaitGroup) {
	finished := make(chan struct{})
	go func() { copies.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(2 * time.Second):
	}
	for _, f := range ours {
		f.Close()
	}
	<-finished
}

// openPTY opens a terminal whose master (ours) is non-blocking, in Go's
// poller, so that closing it ends a read under way. creack/pty's Open
// leaves it blocking (its ioctls go through Fd), and a blocking master's
// read ends only when every holder of the terminal has closed it: a
// program that left a background process on the terminal (`setsid cmd &`,
// a shell's `disown`) would hold its exec, and its goroutines and thread,
// for as long as that process lives.
func openPTY() (ptmx, tty *os.File, err error) {
	p, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer p.Close()
	fd, err := unix.FcntlInt(p.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err == nil {
		err = unix.SetNonblock(fd, true)
		if err != nil {
			unix.Close(fd)
		}
	}
	if err != nil {
		tty.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

// setSize sets the terminal's size through its raw connection: Fd (which
// pty.Setsize uses) would make the master blocking again.
func setSize(ptmx *os.File, sz runtime.Size) {
	if rc, err := ptmx.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Rows, Col: sz.Cols})
		})
	}
}

// terminal applies a terminal's inputs (runtime.TTYInputs: keys and sizes
// in the order sent) to its master: keys written, sizes set and, once the
// program runs, told to the terminal's foreground process group (SIGWINCH),
// as runsc does for its own terminal. In one goroutine, so that a size sent
// before some keys is the terminal's before the program reads them.
type terminal struct {
	stopc chan struct{}
	once  sync.Once
	mu    sync.Mutex
	c     *container.Container
	pid   int32 // 0 before the program runs and after stop
}

func startTerminal(ptmx *os.File, stdin io.Reader, resize <-chan runtime.Size) *terminal {
	t := &terminal{stopc: make(chan struct{})}
	inputs := runtime.TTYInputs(stdin, resize, t.stopc)
	go func() {
		for in := range inputs {
			if in.Keys != nil {
				if _, err := ptmx.Write(in.Keys); err != nil {
					t.stop() // the terminal is closed
				}
				continue
			}
			// Through the raw connection: a closed master answers an
			// error, never another file's number.
			setSize(ptmx, in.Size)
			t.mu.Lock()
			if t.pid != 0 {
				t.c.Sandbox.SignalProcess(t.c.ID, t.pid, unix.SIGWINCH, true)
			}
			t.mu.Unlock()
		}
	}()
	return t
}

// started tells the terminal the program's pid, for the sizes after.
func (t *terminal) started(c *container.Container, pid int32) {
	t.mu.Lock()
	t.c, t.pid = c, pid
	t.mu.Unlock()
}

// stop ends the inputs; it returns once no signal is under way and none
// comes after.
func (t *terminal) stop() {
	t.once.Do(func() { close(t.stopc) })
	t.mu.Lock()
	t.pid = 0
	t.mu.Unlock()
}

// ForwardPort connects to 127.0.0.1:port in the sandbox's network stack
// through runsc's own port forward (the control socket's
// containerManager.PortForward, the call `runsc port-forward` makes): the
// sentry connects there and copies between that connection and one end of
// a socket pair of ours, so a connection costs one control call — no
// process inside, none on the host. runsc forwards only to a stack of the
// sandbox's own namespace (--network=sandbox): a sandbox of an earlier
// server (--network=none) is runtime.ErrNoForward, as is every sandbox of a
// runsc driven through its CLI.
//
// The sentry makes its connection holding the lock of its whole control
// server, with no deadline of its own: to a listener whose accept queue is
// full (an app that stopped accepting) the connect waits out TCP's SYN
// retries, ~2 minutes, and every control call of that sandbox — its
// commands — waits behind it (measured). So a sandbox has one forward
// under way at a time (the sentry takes them one by one anyway), a call
// that waits past forwardSlow is given up here and the sandbox's previews
// go through the relay (ErrNoForward) for forwardOff: an app that stalls
// holds its own sandbox's channel once, for that connect, and never holds
// more of this server than one call.
func (r *Runtime) ForwardPort(ctx context.Context, name string, port int) (net.Conn, error) {
	if !r.channel {
		return nil, runtime.ErrNoForward
	}
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("gvisor: port %d: a port is 1-65535", port)
	}
	m, err := r.loadMeta(name)
	if err != nil {
		return nil, err
	}
	if !m.Loop && m.Net == nil {
		return nil, runtime.ErrNoForward
	}
	v, ok := r.forwards.Load(name) // LoadOrStore alone would make a forwarder every call
	if !ok {
		v, _ = r.forwards.LoadOrStore(name, &forwarder{turn: make(chan struct{}, 1)})
		if r.tornDown(name) {
			r.forwards.CompareAndDelete(name, v)
			return nil, runtime.ErrNotFound
		}
	}
	f := v.(*forwarder)
	if f.off() {
		return nil, runtime.ErrNoForward
	}
	select {
	case f.turn <- struct{}{}:
	case <-time.After(forwardSlow):
		return nil, runtime.ErrNoForward
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	handed := false // to the call below, which gives the turn back itself
	defer func() {
		if !handed {
			<-f.turn
		}
	}()
	c, err := r.container(name)
	if err != nil {
		if errors.Is(err, runtime.ErrNotFound) {
			return nil, err
		}
		return nil, fmt.Errorf("gvisor: forward to %s: %w", name, err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gvisor: forward: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "forward"), os.NewFile(uintptr(fds[1]), "forward")
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		theirs.Close()
		return nil, fmt.Errorf("gvisor: forward: %w", err)
	}
	// The call runs aside and gives the sandbox's turn back when the
	// sentry answers, however long after this caller has gone; a caller
	// who gave up has closed our end, which ends the forward if it starts.
	done := make(chan error, 1)
	handed = true
	go func() {
		done <- c.Sandbox.PortForward(&boot.PortForwardOpts{FilePayload: urpc.FilePayload{Files: []*os.File{theirs}}, ContainerID: name, Port: uint16(port)})
		theirs.Close() // the sentry holds its own copy
		<-f.turn
	}()
	slow := time.NewTimer(forwardSlow)
	defer slow.Stop()
	select {
	case err = <-done:
	case <-slow.C:
		f.setOff(forwardOff)
		conn.Close()
		return nil, runtime.ErrNoForward
	case <-ctx.Done():
		conn.Close()
		return nil, ctx.Err()
	}
	if err != nil {
		conn.Close()
		if refused(err) {
			return nil, runtime.ErrRefused
		}
		return nil, fmt.Errorf("gvisor: forward to %s: %s", name, strings.ReplaceAll(err.Error(), name, "sandbox"))
	}
	return conn, nil
}

// A forward that takes forwardSlow is stuck (one takes ~1 ms): the
// sandbox's previews go through the relay for forwardOff.
const (
	forwardSlow = 3 * time.Second
	forwardOff  = 10 * time.Minute
)

// forwarder is a sandbox's port forwarding: its turn (one call at a time)
// and until when it is off.
type forwarder struct {
	turn chan struct{}

	mu    sync.Mutex
	until time.Time
}

// forwarding says a port forward into sandbox name is under way (and may
// hold its control server: see ForwardPort).
func (r *Runtime) forwarding(name string) bool {
	v, ok := r.forwards.Load(name)
	return ok && len(v.(*forwarder).turn) > 0
}

func (f *forwarder) off() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().Before(f.until)
}

func (f *forwarder) setOff(d time.Duration) {
	f.mu.Lock()
	f.until = time.Now().Add(d)
	f.mu.Unlock()
}

// refused says err is the sentry's connect to the port refused: nothing
// listens there (netstack's ErrConnectionRefused, through urpc as text).
func refused(err error) bool {
	return strings.Contains(err.Error(), "connection was refused")
}
