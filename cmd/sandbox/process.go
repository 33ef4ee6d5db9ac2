package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandbox/client"
)

// The background process verbs (ps, start, output, send, kill), and fork,
// which copies a sandbox with its processes.

// envFlag collects --env K=V flags.
type envFlag map[string]string

func (e envFlag) String() string {
	keys := make([]string, 0, len(e))
	for k := range e {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return strings.Join(keys, ",")
}

func (e envFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not K=V", v)
	}
	e[k] = val
	return nil
}

func pidArg(verb, s string) (int, error) {
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("sandbox %s: %q is not a pid", verb, s)
	}
	return pid, nil
}

var processHeader = []string{"PID", "STATUS", "EXIT", "STARTED", "COMMAND"}

func processRow(p client.Process) []string {
	exit := "-"
	switch {
	case p.Signal != "":
		exit = p.Signal
	case p.ExitCode != nil:
		exit = strconv.Itoa(*p.ExitCode)
	}
	if p.TimedOut {
		exit += " (timed out)"
	}
	cmd := strings.Join(p.Argv, " ")
	if len(cmd) > 60 {
		cmd = cmd[:57] + "..."
	}
	ago := time.Since(time.Unix(p.StartedAt, 0)).Round(time.Second).String() + " ago"
	return []string{strconv.Itoa(p.Pid), p.Status, exit, ago, cmd}
}

func showProcess(w io.Writer, output string, p *client.Process) error {
	return show(w, output, p, processHeader, [][]string{processRow(*p)})
}

func psCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cf, rest, err := verb("ps", "ID", args, stderr, nil, 1, 1)
	if err != nil {
		return err
	}
	list, err := cf.c.Processes(ctx, rest[0])
	if err != nil {
		return err
	}
	rows := make([][]string, len(list))
	for i, p := range list {
		rows[i] = processRow(p)
	}
	if list == nil {
		list = []client.Process{}
	}
	return show(stdout, cf.output, map[string]any{"processes": list}, processHeader, rows)
}

func startCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var req client.ProcessRequest
	env := envFlag{}
	var timeout time.Duration
	cf, rest, err := verb("start", "ID [--tty] [--dir D] [--env K=V]... [--timeout DUR] [--session S] -- CMD [ARG...]", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&req.TTY, "tty", false, "run it on a terminal (stderr merged into stdout)")
		fs.StringVar(&req.Dir, "dir", "", "working directory, under the sandbox's workdir")
		fs.Var(env, "env", "an environment variable K=V (repeat for more)")
		fs.DurationVar(&timeout, "timeout", 0, "kill it after this long (exit 124; default: never)")
		fs.StringVar(&req.Session, "session", "", "narrate its start and end into this session's log")
	}, 2, -1)
	if err != nil {
		return err
	}
	id, argv := rest[0], rest[1:]
	if argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return errors.New("sandbox start: no command after --")
	}
	req.Argv, req.TimeoutSec = argv, int(timeout/time.Second)
	if len(env) > 0 {
		req.Env = env
	}
	p, err := cf.c.StartProcess(ctx, id, req)
	if err != nil {
		return err
	}
	if cf.output == "table" {
		_, err := fmt.Fprintln(stdout, p.Pid)
		return err
	}
	return show(stdout, cf.output, p, nil, nil)
}

// outputCmd prints a process's output: what is kept, or with -f all of it
// as it comes until the process ends, then exits with the process's code.
func outputCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var follow bool
	var from int64
	cf, rest, err := verb("output", "ID PID [-f] [--from N]", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&follow, "f", false, "follow: print the output as it comes until the process ends, and exit with its code")
		fs.Int64Var(&from, "from", 0, "start after this offset of its output")
	}, 2, 2)
	if err != nil {
		return err
	}
	pid, err := pidArg("output", rest[1])
	if err != nil {
		return err
	}
	if !follow {
		o, err := cf.c.ProcessOutputText(ctx, rest[0], pid, from)
		if err != nil {
			return err
		}
		if cf.output != "table" {
			return show(stdout, cf.output, o, nil, nil)
		}
		if o.DroppedBytes > 0 {
			fmt.Fprintf(stderr, "[%d bytes before this are no longer kept]\n", o.DroppedBytes)
		}
		stdout.Write(o.StdoutBytes())
		stderr.Write(o.StderrBytes())
		return nil
	}
	var end *client.Process
	err = cf.c.ProcessOutput(ctx, rest[0], pid, from, func(ev client.ProcessEvent) error {
		if cf.output != "table" {
			return show(stdout, cf.output, ev, nil, nil)
		}
		switch ev.Kind {
		case "stdout":
			_, err := stdout.Write(ev.Data)
			return err
		case "stderr":
			_, err := stderr.Write(ev.Data)
			return err
		case "dropped":
			fmt.Fprintf(stderr, "[%d bytes before this are no longer kept]\n", ev.DroppedBytes)
		case "end":
			end = ev.Process
		}
		return nil
	})
	if err != nil {
		return err
	}
	if end != nil && end.ExitCode != nil && *end.ExitCode != 0 {
		return exitError{*end.ExitCode}
	}
	return nil
}

func sendCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var eof bool
	cf, rest, err := verb("send", "ID PID [--eof] < INPUT", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&eof, "eof", false, "close the process's stdin after the input")
	}, 2, 2)
	if err != nil {
		return err
	}
	pid, err := pidArg("send", rest[1])
	if err != nil {
		return err
	}
	res, err := cf.c.ProcessStdin(ctx, rest[0], pid, stdin, eof)
	if err != nil {
		return err
	}
	return show(stdout, cf.output, res, []string{"PID", "WRITTEN", "STDIN"},
		[][]string{{strconv.Itoa(pid), strconv.FormatInt(res.Written, 10), map[bool]string{true: "open", false: "closed"}[res.Process.StdinOpen]}})
}

func killCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var sig string
	cf, rest, err := verb("kill", "ID PID [--signal TERM]", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&sig, "signal", "TERM", "the signal: a name (TERM, INT, KILL, HUP, USR1, ...) or a number")
	}, 2, 2)
	if err != nil {
		return err
	}
	pid, err := pidArg("kill", rest[1])
	if err != nil {
		return err
	}
	p, err := cf.c.SignalProcess(ctx, rest[0], pid, sig)
	if err != nil {
		return err
	}
	return showProcess(stdout, cf.output, p)
}

func forkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var req client.ForkRequest
	var ttl time.Duration
	cf, rest, err := verb("fork", "ID [--project P] [--ttl DUR]", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&req.Project, "project", "", "the fork's new project, which gets a copy of the volume (required for a project sandbox)")
		fs.DurationVar(&ttl, "ttl", 0, "the fork's lease (default: the class's)")
	}, 1, 1)
	if err != nil {
		return err
	}
	req.TTLSec = int64(ttl / time.Second)
	sb, err := cf.c.Fork(ctx, rest[0], req)
	if err != nil {
		return err
	}
	return showSandbox(stdout, cf.output, sb)
}
