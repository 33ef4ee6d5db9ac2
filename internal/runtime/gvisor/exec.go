package gvisor

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandbox/internal/runtime"
)

// runscFailed is the status runsc exits with when it fails itself (its
// Fatalf), as opposed to relaying the program's status.
const runscFailed = 128

// Exec runs one program inside the container: over the sandbox's control
// socket in this process (execChannel, runsc's own packages), or, where
// this binary's runsc packages are not the version of the runsc it drives,
// through a `runsc exec` process. That one is given a process.json (argv,
// env, cwd, uid, rlimits, no capabilities), so nothing of the caller's is
// parsed as a runsc flag.
//
// Cancelling ctx kills the program INSIDE the sandbox either way: killing
// the runsc client alone would leave the process running there, so the
// client records the in-sandbox pid (--internal-pid-file) and Exec sends it
// SIGKILL through `runsc kill --pid` before the client is killed.
func (r *Runtime) Exec(ctx context.Context, name string, req runtime.ExecRequest) error {
	if len(req.Argv) == 0 {
		return errors.New("gvisor: empty argv")
	}
	m, err := r.loadMeta(name)
	if err != nil {
		return err
	}
	env := r.env(m, req.Env...)
	if req.TTY && !hasEnv(env, "TERM") {
		env = append(env, "TERM=xterm-256color")
	}
	dir := req.Dir
	if dir == "" {
		dir = m.Workdir
	}
	if req.Root {
		// Never the image's environment (PATH, LD_PRELOAD): an org's image
		// may point them at what its user can write.
		u := r.user(m)
		env = append(r.baseEnv(), "SANDBOX_UID="+strconv.Itoa(u["uid"]), "SANDBOX_GID="+strconv.Itoa(u["gid"]))
	}
	proc := r.process(m, req.Argv, env, dir)
	proc.Terminal = req.TTY
	if req.Root {
		proc.User = map[string]int{"uid": 0, "gid": 0}
		caps := []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER"}
		proc.Capabilities = map[string][]string{"bounding": caps, "effective": caps, "permitted": caps, "inheritable": {}, "ambient": {}}
	}
	if r.channel {
		return r.execChannel(ctx, name, proc, req)
	}

	tmp, err := os.MkdirTemp(filepath.Join(r.bundles, name), "exec-")
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return runtime.ErrNotFound
		}
		return fmt.Errorf("gvisor: %w", err)
	}
	defer os.RemoveAll(tmp)
	procFile := filepath.Join(tmp, "process.json")
	pidFile := filepath.Join(tmp, "pid")
	if err := writeJSON(procFile, proc); err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	args := append(append([]string{}, m.Flags...), "exec", "--process", procFile, "--internal-pid-file", pidFile, name)
	cmd := exec.Command(r.cfg.Runsc, args...)

	var ptmx *os.File
	if req.TTY {
		var tty *os.File
		ptmx, tty, err = openPTY()
		if err != nil {
			return fmt.Errorf("gvisor: exec: %w", err)
		}
		// As pty.Start: the terminal is runsc's stdio and controlling
		// terminal, which runsc hands the program.
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true}
		err = cmd.Start()
		tty.Close()
		if err != nil {
			ptmx.Close()
			return fmt.Errorf("gvisor: exec: %w", err)
		}
		go func() {
			if req.Stdin != nil {
				io.Copy(ptmx, req.Stdin)
			}
		}()
		outDone := make(chan struct{})
		go func() {
			defer close(outDone)
			w := req.Stdout
			if w == nil {
				w = io.Discard
			}
			io.Copy(w, ptmx) // ends with EIO once the client exits
		}()
		// A background process inside may hold the terminal: the output
		// is cut 2 s after the program's end, as the pipes' (WaitDelay).
		defer func() {
			select {
			case <-outDone:
			case <-time.After(2 * time.Second):
			}
			ptmx.Close()
			<-outDone
		}()
		// The resizer is gone before the pty closes (the defers run in
		// reverse): a Setsize on a closing file is a race.
		resizeDone, resizerGone := make(chan struct{}), make(chan struct{})
		defer func() { close(resizeDone); <-resizerGone }()
		go func() {
			defer close(resizerGone)
			for {
				select {
				case sz, ok := <-req.Resize: // a nil channel never delivers
					if !ok {
						return
					}
					setSize(ptmx, sz)
				case <-resizeDone:
					return
				}
			}
		}()
	} else {
		cmd.Stdin = req.Stdin
		cmd.Stdout = req.Stdout
		if req.Stderr != nil {
			red := &redactor{w: req.Stderr, old: []byte(name), new: []byte("sandbox")}
			defer red.flush()
			cmd.Stderr = red
		}
		cmd.WaitDelay = 2 * time.Second
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("gvisor: exec: %w", err)
		}
	}

	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err = <-waited:
	case <-ctx.Done():
		r.killInside(m, pidFile, waited)
		cmd.Process.Kill()
		<-waited
		return ctx.Err()
	}
	// Background processes that keep the program's stdout open make Wait
	// give up after WaitDelay; the program itself has exited, and its
	// status is what counts.
	if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState != nil {
		err = nil
		if !cmd.ProcessState.Success() {
			err = &exec.ExitError{ProcessState: cmd.ProcessState}
		}
	}
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return fmt.Errorf("gvisor: exec: %w", err)
	}
	code := ee.ExitCode()
	if code == runscFailed || code < 0 {
		// runsc exits 128 when it fails itself, and so may a program.
		// When the container no longer runs, the channel broke (the
		// sandbox died, e.g. killed by the host for memory); when runsc
		// never recorded a pid, the program could not be started (no such
		// executable: the caller's mistake, answered like a shell's 127).
		obj, serr := r.Status(context.WithoutCancel(ctx), name)
		if serr != nil || !obj.Running {
			return fmt.Errorf("gvisor: exec in %s: the container is not running (exit %d)", name, code)
		}
		if b, _ := os.ReadFile(pidFile); len(strings.TrimSpace(string(b))) == 0 {
			return &runtime.ExitError{Code: 127}
		}
	}
	if code < 0 {
		code = 128 + 9
	}
	return &runtime.ExitError{Code: code}
}

