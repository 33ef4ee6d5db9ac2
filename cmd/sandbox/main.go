// Command sandbox is the one binary of the service: `sandbox serve` runs the
// server; the other verbs (keys, image) work against a data directory on the
// same machine.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandbox/client"
)

const usage = `sandbox — lease isolated gVisor sandboxes over HTTP

Usage:
  sandbox serve --data DIR [--listen ADDR] [--images DIR] [--reap-every DUR]
        run the server (see 'sandbox serve -h')
  sandbox keys create --data DIR --org ORG [--expires DUR] [--scope tenant|admin]
        mint an API key for ORG and print it alone on stdout; tenant (the
        default) for its sandboxes, admin also for its keys (the operator
        org's admin keys: every org's keys and quotas, /metrics)
  sandbox keys list|revoke --data DIR --org ORG [KEY_ID]
        list an org's keys (never a secret), or revoke one at once
  sandbox image build exec|dev|desktop|android [--images DIR]
        build a class image from Debian packages (idempotent)
  sandbox image pull NAME REF [--org ORG] [--username U --password-stdin] [--data DIR]
        pull an OCI/Docker image and name it for every org (or --org's); prints its digest
  sandbox image import NAME FILE [--org ORG] [--data DIR]
        the same from an OCI layout (dir or tar) or a 'docker save' archive
  sandbox image list [--org ORG] [--data DIR] [--images DIR]
        the class images (built or not) and the named ones: the server's, --org's
  sandbox image rm NAME [--org ORG] [--data DIR]
        drop a name (its files go at the next gc)
  sandbox image gc [--older-than DUR] [--data DIR]
        delete the unpacked images nothing names or runs; print what was freed
  sandbox credits add --data DIR --org ORG --cents N
        prepay an org's leases (only matters when sandbox serve --fee sets a fee)
  sandbox quota get|set|clear --data DIR --org ORG [--projects N] [--live dev=2] ...
        read or override one org's quotas (see 'sandbox quota')
  sandbox egress-gateway --namespace NS [--dns IP]
        the Kubernetes backend's egress gateway (the pod it makes runs it)

Lease fees default to 0. sandbox serve --fee N sets a fee (in cents) for
every class and --fee CLASS=N one class's; a lease the org's balance cannot
pay is refused with 402.

Every API call carries 'Authorization: Bearer <key>'. Start with:
  sandbox keys create --data /var/lib/sandbox --org myteam
and, for the operator routes:
  sandbox keys create --data /var/lib/sandbox --org system --scope admin

` + clientUsage + "\n"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		var exit exitError
		if errors.As(err, &exit) {
			os.Exit(exit.code) // the program's own exit code; it said why
		}
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "sandbox:", err)
		}
		os.Exit(2)
	}
}

// stdin is the client verbs' standard input (a test sets it).
var stdin io.Reader = os.Stdin

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("missing command")
	}
	switch args[0] {
	case "serve":
		return serve(ctx, args[1:], stdout, stderr)
	case "keys":
		return keys(ctx, args[1:], stdout, stderr)
	case "image":
		return imageCmd(ctx, args[1:], stdin, stdout, stderr)
	case "credits":
		return credits(ctx, args[1:], stdout, stderr)
	case "quota":
		return quotaCmd(ctx, args[1:], stdout, stderr)
	case "login":
		return login(ctx, args[1:], stdout, stderr)
	case "lease":
		return leaseCmd(ctx, args[1:], stdout, stderr)
	case "ls":
		return lsCmd(ctx, args[1:], stdout, stderr)
	case "get":
		return onSandbox("get", (*client.Client).Get)(ctx, args[1:], stdout, stderr)
	case "sleep", "pause": // pause and resume: the verbs' old names
		return onSandbox(args[0], (*client.Client).Sleep)(ctx, args[1:], stdout, stderr)
	case "wake", "resume":
		return onSandbox(args[0], (*client.Client).Wake)(ctx, args[1:], stdout, stderr)
	case "network":
		return networkCmd(ctx, args[1:], stdout, stderr)
	case "preview":
		return previewCmd(ctx, args[1:], stdout, stderr)
	case "renew":
		return renewCmd(ctx, args[1:], stdout, stderr)
	case "stop":
		return stopCmd(ctx, args[1:], stdout, stderr)
	case "end":
		return endCmd(ctx, args[1:], stdout, stderr)
	case "exec":
		return execCmd(ctx, args[1:], stdin, stdout, stderr)
	case "shell":
		return shellCmd(ctx, args[1:], stdin, stdout, stderr)
	case "cp":
		return cpCmd(ctx, args[1:], stdout, stderr)
	case "logs":
		return logsCmd(ctx, args[1:], stdout, stderr)
	case "fork":
		return forkCmd(ctx, args[1:], stdout, stderr)
	case "ps":
		return psCmd(ctx, args[1:], stdout, stderr)
	case "start":
		return startCmd(ctx, args[1:], stdout, stderr)
	case "output":
		return outputCmd(ctx, args[1:], stdout, stderr)
	case "send":
		return sendCmd(ctx, args[1:], stdin, stdout, stderr)
	case "kill":
		return killCmd(ctx, args[1:], stdout, stderr)
	case "ctx":
		return ctxCmd(ctx, args[1:], stdin, stdout, stderr)
	case "watch":
		return watchCmd(ctx, args[1:], stdout, stderr)
	case "run-code":
		return runCodeCmd(ctx, args[1:], stdin, stdout, stderr)
	case "images":
		return imagesCmd(ctx, args[1:], stdout, stderr)
	case "pull":
		return pullCmd(ctx, args[1:], stdin, stdout, stderr)
	case "snapshot":
		return snapshotCmd(ctx, args[1:], stdout, stderr)
	case "rmi":
		return rmiCmd(ctx, args[1:], stdout, stderr)
	case "bench":
		return benchCmd(ctx, args[1:], stdout, stderr)
	case "egress-gateway":
		return gatewayCmd(ctx, args[1:], stderr)
	case "completion":
		return completionCmd(args[1:], stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

// defaultData is where the one-command setup keeps its state.
const defaultData = "/var/lib/sandbox"
