#!/usr/bin/env bash
# kube-down.sh — stop the cluster scripts/kube-up.sh started on ROOT.
#
#   sudo scripts/kube-down.sh [--purge] [ROOT]     # ROOT defaults to /var/lib/sandbox/kube
#
# Stops kube-controller-manager and kube-scheduler, deletes the pods (so
# their sandboxes end cleanly), stops kubelet, kube-proxy (and removes its
# iptables rules), containerd, then
# kube-apiserver before etcd (the apiserver hangs on shutdown when etcd goes
# first), each with SIGTERM and SIGKILL after 10 s; then kills what is left of
# the containers this containerd started (shims, runsc sandboxes and gofers,
# runc containers: found by ROOT's socket and state paths, killed by pid),
# unmounts everything under ROOT and removes the CNI bridge; then stops the
# NetworkPolicy enforcer (kube-netpol, whose nftables table goes with it or
# is removed after it), removes the host guard's iptables chains and puts
# ip_forward back as kube-up.sh found it; a second node's parts
# (KUBE_UP_NODE=2: containerd-2, kubelet-2, netpol-2, bridge sbxkube1, cgroup
# root sandbox-node-2) go the same way. Binaries, Go
# caches, etcd data and imported images are kept, so kube-up.sh starts again
# quickly; --purge removes ROOT entirely.
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble kube-down

purge=0
ROOT=
for a in "$@"; do
	case $a in
	--purge) purge=1 ;;
	-h | --help)
		sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	-*) die "unknown flag $a" ;;
	*)
		[ -z "$ROOT" ] || die "usage: $0 [--purge] [ROOT]"
		ROOT=$a
		;;
	esac
