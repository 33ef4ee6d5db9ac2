package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/sandboxd/sandbox/internal/quota"
	"github.com/sandboxd/sandbox/internal/sandbox"
	"github.com/sandboxd/sandbox/internal/store"
)

const quotaUsage = `usage:
  sandbox quota get --data DIR --org ORG
  sandbox quota set --data DIR --org ORG [--live CLASS=N,...] [--cpus N] [--memory-mib N]
                    [--disk-mib N] [--projects N] [--commands N]
  sandbox quota clear --data DIR --org ORG

An org's quotas are the server's (sandbox serve --quota-*) under the
operator's override for it, which these verbs keep in the data directory;
the running server applies a change to the org's next call. set changes
only the quotas it names; clear drops the override.`

// quotaCmd reads and sets the per-org quota overrides.
func quotaCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "get" && args[0] != "set" && args[0] != "clear") {
		fmt.Fprintln(stderr, quotaUsage)
		return errors.New("quota takes get, set or clear")
	}
	verb := args[0]
	fs := flag.NewFlagSet("quota "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	data := fs.String("data", defaultData, "data directory of the server")
	org := fs.String("org", "", "the org (required)")
	live := fs.String("live", "", "live sandboxes per class: CLASS=N[,CLASS=N]")
	cpus := fs.String("cpus", "", "CPUs its pending and running sandboxes may reserve")
	mem := fs.String("memory-mib", "", "memory (MiB) they may reserve")
	disk := fs.String("disk-mib", "", "disk (MiB) its project volumes and checkpoints may reserve")
	projects := fs.String("projects", "", "projects whose volume it may keep")
	commands := fs.String("commands", "", "its concurrent commands")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *org == "" || fs.NArg() > 0 {
		fs.Usage()
		return errors.New("--org is required, and nothing after the flags")
	}
	return withStore(ctx, *data, func(st *store.Store) error {
		p, err := st.OrgQuota(ctx, *org)
		if err != nil {
			return err
		}
		switch verb {
		case "clear":
			p = quota.Policy{}
		case "set":
			if p, err = applyQuotaFlags(p, *live, *cpus, *mem, *disk, *projects, *commands); err != nil {
				return err
			}
		}
		if verb != "get" {
			if err := st.SetOrgQuota(ctx, *org, p); err != nil {
				return errors.New(sandbox.Message(err))
			}
		}
		b, _ := json.MarshalIndent(map[string]any{"org": *org, "override": p}, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return nil
	})
}

// applyQuotaFlags sets in p the quotas given (non-empty).
func applyQuotaFlags(p quota.Policy, live, cpus, mem, disk, projects, commands string) (quota.Policy, error) {
	if live != "" {
		if p.Live == nil {
			p.Live = map[string]int{}
		}
		for _, kv := range strings.Split(live, ",") {
			c, n, ok := strings.Cut(kv, "=")
			x, err := strconv.Atoi(n)
			if !ok || err != nil {
				return p, fmt.Errorf("--live wants CLASS=N, not %q", kv)
			}
			p.Live[c] = x
		}
	}
	if cpus != "" {
		f, err := strconv.ParseFloat(cpus, 64)
		if err != nil {
			return p, fmt.Errorf("--cpus: %w", err)
		}
		p.CPUs = &f
	}
	for _, v := range []struct {
		name string
		s    string
		dst  **int64
	}{{"--memory-mib", mem, &p.MemoryMiB}, {"--disk-mib", disk, &p.DiskMiB}} {
		if v.s == "" {
			continue
		}
		n, err := strconv.ParseInt(v.s, 10, 64)
		if err != nil {
			return p, fmt.Errorf("%s: %w", v.name, err)
		}
		*v.dst = &n
	}
	for _, v := range []struct {
		name string
		s    string
		dst  **int
	}{{"--projects", projects, &p.Projects}, {"--commands", commands, &p.Commands}} {
		if v.s == "" {
			continue
		}
		n, err := strconv.Atoi(v.s)
		if err != nil {
			return p, fmt.Errorf("%s: %w", v.name, err)
		}
		*v.dst = &n
	}
	return p, p.Validate()
}
