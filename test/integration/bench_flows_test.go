package integration_test

import (
	"fmt"
	"net"
	"net/http"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandbox/internal/server"
	"github.com/sandboxd/sandbox/internal/testenv"
)

// fillConntrack adds n established TCP entries to the uplink's conntrack
// table (flows of no sandbox, as a busy host's uplink has): what the
// cut's dump walks through.
func fillConntrack(b *testing.B, in *testenv.Internet, n int) {
	ns, err := netns.GetFromPath(in.Uplink)
	if err != nil {
		b.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_NETFILTER)
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	for i := range n {
		src := net.IPv4(198, 51, 100, byte(10+i/60000)).To4()
		dst := net.ParseIP(testenv.RawIP).To4()
		port := uint16(1024 + i%60000)
		f := &netlink.ConntrackFlow{
			FamilyType: unix.AF_INET,
			Forward:    netlink.IPTuple{SrcIP: src, DstIP: dst, Protocol: unix.IPPROTO_TCP, SrcPort: port, DstPort: 80},
			Reverse:    netlink.IPTuple{SrcIP: dst, DstIP: src, Protocol: unix.IPPROTO_TCP, SrcPort: 80, DstPort: port},
			TimeOut:    3600,
			ProtoInfo:  &netlink.ProtoInfoTCP{State: 3}, // established
		}
		if err := h.ConntrackCreate(netlink.ConntrackTable, unix.AF_INET, f); err != nil {
			b.Fatalf("conntrack entry %d: %v", i, err)
		}
	}
}

// BenchmarkEgressFlowCut: what cutting the open flows costs (issue 27).
// Two servers side by side in one run, the same in all but the cut
// (egress.Options.NoFlowCut): a lease with a network policy (a slot's
// first lease after a start deletes the stale conntrack entries of its
// address; one this server ended cleanly has none), the end of one (its
// flows cut), and a policy change on a sandbox with an open download (its
// conntrack entries and proxied connections judged again), each with the
// uplink's conntrack table near empty and holding 10,000 other flows (a
// deletion dumps the table). The target: ≤ 1.05× without the cut.
func BenchmarkEgressFlowCut(b *testing.B) {
	envs := map[bool]*env{}
	ins := map[bool]*testenv.Internet{}
	for _, cut := range []bool{false, true} {
		in := testenv.NewInternet(b)
		var cfg server.Config
		cfg.GVisor.Egress.Uplink, cfg.GVisor.Egress.DNS, cfg.GVisor.Egress.NoFlowCut = in.Uplink, in.DNS, !cut
		cfg.GVisor.Egress.RateMbit = 8
		cfg.Service.NetworkAllow = []string{"*", "internet"}
		envs[cut], ins[cut] = newEnvConfig(b, cfg), in
	}
	policy := map[string]any{"network": map[string]any{"allow": []string{"allowed.example", testenv.RawIP}}}
	onOff := map[bool]string{false: "off", true: "on"}
	for _, table := range []int{0, 10000} {
		if table > 0 {
			for _, cut := range []bool{false, true} {
				fillConntrack(b, ins[cut], table)
			}
		}
		for _, cut := range []bool{false, true} {
			e := envs[cut]
			b.Run(fmt.Sprintf("lease/conntrack=%d/cut=%s", table, onOff[cut]), func(b *testing.B) {
				measure(b, nil, func() func() { return e.leaseTimed(policy) })
			})
		}
		for _, cut := range []bool{false, true} {
			e := envs[cut]
			b.Run(fmt.Sprintf("end/conntrack=%d/cut=%s", table, onOff[cut]), func(b *testing.B) {
				var id string
				measure(b, func() { id = e.lease("acme", policy) }, func() func() {
					e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
					return nil
				})
			})
		}
		for _, cut := range []bool{false, true} {
			e := envs[cut]
			b.Run(fmt.Sprintf("change/conntrack=%d/cut=%s", table, onOff[cut]), func(b *testing.B) {
				id := e.lease("acme", policy)
				defer e.must(http.StatusOK, "DELETE", "/v1/sandbox/"+id, "acme", nil)
				e.startProcess("acme", id, map[string]any{"argv": []string{"python3", "-c", slowDownload, "http://" + testenv.RawIP + "/bytes/1073741824", "/tmp/n"}})
				narrow := map[string]any{"allow": []string{testenv.RawIP}}
				measure(b, nil, func() func() {
					e.must(http.StatusOK, "PUT", "/v1/sandbox/"+id+"/network", "acme", narrow)
					return nil
				})
			})
		}
	}
}
