package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"sigs.k8s.io/yaml"

	"github.com/sandboxd/sandbox/client"
)

// The client verbs call a server through package client. Where it is and
// the key: --server and --key, else $SANDBOX_URL and $SANDBOX_KEY, else the
// file `sandbox login` wrote.

const clientUsage = `Client verbs (a server's URL and key from --server/--key, $SANDBOX_URL/$SANDBOX_KEY,
or the file 'sandbox login' writes):
  sandbox login --server URL --key KEY      remember a server and key (~/.config/sandbox/config.json, mode 0600)
  sandbox lease [--class exec|dev|desktop] [--project P] [--ttl DUR] [--allow DEST]... [--deny DEST]... [--port N]...
                                            lease a sandbox, print it (--allow: what it may reach, e.g. pypi.org, internet)
  sandbox network ID [--allow DEST]... [--deny DEST]... [--port N]...
                                            replace a sandbox's egress policy (no --allow closes it)
  sandbox preview ID PORT [--ttl DUR]       a link to a port's preview: a browser opens URL (whoever holds it opens the port)
  sandbox ls [--project P] [--status S]     the org's sandboxes
  sandbox get ID                            one sandbox
  sandbox exec ID [--dir D] [--timeout DUR] -- CMD [ARG...]
                                            run CMD, its output as it comes (UTF-8 stdin passed through); its exit code is sandbox's
  sandbox shell ID [--session NAME]         an interactive terminal in this tty (tmux session with --session)
  sandbox cp SRC DST                        copy a file or a tree (one streamed tar: modes, links kept), ID:PATH on the sandbox side,
                                            e.g. 'sandbox cp ./src sb_x:src', 'sandbox cp sb_x:out.txt .'
  sandbox logs SESSION [-f]                 a session's log (-f: follow it)
  sandbox start ID [--tty] [--dir D] [--env K=V]... -- CMD [ARG...]
                                            start a background process (it runs on; its output is kept); prints its pid
  sandbox ps ID                             the sandbox's background processes
  sandbox output ID PID [-f] [--from N]     a process's output (-f: follow it to the end; its exit code is sandbox's)
  sandbox send ID PID [--eof]               this stdin to the process's stdin (--eof then closes it)
  sandbox kill ID PID [--signal TERM]       signal a process and its group
  sandbox renew ID --ttl DUR                extend a lease
  sandbox fork ID [--project P] [--ttl DUR]
                                            a new sandbox going on from this one's memory and files (a project sandbox's needs a new P)
  sandbox sleep|wake|stop ID                sleep (memory kept where it can be), wake, or stop every command of a sandbox
                                            (pause and resume are sleep's and wake's old names)
  sandbox end ID [--purge]                  end a sandbox (--purge drops its project volume)
  sandbox run-code --language py FILE|- [--image NAME]
                                            run a program in the code interpreter (--image: a new sandbox on that image)
  sandbox ctx new ID [--language python|r|javascript|bash] [--cwd D]
                                            open a code context (a Jupyter kernel whose variables persist); prints its id
  sandbox ctx run ID CTX FILE|- [--timeout DUR] [--save DIR]
                                            run code in a context (CTX python, r, javascript or bash: the language's default one): output,
                                            the last expression's value, images saved under DIR; an error exits 1
  sandbox ctx ls|rm|interrupt ID [CTX]      the contexts, end one, interrupt its run (its state stays)
  sandbox watch ID [PATH] [-r]              a directory's changes as they come (created, written, removed, renamed)
  sandbox images                            the images the org may lease (--image NAME): its own, then the server's
  sandbox pull NAME REF [--username U --password-stdin]
                                            pull REF into the org's images (from a registry the server allows); prints the image
  sandbox snapshot ID NAME [--workdir]      save a sandbox's files (its root's changes; --workdir: its workdir too) as image NAME
  sandbox rmi NAME                          delete one of the org's images (refused while a sandbox runs it)
  sandbox bench [--sequential 100] [--burst M] [--command 'node -v']
                                            time to interactive: a lease and its first command, timed from the request to the answer
                                            (p50, p95, wall), in a row and M at once, as the public TTI benchmark defines it
  sandbox completion bash|zsh               a completion script
Every verb takes -o table|json|yaml (default table) and -h.`

