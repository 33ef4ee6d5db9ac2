package networkpolicy

// This file is not kube-network-policies' own: scripts/kube-up.sh adds it to
// a copy of the module's source and makes both queue rules call xtQueue.
//
// Upstream queues packets with nftables' native queue expression, which
// needs the kernel's nft_queue (CONFIG_NFT_QUEUE). Kernels without it (this
// project's CI VMs among them) refuse the whole rule set, and the
// controller then enforces nothing. The xtables NFQUEUE target, run by
// nftables' compat expression (CONFIG_NFT_COMPAT, CONFIG_NETFILTER_XT_TARGET_NFQUEUE,
// what iptables-nft uses), queues the same packets to the same queue.

import (
	"encoding/binary"

	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
)

// xtQueue is "NFQUEUE --queue-num id [--queue-bypass]" (revision 3, struct
// xt_NFQ_info_v3: queuenum, queues_total, flags; host byte order).
func xtQueue(id int, bypass bool) expr.Any {
	info := make([]byte, 6)
	binary.NativeEndian.PutUint16(info[0:], uint16(id))
	binary.NativeEndian.PutUint16(info[2:], 1)
	if bypass {
		binary.NativeEndian.PutUint16(info[4:], 1) // NFQ_FLAG_BYPASS
	}
	u := xt.Unknown(info)
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &u}
}
