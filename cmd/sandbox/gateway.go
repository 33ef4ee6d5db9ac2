package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandbox/internal/egress"
	"github.com/sandboxd/sandbox/internal/runtime/kube"
)

// gatewayCmd is `sandbox egress-gateway`: the Kubernetes backend's egress
// gateway (internal/egress.Gateway), run by the Deployment the backend
// makes in the sandbox namespace, never by hand. It reads the namespace's
// sandbox pods and their policies (kube.WatchPolicies) with its pod's own
// service account.
func gatewayCmd(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("egress-gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var ns, dns string
	var never, open []netip.Prefix
	prefixes := func(into *[]netip.Prefix) func(string) error {
		return func(v string) error {
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return err
			}
			*into = append(*into, p.Masked())
			return nil
		}
	}
	fs.StringVar(&ns, "namespace", "", "the sandbox namespace, whose pods the gateway serves (required)")
	fs.StringVar(&dns, "dns", "", "the upstream resolver (ip[:port]); default: this pod's /etc/resolv.conf")
	fs.Func("never", "a CIDR of the cluster no sandbox reaches, on top of the fixed ones (repeatable)", prefixes(&never))
	fs.Func("open-private", "a private CIDR the operator opened to policies (repeatable)", prefixes(&open))
	debug := fs.Bool("debug", false, "log every refusal")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if ns == "" || fs.NArg() > 0 {
		return errors.New("egress-gateway: --namespace is required and no argument is taken (it runs in the pod the Kubernetes backend makes)")
	}
	self, err := netip.ParseAddr(os.Getenv("POD_IP"))
	if err != nil {
		return fmt.Errorf("egress-gateway: POD_IP %q: the pod's own address (the Deployment sets it)", os.Getenv("POD_IP"))
	}
	level := slog.LevelInfo
	if *debug {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	rc, err := rest.InClusterConfig()
	if err != nil {
		return fmt.Errorf("egress-gateway: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("egress-gateway: %w", err)
	}
	gw, err := egress.NewGateway(egress.GatewayOptions{Self: self, DNS: dns, Never: never, Open: open}, log)
	if err != nil {
		return err
	}
	defer gw.Close()
	if err := kube.WatchPolicies(ctx, client, ns, gw, log); err != nil {
		return err
	}
	log.Info("egress gateway serving", "namespace", ns, "self", self)
	<-ctx.Done()
	return nil
}
