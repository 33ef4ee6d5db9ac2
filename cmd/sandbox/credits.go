package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/sandboxd/sandbox/internal/store"
)

// credits adds to (or, with a negative amount, corrects) an org's prepaid
// balance, which the meter debits when lease fees are set.
func credits(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "add" {
		return errors.New("usage: sandbox credits add --data DIR --org ORG --cents N")
	}
	fs := flag.NewFlagSet("credits add", flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "", "data directory of the server (required)")
	org := fs.String("org", "", "org to credit (required)")
	cents := fs.Int64("cents", 0, "amount in cents; negative to correct")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *data == "" || *org == "" || *cents == 0 {
		fs.Usage()
		return errors.New("--data, --org and a non-zero --cents are required")
	}
	return withStore(ctx, *data, func(st *store.Store) error {
		bal, err := st.Credit(ctx, *org, *cents)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s: balance %d cents\n", *org, bal)
		return nil
	})
}
