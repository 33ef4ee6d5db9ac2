package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandbox/internal/store"
)

const keysUsage = `usage:
  sandbox keys create --data DIR --org ORG [--subject WHO] [--expires DUR] [--scope tenant|admin]
        mint a key and print it alone on stdout (shown this once). A tenant key
        (the default) works the org's sandboxes; an admin key also manages the
        org's keys over the API, and one of the operator org (--operator-org,
        default system) every org's keys and quotas, and reads /metrics
  sandbox keys list --data DIR --org ORG
        the org's keys: id, subject, scope, created, last used, expires (never a secret)
  sandbox keys revoke --data DIR --org ORG KEY_ID
        delete a key: its next call is a 401, and its open terminals,
        screens, event streams and MCP streams end within seconds`

// keys mints, lists and revokes API keys against a data directory (the
// server may be running on it).
func keys(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "list" && args[0] != "revoke") {
		fmt.Fprintln(stderr, keysUsage)
		return errors.New("keys takes create, list or revoke")
	}
	verb := args[0]
	fs := flag.NewFlagSet("keys "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", "", "data directory of the server (required)")
	org := fs.String("org", "", "the org (required)")
	subject := fs.String("subject", "cli", "create: who the key is for, recorded beside it")
	expires := fs.Duration("expires", 0, "create: the key stops working this long from now (0: never)")
	scope := fs.String("scope", store.ScopeTenant, "create: tenant (the org's sandboxes) or admin (also its keys; with the operator org, the operator routes)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *data == "" || *org == "" {
		fs.Usage()
		return errors.New("--data and --org are required")
	}
	if *expires < 0 {
		return errors.New("--expires must not be negative")
	}
	if err := store.CheckScope(*scope); err != nil {
		return fmt.Errorf("--scope: %w", err)
	}
	if want := map[string]int{"create": 0, "list": 0, "revoke": 1}[verb]; fs.NArg() != want {
		fmt.Fprintln(stderr, keysUsage)
		return fmt.Errorf("keys %s takes %d argument(s) after the flags", verb, want)
	}
	return withStore(ctx, *data, func(st *store.Store) error {
		switch verb {
		case "create":
			var exp time.Time
			if *expires > 0 {
				exp = time.Now().Add(*expires)
			}
			key, _, err := st.MintKey(ctx, *org, *subject, *scope, exp)
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, key)
		case "list":
			ks, err := st.Keys(ctx, *org)
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSUBJECT\tSCOPE\tPREFIX\tCREATED\tLAST USED\tEXPIRES")
			for _, k := range ks {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%s\t%s\t%s\n", k.ID, k.Subject, k.Scope, k.Prefix, when(k.CreatedAt), when(k.LastUsedAt), when(k.ExpiresAt))
			}
			return tw.Flush()
		case "revoke":
			if err := st.RevokeKey(ctx, *org, fs.Arg(0)); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "revoked %s\n", fs.Arg(0))
		}
		return nil
	})
}

func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
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
