package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandboxd/sandbox/client"
)

// The code context verbs (ctx new|ls|rm|run|interrupt) and watch.

func ctxCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: sandbox ctx new|ls|rm|run|interrupt ID ... (see 'sandbox help')")
	}
	switch args[0] {
	case "new":
		var req client.ContextRequest
		cf, rest, err := verb("ctx new", "ID [--language python|r|javascript|bash] [--cwd D]", args[1:], stderr, func(fs *flag.FlagSet) {
			fs.StringVar(&req.Language, "language", "python", "python or r (Jupyter kernels), javascript or bash")
			fs.StringVar(&req.Cwd, "cwd", "", "its working directory, under the sandbox's workdir")
		}, 1, 1)
		if err != nil {
			return err
		}
		k, err := cf.c.CreateContext(ctx, rest[0], req)
		if err != nil {
			return err
		}
		return showContext(stdout, cf.output, k)
	case "ls":
		cf, rest, err := verb("ctx ls", "ID", args[1:], stderr, nil, 1, 1)
		if err != nil {
			return err
		}
		list, err := cf.c.Contexts(ctx, rest[0])
		if err != nil {
			return err
		}
		rows := make([][]string, len(list))
		for i, k := range list {
			state := "idle"
			if k.Busy {
				state = "running"
			}
			rows[i] = []string{k.ID, k.Language, k.Cwd, state, time.Since(time.Unix(k.CreatedAt, 0)).Round(time.Second).String() + " ago"}
		}
		if list == nil {
			list = []client.CodeContext{}
		}
		return show(stdout, cf.output, map[string]any{"contexts": list}, []string{"ID", "LANGUAGE", "CWD", "STATE", "OPENED"}, rows)
	case "rm", "interrupt":
		cf, rest, err := verb("ctx "+args[0], "ID CTX", args[1:], stderr, nil, 2, 2)
		if err != nil {
			return err
		}
		call := cf.c.DeleteContext
		if args[0] == "interrupt" {
			call = cf.c.InterruptContext
		}
		k, err := call(ctx, rest[0], rest[1])
		if err != nil {
			return err
		}
		return showContext(stdout, cf.output, k)
	case "run":
		return ctxRunCmd(ctx, args[1:], stdin, stdout, stderr)
	}
	return fmt.Errorf("sandbox ctx: new, ls, rm, run or interrupt, not %q", args[0])
}

// ctxRunCmd runs code in a context: its output as it comes, the last
// expression's value on stdout, an error's traceback on stderr (exit 1),
// and each image result saved under --save (or named on stderr).
func ctxRunCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var timeout time.Duration
	var save string
	cf, rest, err := verb("ctx run", "ID CTX FILE|- [--timeout DUR] [--save DIR]   (CTX: a context's id, or python, r, javascript, bash: the language's default context)", args, stderr, func(fs *flag.FlagSet) {
		fs.DurationVar(&timeout, "timeout", 0, "interrupt the run after this long; the context's state stays (default 5m)")
		fs.StringVar(&save, "save", "", "write each image result here (result-N.png, .jpeg, .svg)")
	}, 3, 3)
	if err != nil {
		return err
	}
	var src []byte
	if rest[2] == "-" {
		src, err = io.ReadAll(stdin)
	} else {
		src, err = os.ReadFile(rest[2])
	}
	if err != nil {
		return err
	}
	req := client.ContextRunRequest{Code: string(src), TimeoutSec: int(timeout / time.Second)}
	if cf.output != "table" {
		ex, err := cf.c.RunInContext(ctx, rest[0], rest[1], req)
		if err != nil {
			return err
		}
		if err := show(stdout, cf.output, ex, nil, nil); err != nil {
			return err
		}
		if ex.Error != nil {
			return exitError{1}
		}
		return nil
	}
	failed, n := false, 0
	err = cf.c.RunInContextStream(ctx, rest[0], rest[1], req, func(e client.ContextEvent) error {
		switch e.Type {
		case "stdout":
			io.WriteString(stdout, e.Text)
		case "stderr":
			io.WriteString(stderr, e.Text)
		case "result":
			n++
			for mime, ext := range map[string]string{"image/png": "png", "image/jpeg": "jpeg", "image/svg+xml": "svg"} {
				v, ok := e.Data[mime].(string)
				if !ok {
					continue
				}
				if save == "" {
					fmt.Fprintf(stderr, "[result %d: %s, %d bytes; --save DIR writes it]\n", n, mime, len(v))
					continue
				}
				b := []byte(v)
				if ext != "svg" {
					if b, err = base64.StdEncoding.DecodeString(v); err != nil {
						return fmt.Errorf("result %d: %w", n, err)
					}
				}
				name := filepath.Join(save, "result-"+strconv.Itoa(n)+"."+ext)
				if err := os.WriteFile(name, b, 0o644); err != nil {
					return err
				}
				fmt.Fprintf(stderr, "[result %d: %s]\n", n, name)
			}
			if t, ok := e.Data["text/plain"].(string); ok && e.IsMainResult {
				fmt.Fprintln(stdout, t)
			}
		case "error":
			failed = true
			for _, l := range e.Error.Traceback {
				fmt.Fprintln(stderr, l)
			}
			if len(e.Error.Traceback) == 0 {
				fmt.Fprintf(stderr, "%s: %s\n", e.Error.Name, e.Error.Value)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if failed {
		return exitError{1}
	}
	return nil
}

// watchCmd prints a directory's changes, one "TYPE NAME" line each, until
// interrupted.
func watchCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var recursive bool
	cf, rest, err := verb("watch", "ID [PATH] [-r]", args, stderr, func(fs *flag.FlagSet) {
		fs.BoolVar(&recursive, "r", false, "watch the subdirectories too")
	}, 1, 2)
	if err != nil {
		return err
	}
	path := ""
	if len(rest) == 2 {
		path = rest[1]
	}
	err = cf.c.WatchDir(ctx, rest[0], path, recursive, func(e client.FileEvent) error {
		if cf.output != "table" {
			return show(stdout, cf.output, e, nil, nil)
		}
		if e.Type == "ready" {
			_, err := fmt.Fprintf(stderr, "[watching %s]\n", e.Name)
			return err
		}
		_, err := fmt.Fprintf(stdout, "%-8s %s\n", e.Type, e.Name)
		return err
	})
	if errors.Is(err, context.Canceled) {
		return nil // ^C: the watch's normal end
	}
	return err
}

// showContext prints a context: its id alone in a table (what a script
// passes on), the whole record as JSON or YAML.
func showContext(w io.Writer, output string, k *client.CodeContext) error {
	if output == "table" {
		_, err := fmt.Fprintln(w, k.ID)
		return err
	}
	return show(w, output, k, nil, nil)
}