// redactor replaces the runtime name of a sandbox in what runsc writes to a
// program's stderr (its own error messages share the stream), so that no
// answer ever carries it. It holds back the bytes that could start a match
// split across two writes.
type redactor struct {
	w        io.Writer
	old, new []byte
	held     []byte
}

func (r *redactor) Write(p []byte) (int, error) {
	buf := bytes.ReplaceAll(append(r.held, p...), r.old, r.new)
	keep := 0
	for k := min(len(r.old)-1, len(buf)); k > 0; k-- {
		if bytes.HasSuffix(buf, r.old[:k]) {
			keep = k
			break
		}
	}
	r.held = append(r.held[:0], buf[len(buf)-keep:]...)
	if _, err := r.w.Write(buf[:len(buf)-keep]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// flush writes what was held back.
func (r *redactor) flush() {
	if len(r.held) > 0 {
		r.w.Write(r.held)
		r.held = nil
	}
}

// killInside sends SIGKILL to the program's in-sandbox process group. It runs detached
// from the caller's (already cancelled) context.
//
// A cancel can arrive before runsc has written the pid: the program may
// still be starting, so killInside waits for the pid (while the client
// lives, at most a few seconds) rather than leave the program running.
func (r *Runtime) killInside(m *meta, pidFile string, clientExited chan error) {
	var pid int
	deadline := time.Now().Add(5 * time.Second)
	for {
		b, _ := os.ReadFile(pidFile)
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			pid = n
			break
		}
		select {
		case err := <-clientExited:
			clientExited <- err // the caller waits on it too
			return
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// runsc exec makes the program a session and process-group leader, so
	// the group takes its children (a shell's pipeline, say) down with it.
	if _, err := r.runsc(ctx, m.Flags, "kill", "--pgid", strconv.Itoa(pid), m.Name, "KILL"); err != nil {
		r.runsc(ctx, m.Flags, "kill", "--pid", strconv.Itoa(pid), m.Name, "KILL")
	}
}

func hasEnv(env []string, key string) bool {
	for _, e := range env {
		if strings.HasPrefix(e, key+"=") {
			return true
		}
	}
	return false
}

// Stop kills every process of the sandbox but PID 1. Over the control
// channel it first kills each process group from the host (sweepChannel);
// then, either way, it runs `kill -9 -1` in rounds as the sandbox's root
// with CAP_KILL alone: uid 1000 may have exhausted its RLIMIT_NPROC (a fork
// bomb), and root's count is its own. The command is ours, never a
// caller's.
func (r *Runtime) Stop(ctx context.Context, name string) error {
	m, err := r.loadMeta(name)
	if err != nil {
		return err
	}
	proc := r.process(m, []string{"/bin/sh", "-c", killAllScript}, r.baseEnv(), "/")
	proc.User = map[string]int{"uid": 0, "gid": 0}
	proc.Rlimits = []rlimit{{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024}}
	killCap := []string{"CAP_KILL"}
	proc.Capabilities = map[string][]string{"bounding": killCap, "effective": killCap, "permitted": killCap, "inheritable": {}, "ambient": {}}
	if r.channel {
		r.sweepChannel(name)
	}
	code, err := r.killer(ctx, m, proc)
	switch {
	case err != nil:
		return err
	case code == 3:
		return fmt.Errorf("gvisor: %s: processes kept appearing through %d rounds of kill -9 -1", name, killRounds)
	}
	return nil // done, or the killer was killed: nothing of the sandbox's is left to fork
}

// killer runs Stop's killer and answers its exit code.
func (r *Runtime) killer(ctx context.Context, m *meta, proc process) (int, error) {
	var xe *runtime.ExitError
	if r.channel {
		if err := r.execChannel(ctx, m.Name, proc, runtime.ExecRequest{}); !errors.As(err, &xe) {
			return 0, err
		}
		return xe.Code, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(r.bundles, m.Name), "kill-")
	if err != nil {
		return 0, fmt.Errorf("gvisor: %w", err)
	}
	defer os.RemoveAll(tmp)
	procFile := filepath.Join(tmp, "process.json")
	if err := writeJSON(procFile, proc); err != nil {
		return 0, fmt.Errorf("gvisor: %w", err)
	}
	_, err = r.runsc(ctx, m.Flags, "exec", "--process", procFile, m.Name)
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

// killRounds bounds the killer's rounds: each is a kill and a glob of
// /proc, 0.3 ms with a few processes and ~2 ms with 200 (measured), so a
// few seconds at most while init reaps what was killed.
const killRounds = 5000

// killAllScript kills every process but init and itself, round after
// round, until /proc holds init and itself alone (or a round finds none
// to signal). One round is not enough: kill(-1) signals a snapshot of the
// processes, and a fork bomb's children forked during the round escape it
// (gVisor's sys_signal.go iterates ThreadGroups() as of the call; so does
// Linux, in effect). And killed is not gone: the killed are zombies until
// init reaps them, which kill(-1) still signals without error, and they
// count against their user's process limit until then (gVisor's kill
// refuses only a reaped task). The killer itself is a new process in a
// sandbox whose CPU a fork bomb may fill, which is why Stop over the
// channel kills every process group from the host first (sweepChannel
// says what was measured). The rounds fork nothing (kill, [, set, $(( ))
// and the glob are sh's own), so a sandbox at its process limit cannot
// starve them.
var killAllScript = fmt.Sprintf(`i=0
while [ $i -lt %d ]; do
  kill -9 -1 2>/dev/null || exit 0
  set -- /proc/[0-9]*
  [ $# -le 2 ] && exit 0
  i=$((i+1))
done
exit 3`, killRounds)
