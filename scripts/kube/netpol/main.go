// Command kube-netpol runs sigs.k8s.io/kube-network-policies, a
// NetworkPolicy implementation, as a host process of the test cluster, one
// per node (scripts/kube-up.sh builds and starts it; kube-down.sh stops it).
// Upstream's own main only knows the in-cluster config of a DaemonSet pod;
// this one reads a kubeconfig, and runs without NRI (the test cluster's
// containerd has no NRI socket) and without AdminNetworkPolicy.
//
//	kube-netpol -kubeconfig F -hostname-override NODE [-nfqueue-id N] [-table T]
//	kube-netpol -cleanup [-table T] # remove the rules a killed run left
//	kube-netpol -check [-table T]   # exit 0 when the rules are in place
//
// Two nodes on one machine share its network namespace: each node's
// kube-netpol has a queue and a table of its own, and queues the packets
// of its own node's pods.
//
// Fail-closed: packets of a selected pod that are queued while no
// controller reads the queue are dropped, not let through.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/nftables"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

// table is the nftables table's name, upstream's default (Config.Defaults)
// unless -table names another.
var table = "kube-network-policies"

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig file (required)")
	node := flag.String("hostname-override", "", "the node's name (required)")
	queue := flag.Int("nfqueue-id", 100, "nfqueue number")
	cleanup := flag.Bool("cleanup", false, "delete the nftables table and exit")
	check := flag.Bool("check", false, "exit 0 when the nftables table exists")
	flag.StringVar(&table, "table", table, "the nftables table (inet family) of this node's rules")
	klog.InitFlags(nil)
	flag.Parse()
	switch {
	case *cleanup:
		if err := deleteTable(); err != nil {
			fmt.Fprintln(os.Stderr, "kube-netpol:", err)
			os.Exit(1)
		}
		return
	case *check:
		ok, err := hasTable()
		if err != nil {
			fmt.Fprintln(os.Stderr, "kube-netpol:", err)
			os.Exit(1)
		}
		if !ok {
			os.Exit(3)
		}
		return
	}
	if *kubeconfig == "" || *node == "" {
		fmt.Fprintln(os.Stderr, "kube-netpol: -kubeconfig and -hostname-override are required")
		os.Exit(2)
	}
	os.Exit(run(*kubeconfig, *node, *queue))
}

func run(kubeconfig, node string, queue int) int {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		klog.ErrorS(err, "loading the kubeconfig")
		return 1
	}
	cfg.UserAgent = "kube-netpol"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		klog.ErrorS(err, "client")
		return 1
	}
	factory := informers.NewSharedInformerFactory(client, 0)
	c, err := networkpolicy.NewController(client,
		factory.Networking().V1().NetworkPolicies(), factory.Core().V1().Namespaces(), factory.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{QueueID: queue, NodeName: node, NetfilterBug1766Fix: true, NRIdisabled: true, NFTableName: table})
	if err != nil {
		klog.ErrorS(err, "creating the controller")
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	factory.Start(ctx.Done())
	select {
	case err := <-done:
		// Run returns before ctx ends only when it could not start (the
		// queue socket): say so and exit, for kube-up.sh to report.
		klog.ErrorS(err, "the controller stopped")
		cancel()
		return 1
	case <-ctx.Done():
	}
	// Run removes its table on the way out.
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
	return 0
}

func hasTable() (bool, error) {
	conn, err := nftables.New()
	if err != nil {
		return false, err
	}
	tables, err := conn.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, err
	}
	for _, t := range tables {
		if t.Name == table {
			return true, nil
		}
	}
	return false, nil
}

func deleteTable() error {
	ok, err := hasTable()
	if err != nil || !ok {
		return err
	}
	conn, err := nftables.New()
	if err != nil {
		return err
	}
	conn.DelTable(&nftables.Table{Name: table, Family: nftables.TableFamilyINet})
	return conn.Flush()
}
