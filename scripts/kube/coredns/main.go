// Command coredns is CoreDNS v1.15 with only the plugins the test cluster's
// cluster DNS uses, built the way CoreDNS documents for a custom build (a
// main that imports the plugins and sets the directive order). kube-up.sh
// copies it into ROOT/src/coredns, builds it, and runs it as the kube-dns
// Deployment in kube-system (scripts/kube/addons.yaml).
//
// There is no forward plugin on purpose: the cluster's pods resolve the
// cluster's names and nothing else, so no name leaves the machine.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

// directives in the order of CoreDNS's plugin.cfg: the order is the chain's.
var directives = []string{
	"reload",
	"ready",
	"health",
	"errors",
	"log",
	"loadbalance",
	"cache",
	"kubernetes",
	"loop",
}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
