package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sandboxd/sandbox/internal/store"
)

func keys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "create" {
		return errors.New("usage: sandbox keys create --data DIR --org ORG")
	}
	fs := flag.NewFlagSet("keys create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "", "data directory of the server (required)")
	org := fs.String("org", "", "org the key acts for (required)")
	subject := fs.String("subject", "cli", "who the key is for, recorded beside it")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *data == "" || *org == "" {
		fs.Usage()
		return errors.New("--data and --org are required")
	}
	return withStore(ctx, *data, func(st *store.Store) error {
		key, err := st.CreateKey(ctx, *org, *subject)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, key)
		return nil
	})
}

// withStore opens the store of a data directory for one CLI verb. The
// server may be running on it at the same time: SQLite's WAL lets both
// write.
func withStore(ctx context.Context, data string, f func(*store.Store) error) error {
	st, err := store.Open(ctx, data)
	if err != nil {
		return err
	}
	defer st.Close()
	return f(st)
}
