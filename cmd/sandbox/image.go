package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandbox/internal/image"
)

func imageCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return errors.New("usage: sandbox image build NAME [--images DIR] | sandbox image list [--images DIR]")
	}
	fs := flag.NewFlagSet("image "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("images", filepath.Join(defaultData, "images"), "directory of built images")
	switch args[0] {
	case "build":
		// The name may come before or after the flags.
		rest := args[1:]
		var name string
		if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
			name, rest = rest[0], rest[1:]
		}
		if err := fs.Parse(rest); err != nil {
			return err
		}
		if name == "" && fs.NArg() == 1 {
			name = fs.Arg(0)
		} else if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments: %v", fs.Args())
		}
		if name == "" {
			return fmt.Errorf("usage: sandbox image build %s [--images DIR]", strings.Join(image.Names(), "|"))
		}
		return image.Build(ctx, *dir, name, stderr)
	case "list":
		if err := fs.Parse(args[1:]); err != nil {
			return err
		}
		for _, n := range image.Names() {
			m, err := image.Inspect(*dir, n)
			if err != nil {
				fmt.Fprintf(stdout, "%-8s not built\n", n)
				continue
			}
			fmt.Fprintf(stdout, "%-8s built %s\n", n, m.BuiltAt.Format("2006-01-02 15:04"))
		}
		return nil
	}
	return fmt.Errorf("unknown image command %q: use build or list", args[0])
}
