package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/sandboxd/sandbox/client"
)

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

var shellExit = regexp.MustCompile(`exited \((\d+)\)`)

// shellCmd is an interactive terminal in the caller's own tty: raw mode
// while connected (restored however it ends), the size sent at the start
// and on every SIGWINCH; the shell's exit code becomes sandbox's.
func shellCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var session string
	cf, rest, err := verb("shell", "ID [--session NAME]", args, stderr, func(fs *flag.FlagSet) {
		fs.StringVar(&session, "session", "", "attach to (or create) this tmux session; it outlives the connection")
	}, 1, 1)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	t, err := c.Terminal(ctx, rest[0], session)
	if err != nil {
		return err
	}
	defer t.Close()
	if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		fd := int(f.Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return err
		}
		defer term.Restore(fd, old)
		resize := func() {
			if w, h, err := term.GetSize(fd); err == nil {
				t.Resize(uint16(w), uint16(h))
			}
		}
		resize()
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for range winch {
				resize()
			}
		}()
	}
	go io.Copy(t, stdin)
	_, err = io.Copy(stdout, t)
	if err != nil {
		return err
	}
	if m := shellExit.FindStringSubmatch(t.Reason()); m != nil {
		if code, _ := strconv.Atoi(m[1]); code != 0 {
			return exitError{code}
		}
	}
	return nil
}

// remote splits "ID:PATH" (an id is sb_…); ok is false for a local path.
func remote(arg string) (id, p string, ok bool) {
	id, p, ok = strings.Cut(arg, ":")
	if !ok || !strings.HasPrefix(id, "sb_") {
		return "", arg, false
	}
	return id, p, true
}

// cpCmd copies a file or a directory tree between this machine and a
// sandbox, in either direction, like cp -r: an existing directory as the
// destination receives the source under its own name.
func cpCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cf, rest, err := verb("cp", "SRC DST (one of them ID:PATH)", args, stderr, nil, 2, 2)
	if err != nil {
		return err
	}
	c, err := cf.client()
	if err != nil {
		return err
	}
	srcID, src, srcRemote := remote(rest[0])
	dstID, dst, dstRemote := remote(rest[1])
	switch {
	case srcRemote == dstRemote:
		return errors.New("sandbox cp: one side must be a sandbox (ID:PATH) and the other a local path")
	case dstRemote:
		n, err := upload(ctx, c, src, dstID, dst)
		fmt.Fprintf(stderr, "copied %d file(s) to %s:%s\n", n, dstID, dst)
		return err
	default:
		if st, err := os.Stat(dst); err == nil && st.IsDir() {
			dst = filepath.Join(dst, path.Base(strings.TrimSuffix(src, "/")))
		}
		n, err := download(ctx, c, srcID, src, dst)
		fmt.Fprintf(stderr, "copied %d file(s) to %s\n", n, dst)
		return err
	}
}

func upload(ctx context.Context, c *client.Client, src, id, dst string) (int, error) {
	st, err := os.Stat(src)
	if err != nil {
		return 0, err
	}
	if dst == "" || strings.HasSuffix(dst, "/") {
		dst = path.Join(dst, filepath.Base(src))
	}
	if !st.IsDir() {
		f, err := os.Open(src)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		_, err = c.WriteFile(ctx, id, dst, f)
		return 1, err
	}
	n := 0
	var empty []string
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := path.Join(dst, filepath.ToSlash(rel))
		if d.IsDir() {
			if entries, _ := os.ReadDir(p); len(entries) == 0 {
				empty = append(empty, target)
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil // links and devices stay here
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := c.WriteFile(ctx, id, target, f); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		n++
		return nil
	})
	if err == nil && len(empty) > 0 {
		_, err = c.Exec(ctx, id, client.ExecRequest{Argv: append([]string{"mkdir", "-p", "--"}, empty...)})
	}
	return n, err
}

func download(ctx context.Context, c *client.Client, id, src, dst string) (int, error) {
	f, err := c.ReadFile(ctx, id, src)
	if err != nil {
		return 0, err
	}
	if !f.Dir {
		defer f.Close()
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return 0, err
		}
		out, err := os.Create(dst)
		if err != nil {
			return 0, err
		}
		if _, err := io.Copy(out, f); err != nil {
			out.Close()
			return 0, err
		}
		return 1, out.Close()
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		if e == "" || e == "./" || e == "../" {
			continue
		}
		name := strings.TrimSuffix(e, "/")
		if name != filepath.Base(name) || name == ".." {
			return n, fmt.Errorf("the sandbox listed an entry %q that is not a plain name", e)
		}
		k, err := download(ctx, c, id, path.Join(src, name), filepath.Join(dst, name))
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

const bashCompletion = `# sandbox completion for bash: source <(sandbox completion bash)
_sandbox() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "serve keys image credits quota login lease ls get exec shell cp logs renew pause resume stop end run-code completion help" -- "$cur"))
    return
  fi
  case ${COMP_WORDS[1]} in
    get|exec|shell|renew|pause|resume|stop|end)
      if [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "$(sandbox ls -o json 2>/dev/null | sed -n 's/.*"id": "\(sb_[a-z0-9]*\)".*/\1/p')" -- "$cur"))
      fi ;;
    completion) COMPREPLY=($(compgen -W "bash zsh" -- "$cur")) ;;
    *) COMPREPLY=($(compgen -f -- "$cur")) ;;
  esac
}
complete -F _sandbox sandbox
`

const zshCompletion = `#compdef sandbox
# sandbox completion for zsh: source <(sandbox completion zsh)
autoload -U +X bashcompinit && bashcompinit
` + bashCompletion

func completionCmd(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return errors.New("usage: sandbox completion bash|zsh")
	}
	switch args[0] {
	case "bash":
		_, err := io.WriteString(stdout, bashCompletion)
		return err
	case "zsh":
		_, err := io.WriteString(stdout, zshCompletion)
		return err
	}
	return fmt.Errorf("sandbox completion: bash or zsh, not %q", args[0])
}
