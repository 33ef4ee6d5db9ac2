package main

import (
	"archive/tar"
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/sandboxd/sandbox/internal/files"
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
	c := cf.c
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
	c := cf.c
	srcID, src, srcRemote := remote(rest[0])
	dstID, dst, dstRemote := remote(rest[1])
	switch {
	case srcRemote == dstRemote:
		return errors.New("sandbox cp: one side must be a sandbox (ID:PATH) and the other a local path")
	case dstRemote:
		n, err := upload(ctx, c, src, dstID, dst, stderr)
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

// upload copies a file with one write, or a tree as one streamed tar
// (modes, empty directories and links inside it kept; a link the server
// would refuse — absolute, or out of the tree — is left out, said on
// stderr).
func upload(ctx context.Context, c *client.Client, src, id, dst string, stderr io.Writer) (int, error) {
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
	pr, pw := io.Pipe()
	n := 0
	walked := make(chan struct{})
	go func() {
		defer close(walked)
		tw := tar.NewWriter(pw)
		err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, p)
			info, err := d.Info()
			if err != nil {
				return err
			}
			link := ""
			if d.Type()&fs.ModeSymlink != 0 {
				if link, err = os.Readlink(p); err != nil {
					return err
				}
			}
			h, err := tar.FileInfoHeader(info, link)
			if err != nil {
				fmt.Fprintf(stderr, "skipped %s: %v\n", p, err)
				return nil
			}
			h.Name = filepath.ToSlash(rel)
			if d.IsDir() {
				h.Name += "/"
			}
			if _, err := files.CheckEntry(h); err != nil {
				fmt.Fprintf(stderr, "skipped %s: %v\n", p, err)
				return nil
			}
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			if d.Type().IsRegular() {
				f, err := os.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				if _, err := io.Copy(tw, f); err != nil {
					return err
				}
				n++
			}
			return nil
		})
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	_, err = c.Extract(ctx, id, dst, pr)
	pr.CloseWithError(io.ErrClosedPipe)
	<-walked // n is the walker's until it is done
	return n, err
}

// download copies a file, or a directory as one streamed tar unpacked
// here: every entry is checked as the server checks an upload (nothing
// absolute, no '..', links only inside and never through one).
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
	f.Close()
	arc, err := c.Archive(ctx, id, src, false)
	if err != nil {
		return 0, err
	}
	defer arc.Close()
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, err
	}
	tr := tar.NewReader(arc)
	var entries files.Entries
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("the sandbox's archive: %w", err)
		}
		name, err := entries.Check(h)
		if err != nil {
			return n, fmt.Errorf("the sandbox's archive: %w", err)
		}
		if name == "" || name == "." {
			continue
		}
		target := filepath.Join(dst, filepath.FromSlash(name))
		mode := fs.FileMode(h.Mode) & fs.ModePerm
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o700); err != nil {
				return n, err
			}
			defer os.Chmod(target, mode) // after its contents are written
		case tar.TypeSymlink:
			os.Remove(target)
			if err := os.Symlink(h.Linkname, target); err != nil {
				return n, err
			}
		case tar.TypeLink:
			os.Remove(target)
			if err := os.Link(filepath.Join(dst, filepath.FromSlash(path.Clean(h.Linkname))), target); err != nil {
				return n, err
			}
		case tar.TypeReg:
			out, err := os.OpenFile(target, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
			if err != nil {
				return n, err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return n, err
			}
			if err := out.Close(); err != nil {
				return n, err
			}
			os.Chmod(target, mode)
			n++
		}
	}
}

const bashCompletion = `# sandbox completion for bash: source <(sandbox completion bash)
_sandbox() {
  local cur=${COMP_WORDS[COMP_CWORD]}
  if [ "$COMP_CWORD" -eq 1 ]; then
    COMPREPLY=($(compgen -W "serve keys image credits quota login lease ls get exec shell cp logs start ps output send kill fork renew network preview sleep wake stop end run-code ctx watch images pull snapshot rmi bench completion help" -- "$cur"))
    return
  fi
  case ${COMP_WORDS[1]} in
    get|exec|shell|start|ps|output|send|kill|fork|renew|network|preview|sleep|wake|pause|resume|stop|end|snapshot)
      if [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "$(sandbox ls -o json 2>/dev/null | sed -n 's/.*"id": "\(sb_[a-z0-9]*\)".*/\1/p')" -- "$cur"))
      elif [ "$COMP_CWORD" -eq 3 ] && [[ ${COMP_WORDS[1]} =~ ^(output|send|kill)$ ]]; then
        COMPREPLY=($(compgen -W "$(sandbox ps "${COMP_WORDS[2]}" -o json 2>/dev/null | sed -n 's/.*"pid": \([0-9]*\).*/\1/p')" -- "$cur"))
      fi ;;
    rmi)
      if [ "$COMP_CWORD" -eq 2 ]; then
        COMPREPLY=($(compgen -W "$(sandbox images -o json 2>/dev/null | sed -n '/"name": /h; /"scope": "org"/{x;s/.*"name": "\([^"]*\)".*/\1/p;}')" -- "$cur"))
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