done
ROOT=${ROOT:-/var/lib/sandbox/kube}
case $ROOT in /*) ;; *) ROOT=$(pwd)/$ROOT ;; esac
ROOT=${ROOT%/}
[ "$(id -u)" -eq 0 ] || die "must run as root (sudo $0)"
[ "$ROOT" != / ] || die "ROOT must not be /"
[ -d "$ROOT" ] || {
	step "$ROOT does not exist: nothing to do"
	exit 0
}

# pid_of NAME: the pid in ROOT/run/NAME.pid when it is a live process of ours.
pid_of() {
	local f=$ROOT/run/$1.pid pid
	[ -s "$f" ] || return 1
	pid=$(cat "$f")
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$ROOT/" || return 1
	echo "$pid"
}
# stop NAME: SIGTERM, SIGKILL after 10 s.
stop() {
	local pid
	if pid=$(pid_of "$1"); then
		kill -TERM "$pid" 2>/dev/null
		for _ in $(seq 50); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.2
		done
		if kill -0 "$pid" 2>/dev/null; then
			kill -KILL "$pid" 2>/dev/null
			step "$1 (pid $pid) killed after 10 s"
		else
			step "$1 (pid $pid) stopped"
		fi
	fi
	rm -f "$ROOT/run/$1.pid"
}
# pids_matching TEXT: pids whose command line contains TEXT (fixed string).
pids_matching() {
	local d
	for d in /proc/[0-9]*; do
		[ "${d#/proc/}" != $$ ] || continue
		tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -qF -- "$1" && echo "${d#/proc/}"
	done
}

export KUBECONFIG=$ROOT/etc/admin.kubeconfig
# Node 1's parts keep their names; a second node's (KUBE_UP_NODE=2) carry -2.
nodes=("" -2)

# 1. Pods: delete them through the apiserver while the kubelet runs, with
#    the controllers stopped first so that no Deployment (the add-ons, the
#    sandbox server) makes them again.
stop controller-manager
stop scheduler
if pid_of apiserver >/dev/null && pid_of kubelet >/dev/null && [ -x "$ROOT/bin/kubecheck" ]; then
	step "deleting all pods"
	timeout 40 "$ROOT/bin/kubecheck" deletepods -timeout 30s ||
		step "pods not all gone in 30 s (the rest is killed below)"
fi

# 2. The kubelet (nothing recreates containers after this), and kube-proxy
#    with its iptables rules.
stop kubelet
stop kubelet-2
# The second node's Node object with it (else the next start would schedule
# onto it until it is marked NotReady; kube-up.sh removes it too).
tok=$(awk -F, '$2=="admin"{print $1}' "$ROOT/pki/tokens.csv" 2>/dev/null)
if pid_of apiserver >/dev/null && [ -n "$tok" ] &&
	curl -fsS -o /dev/null --cacert "$ROOT/pki/ca.crt" -H "Authorization: Bearer $tok" \
		-X DELETE https://127.0.0.1:6443/api/v1/nodes/sandbox-node-2 2>/dev/null; then
	step "removed node sandbox-node-2"
fi
stop kube-proxy
if [ -x "$ROOT/bin/kube-proxy" ] && iptables -w -S KUBE-SERVICES -t nat >/dev/null 2>&1; then
	"$ROOT/bin/kube-proxy" --cleanup >>"$ROOT/logs/kube-proxy.log" 2>&1 && step "removed kube-proxy's iptables rules"
fi

# 3. Containers still known to containerd, then containerd.
for n in "${nodes[@]}"; do
	CTR=("$ROOT/bin/ctr" -a "$ROOT/run/containerd$n/containerd.sock" -n k8s.io)
	if pid_of "containerd$n" >/dev/null; then
		for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do
			timeout 10 "${CTR[@]}" tasks kill -s SIGKILL "$t" >/dev/null 2>&1
		done
		sleep 1
		for t in $("${CTR[@]}" tasks ls -q 2>/dev/null); do
			timeout 10 "${CTR[@]}" tasks delete -f "$t" >/dev/null 2>&1
		done
	fi
	stop "containerd$n"
done

# 4. The apiserver before etcd.
stop apiserver
stop etcd

# 4b. The enforcer, once no pod is left to protect, and its rules: a run that
#     was SIGKILLed leaves its table behind.
for n in "${nodes[@]}"; do
	stop "netpol$n"
	if [ -x "$ROOT/bin/kube-netpol" ] && "$ROOT/bin/kube-netpol" -check -table="kube-network-policies$n" 2>/dev/null; then
		"$ROOT/bin/kube-netpol" -cleanup -table="kube-network-policies$n" && step "removed kube-netpol's leftover nftables table kube-network-policies$n"
	fi
done

# 5. Leftovers of this containerd: shims (their -address is ROOT's socket),
#    runsc sandboxes/gofers (--root under ROOT), runc containers (runc state
#    under ROOT). Killed by pid, never by name.
for n in "${nodes[@]}"; do
	r=$ROOT/run/runsc$n/k8s.io
	if [ -x "$ROOT/bin/runsc" ] && [ -d "$r" ]; then
		for c in $("$ROOT/bin/runsc" --root "$r" list -quiet 2>/dev/null); do
			timeout 10 "$ROOT/bin/runsc" --root "$r" delete -force "$c" >/dev/null 2>&1
		done
	fi
	r=$ROOT/run/runc$n/k8s.io
	if command -v runc >/dev/null && [ -d "$r" ]; then
		for c in $(runc --root "$r" list -q 2>/dev/null); do
			runc --root "$r" kill "$c" KILL >/dev/null 2>&1
			timeout 10 runc --root "$r" delete -f "$c" >/dev/null 2>&1
		done
	fi
done
left=$( (for n in "${nodes[@]}"; do pids_matching "-address $ROOT/run/containerd$n/containerd.sock"; done
	pids_matching "--root=$ROOT/run/runsc"
	pids_matching "--root $ROOT/run/runsc") | sort -u)
if [ -n "$left" ]; then
	step "killing leftover shims/sandboxes: $(echo "$left" | tr "\n" " ")"
	# shellcheck disable=SC2086 # one pid a word
	kill -KILL $left 2>/dev/null
	sleep 0.5
fi

# 6. Mounts under ROOT (deepest first), the CNI bridge, per-boot state.
mnts=$(awk -v r="$ROOT/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r)
if [ -n "$mnts" ]; then
	step "unmounting $(echo "$mnts" | wc -l) mounts under $ROOT"
	for m in $mnts; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done
fi
for b in sbxkube0 sbxkube1; do
	if ip link show "$b" >/dev/null 2>&1; then
		ip link del "$b" && step "removed bridge $b"
	fi
done
# The second node's cgroup root (kube-up.sh made it, its kubelet the rest),
# deepest first.
for h in /sys/fs/cgroup /sys/fs/cgroup/*; do
	[ -d "$h/sandbox-node-2" ] || continue
	find "$h/sandbox-node-2" -depth -type d -exec rmdir {} + 2>/dev/null
	[ ! -d "$h/sandbox-node-2" ] || step "cgroup $h/sandbox-node-2 not removed (still in use?)"
done
for t in iptables ip6tables; do
	command -v $t >/dev/null || continue
	for hc in FORWARD:SBXKUBE-FWD INPUT:SBXKUBE-IN; do
		h=${hc%%:*} c=${hc#*:}
		while $t -w -D "$h" -j "$c" 2>/dev/null; do :; done
		$t -w -F "$c" 2>/dev/null && $t -w -X "$c" && step "removed host guard chain $c ($t)"
	done
done
if [ -s "$ROOT/run/ip_forward.before" ]; then
	cat "$ROOT/run/ip_forward.before" >/proc/sys/net/ipv4/ip_forward
	rm -f "$ROOT/run/ip_forward.before"
fi
# The pods are gone: their IP leases and the kubelet's fixed-path sockets too.
for n in "${nodes[@]}"; do
	rm -rf "$ROOT/var/cni-ipam$n" "$ROOT/run/runsc$n" "$ROOT/run/runc$n"
done
rm -f /var/lib/kubelet/device-plugins/kubelet.sock
rmdir /var/lib/kubelet/device-plugins /var/lib/kubelet 2>/dev/null
[ -d /var/log/containers ] && find /var/log/containers -maxdepth 1 -lname "$ROOT/*" -delete 2>/dev/null
# Fixed-path directories the kubelet and the shims create: removed when empty.
rmdir /var/log/containers /run/containerd/s /run/containerd 2>/dev/null

if [ "$purge" = 1 ]; then
	still=$(awk -v r="$ROOT/" 'index($2, r) == 1' /proc/mounts | wc -l)
	[ "$still" -eq 0 ] || die "$still mounts left under $ROOT: not purging"
	rm -rf "$ROOT"
	step "purged $ROOT"
fi
step "stopped (ROOT $ROOT)"