// clientFlags are the flags every client verb takes.
type clientFlags struct {
	server, key, output string
	c                   *client.Client // resolved by verb
}

func (c *clientFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", "", "the server's URL (default $SANDBOX_URL, else the login file)")
	fs.StringVar(&c.key, "key", "", "the API key (default $SANDBOX_KEY, else the login file)")
	fs.StringVar(&c.output, "o", "table", "output: table, json or yaml")
}

// loginFile is where `sandbox login` keeps the server and key.
func loginFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		dir = filepath.Join(os.Getenv("HOME"), ".config")
	}
	return filepath.Join(dir, "sandbox", "config.json")
}

type loginConfig struct {
	Server string `json:"server"`
	Key    string `json:"key"`
}

// client resolves the server and key and returns a client of them.
func (c *clientFlags) client() (*client.Client, error) {
	server, key := c.server, c.key
	var saved loginConfig
	if b, err := os.ReadFile(loginFile()); err == nil {
		json.Unmarshal(b, &saved)
	}
	server = first(server, os.Getenv("SANDBOX_URL"), saved.Server)
	key = first(key, os.Getenv("SANDBOX_KEY"), saved.Key)
	if server == "" || key == "" {
		return nil, errors.New("no server or key: pass --server and --key, set SANDBOX_URL and SANDBOX_KEY, or run 'sandbox login'")
	}
	if u, err := url.Parse(server); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server %q is not an http(s) URL", server)
	}
	return client.New(server, key), nil
}

func first(v ...string) string {
	for _, s := range v {
		if s != "" {
			return s
		}
	}
	return ""
}

// verb parses a client verb's flags and resolves its client; the
// positional arguments must number between min and max (max < 0: any).
func verb(name, usage string, args []string, stderr io.Writer, define func(fs *flag.FlagSet), minArgs, maxArgs int) (*clientFlags, []string, error) {
	fs := flag.NewFlagSet("sandbox "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: sandbox %s %s\n\nflags:\n", name, usage)
		fs.PrintDefaults()
	}
	var cf clientFlags
	cf.register(fs)
	if define != nil {
		define(fs)
	}
	if err := fs.Parse(interleave(fs, args)); err != nil {
		return nil, nil, err
	}
	switch cf.output {
	case "table", "json", "yaml":
	default:
		return nil, nil, fmt.Errorf("-o must be table, json or yaml, not %q", cf.output)
	}
	rest := fs.Args()
	if len(rest) < minArgs || (maxArgs >= 0 && len(rest) > maxArgs) {
		fs.Usage()
		return nil, nil, fmt.Errorf("sandbox %s: wrong number of arguments", name)
	}
	c, err := cf.client()
	if err != nil {
		return nil, nil, err
	}
	cf.c = c
	return &cf, rest, nil
}

// interleave moves flags after positional arguments in front of them (so
// `sandbox end sb_x --purge` works, as in kubectl and gh), up to a "--".
func interleave(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i:]...)
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return append(flags, pos...)
}

// show prints v in the chosen output; table prints the rows of cols.
func show(w io.Writer, output string, v any, header []string, rows [][]string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

var sandboxHeader = []string{"ID", "CLASS", "PROJECT", "STATUS", "EXPIRES"}

func sandboxRow(sb client.Sandbox) []string {
	return []string{sb.ID, sb.Class, first(sb.Project, "-"), sb.Status, time.Until(sb.Expires()).Round(time.Second).String()}
}

func showSandbox(w io.Writer, output string, sb *client.Sandbox) error {
	return show(w, output, sb, sandboxHeader, [][]string{sandboxRow(*sb)})
}

// exitError carries a program's exit code out of `sandbox exec` and
// `sandbox run-code`: main exits with it and prints nothing.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func login(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cf, _, err := verb("login", "--server URL --key KEY", args, stderr, nil, 0, 0)
	if err != nil {
		return err
	}
	c := cf.c
	if _, err := c.Quotas(ctx); err != nil {
		return fmt.Errorf("the server refused the key: %w", err)
	}
	b, _ := json.MarshalIndent(loginConfig{Server: c.Base, Key: c.Key}, "", "  ")
	path := loginFile()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o600); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "logged in to %s; saved in %s\n", c.Base, path)
	return nil
}

func leaseCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var req client.LeaseRequest
	var ttl time.Duration
	var net client.NetworkPolicy
	cf, _, err := verb("lease", "[--class C] [--project P] [--image I] [--ttl DUR] [--allow DEST]... [--deny DEST]... [--port N]...", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&req.Class, "class", "", "exec (default), dev, desktop or android")
		fs.StringVar(&req.Project, "project", "", "the project whose volume is mounted (required but for exec)")
		fs.StringVar(&req.Image, "image", "", "an image other than the class's")
		fs.DurationVar(&ttl, "ttl", 0, "the lease (default: the class's)")
		networkFlags(fs, &net)
	}, 0, 0)
	if err != nil {
		return err
	}
	c := cf.c
	req.TTLSec = int64(ttl / time.Second)
	if !net.None() || len(net.Deny) > 0 || len(net.Ports) > 0 {
		req.Network = &net
	}
	sb, err := c.Lease(ctx, req)
	if err != nil {
		return err
	}
	return showSandbox(stdout, cf.output, sb)
}

// networkFlags are the flags of an egress policy (lease, network).
func networkFlags(fs *flag.FlagSet, p *client.NetworkPolicy) {
	list := func(into *[]string) func(string) error {
		return func(v string) error {
			for _, e := range strings.Split(v, ",") {
				if e = strings.TrimSpace(e); e != "" {
					*into = append(*into, e)
				}
			}
			return nil
		}
	}
	fs.Func("allow", "a destination the sandbox may reach: internet (every public address), a domain (pypi.org), *.domain, an IPv4 address or CIDR; repeatable or comma-separated (none: no network)", list(&p.Allow))
	fs.Func("deny", "a destination refused even where --allow covers it (the same forms but internet); repeatable", list(&p.Deny))
	fs.Func("port", "a destination port the policy allows (default: any); repeatable", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%q is not a port (1-65535)", v)
		}
		p.Ports = append(p.Ports, n)
		return nil
	})
}

// networkCmd is `sandbox network ID [--allow DEST]...`: replace the policy
// (no --allow closes it).
func networkCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var p client.NetworkPolicy
	cf, rest, err := verb("network", "ID [--allow DEST]... [--deny DEST]... [--port N]... (no --allow: closed)", args, stderr, func(fs *flag.FlagSet) {
		networkFlags(fs, &p)
	}, 1, 1)
	if err != nil {
		return err
	}
	sb, err := cf.c.SetNetwork(ctx, rest[0], p)
	if err != nil {
		return err
	}
	return showSandbox(stdout, cf.output, sb)
}

// previewCmd is `sandbox preview ID PORT`: a link to the port's preview.
func previewCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var ttl time.Duration
	cf, rest, err := verb("preview", "ID PORT [--ttl DUR]", args, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&ttl, "ttl", time.Hour, "how long the link works (never past the lease)")
	}, 2, 2)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(rest[1])
	if err != nil || port < 1 || port > 65535 {
		return fmt.Errorf("preview: %q is not a port (1-65535)", rest[1])
	}
	l, err := cf.c.PreviewLink(ctx, rest[0], port, int64(ttl/time.Second))
	if err != nil {
		return err
	}
	return show(stdout, cf.output, l, []string{"URL", "PATH URL", "EXPIRES"},
		[][]string{{l.URL, l.PathURL, time.Unix(l.ExpiresAt, 0).UTC().Format(time.RFC3339)}})
}

func lsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o client.ListOptions
	cf, _, err := verb("ls", "[--project P] [--status S]", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&o.Project, "project", "", "only this project's sandboxes")
		fs.StringVar(&o.Status, "status", "", "only pending, running, sleeping or error")
	}, 0, 0)
	if err != nil {
		return err
	}
	c := cf.c
	all, err := c.ListAll(ctx, o)
	if err != nil {
		return err
	}
	rows := make([][]string, len(all))
	for i, sb := range all {
		rows[i] = sandboxRow(sb)
	}
	return show(stdout, cf.output, map[string]any{"sandboxes": all}, sandboxHeader, rows)
}

// onSandbox is a verb on one sandbox that prints it.
func onSandbox(name string, call func(*client.Client, context.Context, string) (*client.Sandbox, error)) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
		cf, rest, err := verb(name, "ID", args, stderr, nil, 1, 1)
		if err != nil {
			return err
		}
		c := cf.c
		sb, err := call(c, ctx, rest[0])
		if err != nil {
			return err
		}
		return showSandbox(stdout, cf.output, sb)
	}
}

func renewCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var ttl time.Duration
	cf, rest, err := verb("renew", "ID --ttl DUR", args, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&ttl, "ttl", time.Hour, "the new lease, from now (never past the ceiling)")
	}, 1, 1)
	if err != nil {
		return err
	}
	c := cf.c
	sb, err := c.Renew(ctx, rest[0], int64(ttl/time.Second))
	if err != nil {
		return err
	}
	return showSandbox(stdout, cf.output, sb)
}

func stopCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cf, rest, err := verb("stop", "ID", args, stderr, nil, 1, 1)
	if err != nil {
		return err
	}
	c := cf.c
	s, err := c.Stop(ctx, rest[0])
	if err != nil {
		return err
	}
	return show(stdout, cf.output, s, []string{"ID", "STOPPED"}, [][]string{{s.ID, fmt.Sprint(s.Stopped)}})
}

func endCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var purge bool
	cf, rest, err := verb("end", "ID [--purge]", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&purge, "purge", false, "drop the project volume too (cannot be undone)")
	}, 1, 1)
	if err != nil {
		return err
	}
	c := cf.c
	e, err := c.End(ctx, rest[0], purge)
	if err != nil {
		return err
	}
	return show(stdout, cf.output, e, []string{"ID", "ENDED", "PURGED"}, [][]string{{e.ID, fmt.Sprint(e.Ended), fmt.Sprint(e.Purged)}})
}

// maxExecStdin bounds the stdin sandbox exec sends: the server reads a
// JSON body of at most 4 MiB, and text may grow in its escaping.
const maxExecStdin = 2 << 20

func execCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var req client.ExecRequest
	var timeout time.Duration
	var noStdin bool
	cf, rest, err := verb("exec", "ID [--dir D] [--timeout DUR] [--session S] -- CMD [ARG...]", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&req.Dir, "dir", "", "working directory, under the sandbox's workdir")
		fs.DurationVar(&timeout, "timeout", 0, "kill the command after this long (exit 124; default: the server's)")
		fs.StringVar(&req.Session, "session", "", "narrate the output into this session's log")
		fs.BoolVar(&noStdin, "no-stdin", false, "do not pass this process's standard input")
	}, 2, -1)
	if err != nil {
		return err
	}
	id, argv := rest[0], rest[1:]
	if argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return errors.New("sandbox exec: no command after --")
	}
	c := cf.c
	req.Argv, req.TimeoutSec = argv, int(timeout/time.Second)
	if !noStdin && stdin != nil && !isTerminal(stdin) {
		// The request carries stdin as JSON text: said, never cut or
		// mangled (a file goes with sandbox cp).
		b, err := io.ReadAll(io.LimitReader(stdin, maxExecStdin+1))
		switch {
		case err != nil:
			return err
		case len(b) > maxExecStdin:
			return fmt.Errorf("sandbox exec: stdin is larger than %d MiB: copy it in with 'sandbox cp FILE %s:FILE' and read the file", maxExecStdin>>20, id)
		case !utf8.Valid(b):
			return fmt.Errorf("sandbox exec: stdin is not UTF-8 text: copy binary input in with 'sandbox cp FILE %s:FILE' and read the file", id)
		}
		req.Stdin = string(b)
	}
	var res *client.ExecResult
	if cf.output != "table" {
		if res, err = c.Exec(ctx, id, req); err != nil {
			return err
		}
		if err := show(stdout, cf.output, res, nil, nil); err != nil {
			return err
		}
	} else if res, err = c.ExecStream(ctx, id, req, stdout, stderr); err != nil {
		// The output as the program writes it, whole (the buffered
		// answer keeps 1 MiB of each stream).
		return err
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}

func logsCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var follow bool
	cf, rest, err := verb("logs", "SESSION [-f]", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&follow, "f", false, "follow: wait for new events until interrupted")
	}, 1, 1)
	if err != nil {
		return err
	}
	c := cf.c
	// Without -f the stream ends once the backlog has been quiet a moment.
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	idle := time.AfterFunc(time.Second, cancel)
	if follow {
		idle.Stop()
	}
	err = c.Follow(fctx, rest[0], 0, func(e client.Event) error {
		if !follow {
			idle.Reset(500 * time.Millisecond)
		}
		if cf.output != "table" {
			return show(stdout, cf.output, e, nil, nil)
		}
		switch e.Kind {
		case "stdout":
			io.WriteString(stdout, e.Text)
		case "stderr":
			io.WriteString(stderr, e.Text)
		default:
			fmt.Fprintf(stderr, "[%s] %s\n", e.Kind, strings.TrimSpace(e.Text))
		}
		return nil
	})
	if errors.Is(err, context.Canceled) && ctx.Err() == nil {
		return nil
	}
	return err
}

func runCodeCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var req client.RunCodeRequest
	cf, rest, err := verb("run-code", "--language L [--sandbox ID | --image NAME] FILE|-", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&req.Language, "language", "", "one of py js ts bash r php go rs c cpp java d f90 (default: from the file's extension)")
		fs.StringVar(&req.SandboxID, "sandbox", "", "the sandbox of an earlier run (its answer's session_id), to keep its files")
		// --session was this flag's first name; exec's --session names a
		// narration log, so the interpreter's sandbox is --sandbox now.
		fs.StringVar(&req.SandboxID, "session", "", "the old name of --sandbox")
		fs.StringVar(&req.Image, "image", "", "for a new sandbox: one of the org's images ('sandbox images') instead of the exec class's")
		fs.StringVar(&req.Context, "context", "", "py, r, js and bash: run in this code context of the sandbox ('default': the language's default one), whose variables persist between runs")
	}, 1, -1)
	if err != nil {
		return err
	}
	file, progArgs := rest[0], rest[1:]
	if len(progArgs) > 0 && progArgs[0] == "--" {
		progArgs = progArgs[1:]
	}
	var src []byte
	if file == "-" {
		src, err = io.ReadAll(stdin)
	} else {
		src, err = os.ReadFile(file)
		if req.Language == "" {
			req.Language = strings.TrimPrefix(filepath.Ext(file), ".")
		}
	}
	if err != nil {
		return err
	}
	if req.Language == "" {
		return errors.New("sandbox run-code: say --language")
	}
	c := cf.c
	req.Code, req.Args = string(src), progArgs
	res, err := c.RunCode(ctx, req)
	if err != nil {
		return err
	}
	if cf.output != "table" {
		if err := show(stdout, cf.output, res, nil, nil); err != nil {
			return err
		}
	} else {
		io.WriteString(stdout, res.Stdout)
		io.WriteString(stderr, res.Stderr)
		fmt.Fprintf(stderr, "[sandbox %s]\n", res.SandboxID)
	}
	if res.ExitCode != 0 {
		return exitError{res.ExitCode}
	}
	return nil
}
