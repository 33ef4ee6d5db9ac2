#!/usr/bin/env bash
# kube-up.sh — a real single-node Kubernetes on this machine, for the kube
# runtime: etcd (Debian), kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kube-proxy (v1.37.2), containerd v2.4.2 with runc
# and gVisor (runsc + containerd-shim-runsc-v1), RuntimeClasses gvisor
# (handler runsc) and runc, a NetworkPolicy implementation
# (sigs.k8s.io/kube-network-policies v0.8.0, as kube-netpol), and as pods
# (scripts/kube/addons.yaml) cluster DNS (CoreDNS v1.15.0, the kube-dns
# Service) and a storage provisioner (rancher's local-path-provisioner
# v0.0.30, the default StorageClass local-path, volumes in ROOT/var/local-path).
# Everything is built from the Go module proxy into ROOT; the processes run
# in the background (logs in ROOT/logs, pid files in ROOT/run).
#
# A pod reaches the apiserver as on any cluster: through the kubernetes
# Service (kube-proxy routes 10.96.0.1:443 to the apiserver's address on the
# pods' bridge, 10.244.0.1:6443), with its service account's token.
#
# Network: pods sit on an isolated bridge whose host end is their gateway,
# so a NetworkPolicy that allows a destination is what lets them reach it.
# kube-netpol enforces NetworkPolicies on everything the host forwards (pod
# to pod, pod to a routed destination); a host guard (iptables chains
# SBXKUBE-FWD and SBXKUBE-IN) keeps what no policy may open shut whatever
# the policies say: pods never reach the host itself (no policy is evaluated
# for packets to the host), and the host forwards their packets only to one
# another and to interfaces named sbxt* (a test's own network namespace),
# never out of the machine. ip_forward is turned on for that (and restored
# by kube-down.sh). The one way in to the host is the apiserver reached
# through its Service, and that too is judged by the pod's NetworkPolicies
# (the guard queues it to kube-netpol): a sandbox pod under deny-all cannot
# reach it. The apiserver and the kubelet listen on every address, and the
# guard keeps their ports shut to all but loopback (and the apiserver's to
# the pods, as above). The cluster is IPv4: over IPv6 (link-local addresses
# on the bridge and in every pod) the guard lets no pod packet through.
#
#   sudo scripts/kube-up.sh [ROOT]          # ROOT defaults to /var/lib/sandbox/kube
#   scripts/kube-image.sh ROOT sandbox/exec:local /var/lib/sandbox/images/exec/rootfs
#   KUBECONFIG=ROOT/etc/admin.kubeconfig ROOT/bin/kubectl get nodes
#   sudo scripts/kube-down.sh [--purge] [ROOT]
#
# Idempotent: a second run rebuilds nothing whose version stamp matches
# (ROOT/bin/.stamp-*) and starts only the processes that are not running.
# A cold run (empty Go caches) takes about 8 minutes on 2 cores and 7.5 GB of
# disk (most of it the Go caches under ROOT/go); a warm one a few seconds.
# kube-netpol adds about 35 s to a cold run (it shares the Kubernetes build's
# client-go).
#
# Workarounds this kind of VM needs (each was an observed failure):
#  - no CAP_SYS_RESOURCE even as root: containerd restrict_oom_score_adj, and
#    the gVisor shim's oom_score_adj write is patched to be best-effort;
#  - Debian's containerd 1.6 cannot read the new shim's reply: containerd v2;
#  - cgroup v1: the kubelet needs failCgroupV1: false;
#  - a loopback-only CNI fails sandbox setup: an isolated bridge (no gateway,
#    no masquerade);
#  - exec through the apiserver needs --kubelet-preferred-address-types=InternalIP;
#  - no nft_queue in the kernel (CONFIG_NFT_QUEUE unset): kube-network-policies
#    is patched to queue with the xtables NFQUEUE target (scripts/kube/netpol/patch/xtqueue.go);
#  - versions are stamped with -X ldflags (else kubectl version cannot parse them).
#
# Environment:
#   KUBE_UP_KUBECTL=0   do not build kubectl (kubecheck is enough for the script)
#   KUBE_UP_BUILD_ONLY=1  build (or find up to date) every binary and stop: no
#                       apt, no cluster. scripts/test.sh runs it beside
#                       scripts/deps.sh on a fresh machine, where the builds
#                       are most of the half hour a cold cluster takes
#   KUBE_UP_ONLY=containerd  start containerd alone (and import the pause
#                       image) from binaries already built, and stop: exit
#                       code 3 when containerd, ctr, imgtar or pause is not
#                       built yet. It takes the start lock, not the build's,
#                       so scripts/test.sh imports the class images with it
#                       while a KUBE_UP_BUILD_ONLY=1 run builds Kubernetes
#                       (those four are that run's first builds); a later
#                       full run finds containerd running and starts the rest
#   KUBE_UP_NODE=2      add a second node to the cluster node 1's run started,
#                       on this same machine: its own containerd (ROOT/run/
#                       containerd-2), kubelet (port 10251, cgroup root
#                       /sandbox-node-2), bridge sbxkube1 with pods on
#                       10.244.1.0/24, and kube-netpol (queue 101, table
#                       kube-network-policies-2); the control plane, kube-proxy
#                       and the host guard stay node 1's (one network
#                       namespace). Builds nothing. Its images: KUBE_NODE=2
#                       scripts/kube-image.sh. kube-down.sh stops both nodes.
set -euo pipefail

K8S=v1.37.2
STAGING=v0.37.2
CTRD=v2.4.2
GVISOR=v0.0.0-20260905035102-160fafc42237
CLUSTER_CIDR=10.244.0.0/16 # a /24 per node: node N's pods on 10.244.(N-1).0/24
SERVICE_CIDR=10.96.0.0/16
PAUSE_IMAGE=registry.k8s.io/pause:sandbox-local
NETPOL=v0.8.0
COREDNS=v1.15.0
LOCALPATH=v0.0.30
POD_GW=10.244.0.1 # node 1's bridge's host end: the apiserver's address for pods
DNS_IP=10.96.0.10

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble kube-up

[ "$(id -u)" -eq 0 ] || die "must run as root (sudo $0)"
help_if_asked "$@"
ROOT=${1:-/var/lib/sandbox/kube}
[ $# -le 1 ] || die "usage: $0 [ROOT]"
case $ROOT in /*) ;; *) ROOT=$(pwd)/$ROOT ;; esac
ROOT=${ROOT%/}
KUBE_SRC=$REPO/scripts/kube

# The node this run starts (KUBE_UP_NODE): 1, the control plane's, or 2,
# a second node on this same machine, each with its own containerd, kubelet,
# bridge and pod subnet, cgroup root and kube-netpol (both in the host's one
# network namespace, so kube-proxy and the host guard are node 1's).
N=${KUBE_UP_NODE:-1}
case $N in 1 | 2) ;; *) die "KUBE_UP_NODE=$N: 1 (the control plane's node) or 2" ;; esac
sfx= # node 1 keeps the names it always had
[ "$N" = 1 ] || sfx=-$N
NODE=sandbox-node$sfx
BRIDGE=sbxkube$((N - 1))
POD_CIDR=10.244.$((N - 1)).0/24
NETPOL_QUEUE=$((99 + N))
NETPOL_TABLE=kube-network-policies$sfx
KUBELET_PORT=$((10249 + N))    # 10250, 10251
KUBELET_HEALTHZ=$((10249 - N)) # 10248, 10247
CGROUP_ROOT=/                  # node 2: /sandbox-node-2 (made below)
[ "$N" = 1 ] || CGROUP_ROOT=/$NODE
CTRD_STATE=$ROOT/run/containerd$sfx
CTRD_SOCK=$CTRD_STATE/containerd.sock

mkdir -p "$ROOT"/{bin,src,logs,etc,var,run,pki,images,cni$sfx,go}
chmod 0700 "$ROOT/pki" "$ROOT/etc"
build_only=${KUBE_UP_BUILD_ONLY:-0}
only=${KUBE_UP_ONLY:-}
case $only in "" | containerd) ;; *) die "KUBE_UP_ONLY=$only: the one part known is containerd" ;; esac
[ "$N" = 1 ] || [ "$build_only" = 0 ] || die "KUBE_UP_NODE=$N builds nothing: build with node 1's run"
# A build (KUBE_UP_BUILD_ONLY=1) and a start take different locks, so that
# containerd can start (KUBE_UP_ONLY=containerd) while Kubernetes builds; a
# full run of node 1 takes both. Node 2 builds nothing and has its own.
if [ "$build_only" = 1 ]; then
	exec 9>"$ROOT/run/kube-build.lock"
	flock -n 9 || die "another build of kube-up.sh is running on $ROOT"
else
	exec 9>"$ROOT/run/kube-up$sfx.lock"
	flock -n 9 || die "another kube-up.sh is running on $ROOT (node $N)"
	if [ -z "$only" ] && [ "$N" = 1 ]; then
		exec 7>"$ROOT/run/kube-build.lock"
		flock -n 7 || die "a build of kube-up.sh (KUBE_UP_BUILD_ONLY=1) is running on $ROOT: wait for it"
	fi
fi

# ---------------------------------------------------------------- Go
gobin=$(find_go) || die "no Go >= 1.21 found: run scripts/deps.sh first"
PATH="$(dirname "$gobin"):$ROOT/bin:/usr/sbin:/usr/bin:/sbin:/bin:$PATH"
export PATH
root_go_env
gover=$(cd / && go env GOVERSION)
gominor=${gover#go1.}
gominor=${gominor%%[!0-9]*}
if [ "${gominor:-0}" -lt 26 ]; then
	# Kubernetes 1.37 and this gVisor need Go 1.26: fetch it through the proxy.
	export GOTOOLCHAIN=go1.26.8
	step "local $gover is older than go1.26: using GOTOOLCHAIN=$GOTOOLCHAIN"
fi

srchash() { cat "$@" | sha256sum | cut -c1-16; }

# ---------------------------------------------------------------- apt
pkgs=(runc etcd-server containernetworking-plugins iproute2 iptables openssl util-linux busybox-static curl)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "$build_only" = 1 ]; then
	step "build only: apt packages left to the run that starts the cluster"
elif [ ${#missing[@]} -gt 0 ]; then
	step "apt-get install ${missing[*]}"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
	step "apt packages present (${pkgs[*]})"
fi
[ "$build_only" = 1 ] || for b in runc etcd iptables /bin/busybox /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback; do
	command -v "$b" >/dev/null || die "$b not found after apt-get install"
done

# ---------------------------------------------------------------- builds
# containerd, ctr and imgtar first: with them, scripts/test.sh imports the
# class images (KUBE_UP_ONLY=containerd, below) while Kubernetes still builds.
CTRD_BINS=(containerd containerd-shim-runc-v2 ctr)
TOOLS_STAMP="src=$(srchash "$KUBE_SRC/imgtar/main.go" "$KUBE_SRC/pause/main.go")"
builds() {
	if need_build containerd "$CTRD" "${CTRD_BINS[@]}"; then
		step "go build: containerd $CTRD"
		d=$ROOT/src/containerd
		mkdir -p "$d"
		(
			cd "$d"
			printf 'module sandboxkube/containerd\n\ngo 1.26.0\n\nrequire github.com/containerd/containerd/v2 %s\n' "$CTRD" >go.mod
			{
				printf '//go:build tools\n\npackage tools\n\nimport (\n'
				printf '\t_ "github.com/containerd/containerd/v2/cmd/%s"\n' "${CTRD_BINS[@]}"
				printf ')\n'
			} >tools.go
			quiet go mod tidy
			pkgs=()
			for b in "${CTRD_BINS[@]}"; do pkgs+=("github.com/containerd/containerd/v2/cmd/$b"); done
			quiet go build -trimpath -tags "no_btrfs no_devmapper no_zfs" \
				-ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CTRD" -o "$ROOT/bin/" "${pkgs[@]}"
		)
		set_stamp containerd "$CTRD"
	else
		step "containerd $CTRD binaries up to date"
	fi

	if need_build tools "$TOOLS_STAMP" imgtar pause; then
		step "go build: imgtar, pause (scripts/kube)"
		for t in imgtar pause; do
			mkdir -p "$ROOT/src/$t"
			cp "$KUBE_SRC/$t/main.go" "$ROOT/src/$t/main.go"
			printf 'module sandboxkube/%s\n\ngo 1.21\n' "$t" >"$ROOT/src/$t/go.mod"
			(cd "$ROOT/src/$t" && quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/$t" .)
		done
		set_stamp tools "$TOOLS_STAMP"
	fi

	K8S_BINS=(kube-apiserver kubelet kube-scheduler kube-controller-manager)
	[ "${KUBE_UP_KUBECTL:-1}" = 0 ] || K8S_BINS+=(kubectl)
	K8S_STAMP="$K8S staging=$STAGING"
	KC_STAMP="$K8S_STAMP src=$(srchash "$KUBE_SRC/kubecheck/main.go")"

	# k8s_module: ROOT/src/k8s, a module requiring k8s.io/kubernetes with every
	# staging module replaced by its published version.
	k8s_module() {
		local d=$ROOT/src/k8s mod
		mkdir -p "$d/cmd/kubecheck"
		cp "$KUBE_SRC/kubecheck/main.go" "$d/cmd/kubecheck/main.go"
		(
			cd "$d"
			quiet go mod download "k8s.io/kubernetes@$K8S"
			mod=$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S.mod
			[ -s "$mod" ] || die "no $mod after go mod download"
			{
				printf 'module sandboxkube/k8s\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$K8S"
				grep '=> ./staging/' "$mod" | awk -v v="$STAGING" '{printf "\t%s => %s %s\n", $1, $1, v}'
				printf ')\n'
			} >go.mod
			{
				printf '//go:build tools\n\npackage tools\n\nimport (\n'
				printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' kube-apiserver kubelet kube-scheduler kube-controller-manager kube-proxy kubectl
				printf ')\n'
			} >tools.go
			quiet go mod tidy
		)
}

if need_build k8s "$K8S_STAMP" "${K8S_BINS[@]}" || need_build kubecheck "$KC_STAMP" kubecheck ||
	need_build kube-proxy "$K8S_STAMP" kube-proxy; then
	step "go: module for kubernetes $K8S (staging $STAGING)"
	k8s_module
fi
k8s_ldflags() {
	local minor v ld="-s -w"
	minor=$(echo "$K8S" | cut -d. -f2)
	for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
		ld+=" -X $v.gitVersion=$K8S -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
	done
	printf '%s' "$ld"
}
if need_build k8s "$K8S_STAMP" "${K8S_BINS[@]}"; then
	step "go build: ${K8S_BINS[*]} (the long step, ~5 min cold)"
	pkgs=()
	for b in "${K8S_BINS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$b"); done
	(cd "$ROOT/src/k8s" && quiet go build -trimpath -ldflags="$(k8s_ldflags)" -o "$ROOT/bin/" "${pkgs[@]}")
	set_stamp k8s "$K8S_STAMP"
else
	step "kubernetes $K8S binaries up to date"
fi
# kube-proxy on a stamp of its own, so that adding it rebuilt nothing else.
if need_build kube-proxy "$K8S_STAMP" kube-proxy; then
	step "go build: kube-proxy $K8S"
	(cd "$ROOT/src/k8s" && quiet go build -trimpath -ldflags="$(k8s_ldflags)" -o "$ROOT/bin/" k8s.io/kubernetes/cmd/kube-proxy)
	set_stamp kube-proxy "$K8S_STAMP"
fi
if need_build kubecheck "$KC_STAMP" kubecheck; then
	step "go build: kubecheck (scripts/kube/kubecheck)"
	(cd "$ROOT/src/k8s" && quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/kubecheck" ./cmd/kubecheck)
	set_stamp kubecheck "$KC_STAMP"
fi

# The pinned runsc's recipe (scripts/deps.sh: its seccomp programs compiled
# in) is part of the stamp: the node's runsc is a copy of it when there is one.
GV_PINNED=/usr/local/libexec/sandbox/runsc-${GVISOR#v0.0.0-}
GV_STAMP="$GVISOR oom-best-effort-1 $(cat "$GV_PINNED.recipe" 2>/dev/null || echo no-pinned)"
if need_build gvisor "$GV_STAMP" runsc containerd-shim-runsc-v1; then
	step "go build: gVisor $GVISOR (runsc, containerd-shim-runsc-v1; shim patched)"
	d=$ROOT/src/gvisor
	mkdir -p "$d"
	(
		cd "$d"
		src=$(go mod download -json "gvisor.dev/gvisor@$GVISOR" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$src" ] || die "go mod download gvisor.dev/gvisor@$GVISOR gave no directory"
		rm -rf src
		cp -r "$src" src
		chmod -R u+w src
		# No CAP_SYS_RESOURCE here: the shim's unconditional oom_score_adj write
		# fails; make it best-effort and silent (containerd parses the shim's output).
		f=src/pkg/shim/v1/manager.go
		old='return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)'
		grep -qF "$old" "$f" || die "gVisor patch: the line to patch is not in $f"
		sed -i 's|return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)|_ = err // best effort: no CAP_SYS_RESOURCE on some hosts|' "$f"
		! grep -qF "$old" "$f" || die "gVisor patch did not apply to $f"
		printf 'module sandboxkube/gvisor\n\ngo 1.26.0\n\nrequire gvisor.dev/gvisor %s\n\nreplace gvisor.dev/gvisor => ./src\n' "$GVISOR" >go.mod
		printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "gvisor.dev/gvisor/runsc"\n\t_ "gvisor.dev/gvisor/shim"\n)\n' >tools.go
		quiet go mod tidy
		# The pinned runsc scripts/deps.sh built (the same version; the patch
		# is the shim's alone) saves this build a second sentry: ~1.5 CPU
		# minutes of a fresh machine, where both scripts build at once.
		if [ -x "$GV_PINNED" ] && "$GV_PINNED" --version >/dev/null 2>&1; then
			install -m 0755 "$GV_PINNED" "$ROOT/bin/runsc"
		else
			quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/runsc" gvisor.dev/gvisor/runsc
		fi
		quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/containerd-shim-runsc-v1" gvisor.dev/gvisor/shim
	)
	set_stamp gvisor "$GV_STAMP"
else
	step "gVisor binaries up to date"
fi

# kube-network-policies: its source copied and patched (xtqueue.go), built
# with our main (a kubeconfig, no NRI) against the Kubernetes build's
# client-go, so most of it is in the Go cache already.
NP_STAMP="$NETPOL $STAGING patch=2 src=$(srchash "$KUBE_SRC/netpol/main.go" "$KUBE_SRC/netpol/patch/xtqueue.go")"
if need_build netpol "$NP_STAMP" kube-netpol; then
	step "go build: kube-network-policies $NETPOL (kube-netpol; queue patched)"
	d=$ROOT/src/netpol
	mkdir -p "$d/cmd/kube-netpol"
	(
		cd "$d"
		src=$(go mod download -json "sigs.k8s.io/kube-network-policies@$NETPOL" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
		[ -d "$src" ] || die "go mod download sigs.k8s.io/kube-network-policies@$NETPOL gave no directory"
		rm -rf src
		cp -r "$src" src
		chmod -R u+w src
		cp "$KUBE_SRC/netpol/patch/xtqueue.go" src/pkg/networkpolicy/zz_xtqueue.go
		f=src/pkg/networkpolicy/controller.go
		old='queue := &expr.Queue{Num: uint16(c.config.QueueID)}'
		[ "$(grep -cF "$old" "$f")" = 2 ] || die "kube-network-policies patch: the two queue rules are not in $f"
		# Each "queue := ...; if FailOpen { queue.Flag = bypass }" becomes one call.
		sed -i -e 's|queue := &expr.Queue{Num: uint16(c.config.QueueID)}|queue := xtQueue(c.config.QueueID, c.config.FailOpen)|' \
			-e '/^\tif c.config.FailOpen {$/{N;N;/queue.Flag = expr.QueueFlagBypass/d}' "$f"
		! grep -qF 'expr.QueueFlagBypass' "$f" || die "kube-network-policies patch did not apply to $f"
		# Without NRI, upstream looks a pod up in a nil NRI plugin for every
		# packet to an address that is no pod's (and crashes, dropping all).
		f=src/pkg/networkpolicy/nri.go
		old='func (p *nriPlugin) GetPodFromIP(ip string) string {'
		grep -qxF "$old" "$f" || die "kube-network-policies patch: GetPodFromIP is not in $f"
		sed -i "/^func (p \*nriPlugin) GetPodFromIP(ip string) string {\$/a\\\tif p == nil {\\n\\t\\treturn \"\" // NRI disabled\\n\\t}" "$f"
		grep -qF 'return "" // NRI disabled' "$f" || die "kube-network-policies patch did not apply to $f"
		cp "$KUBE_SRC/netpol/main.go" cmd/kube-netpol/main.go
		{
			printf 'module sandboxkube/netpol\n\ngo 1.26.0\n\nrequire (\n\tsigs.k8s.io/kube-network-policies %s\n' "$NETPOL"
			printf '\t%s %s\n' k8s.io/api "$STAGING" k8s.io/apimachinery "$STAGING" k8s.io/client-go "$STAGING" k8s.io/component-base "$STAGING" k8s.io/component-helpers "$STAGING"
			printf ')\n\nreplace sigs.k8s.io/kube-network-policies => ./src\n'
		} >go.mod
		quiet go mod tidy
		quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/kube-netpol" ./cmd/kube-netpol
	)
	set_stamp netpol "$NP_STAMP"
else
	step "kube-netpol ($NETPOL) up to date"
fi

# CoreDNS with the plugins the cluster DNS uses (scripts/kube/coredns), and
# the local-path provisioner, both against the Kubernetes build's client-go.
DNS_STAMP="$COREDNS $STAGING src=$(srchash "$KUBE_SRC/coredns/main.go")"
if need_build coredns "$DNS_STAMP" coredns; then
	step "go build: CoreDNS $COREDNS (scripts/kube/coredns; ~2.5 min cold)"
	d=$ROOT/src/coredns
	mkdir -p "$d"
	cp "$KUBE_SRC/coredns/main.go" "$d/main.go"
	(
		cd "$d"
		{
			printf 'module sandboxkube/coredns\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/coredns/coredns %s\n' "$COREDNS"
			printf '\t%s %s\n' k8s.io/api "$STAGING" k8s.io/apimachinery "$STAGING" k8s.io/client-go "$STAGING"
			printf ')\n'
		} >go.mod
		quiet go mod tidy
		quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/coredns" .
	)
	set_stamp coredns "$DNS_STAMP"
fi
LP_STAMP="$LOCALPATH $STAGING"
if need_build local-path "$LP_STAMP" local-path-provisioner; then
	step "go build: local-path-provisioner $LOCALPATH"
	d=$ROOT/src/local-path
	mkdir -p "$d"
	(
		cd "$d"
		{
			printf 'module sandboxkube/localpath\n\ngo 1.26.0\n\nrequire (\n\tgithub.com/rancher/local-path-provisioner %s\n' "$LOCALPATH"
			printf '\t%s %s\n' k8s.io/api "$STAGING" k8s.io/apimachinery "$STAGING" k8s.io/client-go "$STAGING"
			printf ')\n'
		} >go.mod
		printf '//go:build tools\n\npackage tools\n\nimport _ "github.com/rancher/local-path-provisioner"\n' >tools.go
		quiet go mod tidy
		quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/local-path-provisioner" github.com/rancher/local-path-provisioner
	)
	set_stamp local-path "$LP_STAMP"
fi
}
if [ "$only" = containerd ]; then
	# Nothing is built here: a build may be under way beside this run.
	if need_build containerd "$CTRD" "${CTRD_BINS[@]}" || need_build tools "$TOOLS_STAMP" imgtar pause; then
		printf '[kube-up] containerd, ctr, imgtar or pause is not built yet (KUBE_UP_ONLY=containerd builds nothing)\n' >&2
		exit 3
	fi
elif [ "$N" != 1 ]; then
	for b in containerd ctr imgtar pause kubelet kube-netpol kubecheck runsc containerd-shim-runsc-v1; do
		[ -x "$ROOT/bin/$b" ] || die "$ROOT/bin/$b is not built: run scripts/kube-up.sh $ROOT (node 1) first"
	done
else
	builds
fi

if [ "$build_only" = 1 ]; then
	step "build only: every binary is up to date in $ROOT/bin"
	exit 0
fi

# ---------------------------------------------------------------- pki, configs
step "pki and configs in $ROOT/pki, $ROOT/etc"
P=$ROOT/pki
umask 077
if [ ! -s "$P/ca.crt" ]; then
	openssl req -x509 -new -nodes -newkey rsa:2048 -days 3650 -keyout "$P/ca.key" -out "$P/ca.crt" \
		-subj "/CN=sandbox-kube-ca" -addext "basicConstraints=critical,CA:TRUE" \
		-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
	rm -f "$P/apiserver.crt" "$P/kubelet-client.crt"
fi
# cert NAME SUBJ EXT: a leaf signed by the CA.
cert() {
	[ -s "$P/$1.crt" ] && return 0
	openssl req -new -nodes -newkey rsa:2048 -keyout "$P/$1.key" -out "$P/$1.csr" -subj "$2" 2>/dev/null
	printf '%s\n' "$3" >"$P/$1.ext"
	openssl x509 -req -in "$P/$1.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial -days 3650 \
		-extfile "$P/$1.ext" -out "$P/$1.crt" 2>/dev/null
	rm -f "$P/$1.csr" "$P/$1.ext"
}
cert apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,IP:${SERVICE_CIDR%.0.0/*}.0.1,IP:$POD_GW,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
# The apiserver's client certificate towards the kubelet (exec, logs).
cert kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
[ -s "$P/sa.key" ] || openssl genrsa -out "$P/sa.key" 2048 2>/dev/null
[ -s "$P/sa.pub" ] || openssl rsa -in "$P/sa.key" -pubout -out "$P/sa.pub" 2>/dev/null
[ -s "$P/tokens.csv" ] || printf '%s,admin,admin,system:masters\n' "$(openssl rand -hex 24)" >"$P/tokens.csv"
# A token for each node there may be (the apiserver reads the file when it
# starts: one added while it runs needs a restart, which node 2's run says).
new_token=
for n in sandbox-node sandbox-node-2; do
	grep -qF ",system:node:$n," "$P/tokens.csv" && continue
	printf '%s,system:node:%s,node-%s,system:nodes\n' "$(openssl rand -hex 24)" "$n" "$n" >>"$P/tokens.csv"
	new_token=$n
done
admin_token=$(awk -F, '$2=="admin"{print $1}' "$P/tokens.csv")
node_token=$(awk -F, -v u="system:node:$NODE" '$2==u{print $1}' "$P/tokens.csv")
[ -n "$admin_token" ] && [ -n "$node_token" ] || die "$P/tokens.csv lacks the admin or node token (remove it to regenerate)"
ca_data=$(base64 -w0 <"$P/ca.crt")
mkkc() { # mkkc USER TOKEN > FILE
	cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandbox-kube
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority-data: $ca_data
users:
- name: $1
  user:
    token: $2
contexts:
- name: $1@sandbox-kube
  context: {cluster: sandbox-kube, user: $1}
current-context: $1@sandbox-kube
EOF
}
mkkc admin "$admin_token" >"$ROOT/etc/admin.kubeconfig"
mkkc "system:node:$NODE" "$node_token" >"$ROOT/etc/kubelet$sfx.kubeconfig"
umask 022

cat >"$ROOT/cni$sfx/10-sandbox-kube.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "sandbox-kube",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "isDefaultGateway": true, "ipMasq": false,
      "ipam": {"type": "host-local", "ranges": [[{"subnet": "$POD_CIDR"}]], "dataDir": "$ROOT/var/cni-ipam$sfx"}
    }
  ]
}
EOF
cat >"$ROOT/etc/runsc$sfx.toml" <<EOF
binary_name = "$ROOT/bin/runsc"
root = "$ROOT/run/runsc$sfx"
[runsc_config]
  platform = "systrap"
  # As the gVisor backend runs its sandboxes (docs/operating.md, Bursts):
  # no stub spinning a core that the node's other pods want.
  systrap-disable-fast-path = "true"
EOF
mkdir -p "$ROOT/etc/certs.d"
cat >"$ROOT/etc/containerd$sfx.toml" <<EOF
version = 3
root = "$ROOT/var/containerd$sfx"
state = "$CTRD_STATE"
[grpc]
  address = "$CTRD_SOCK"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  # Registry hosts (HOST:PORT/hosts.toml), read at each pull: the tests put
  # their registry's here (plain HTTP, in a network namespace of theirs).
  [plugins.'io.containerd.cri.v1.images'.registry]
    config_path = "$ROOT/etc/certs.d"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  enable_cdi = false
  # no CAP_SYS_RESOURCE: the pause container's oom_score_adj=-998 would fail
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        Root = "$ROOT/run/runc$sfx"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
      runtime_type = "io.containerd.runsc.v1"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
        TypeUrl = "io.containerd.runsc.v1.options"
        ConfigPath = "$ROOT/etc/runsc$sfx.toml"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "$ROOT/cni$sfx"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
EOF
cat >"$ROOT/etc/kubelet$sfx.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$CTRD_SOCK
port: $KUBELET_PORT
healthzPort: $KUBELET_HEALTHZ
cgroupRoot: $CGROUP_ROOT
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
# Only the apiserver (client certificate from the cluster CA) or a token the
# apiserver accepts may use the kubelet API; requests are authorized by it.
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $P/ca.crt}
authorization: {mode: Webhook}
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
resolvConf: ""
clusterDNS: [$DNS_IP]
clusterDomain: cluster.local
podLogsDir: $ROOT/var/log/pods$sfx
EOF

# ---------------------------------------------------------------- processes
# running NAME: the pid file names a live process of ours (its command line
# mentions ROOT).
running() {
	local f=$ROOT/run/$1.pid pid
	[ -s "$f" ] || return 1
	pid=$(cat "$f")
	kill -0 "$pid" 2>/dev/null || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF "$ROOT/"
}
# start NAME CMD...: start CMD in its own session unless NAME is running.
start() {
	local name=$1
	shift
	if running "$name"; then
		step "$name already running (pid $(cat "$ROOT/run/$name.pid"))"
		return 0
	fi
	printf '\n==== %s start %s\n' "$(date -u +%FT%TZ)" "$*" >>"$ROOT/logs/$name.log"
	# Own session (survives the caller's terminal), without the locks' fds 9, 7.
	# The process writes its own pid before it becomes the program: under job
	# control a background job leads its process group, so setsid forks and
	# $! is a parent that exits at once.
	local pidf=$ROOT/run/$name.pid
	rm -f "$pidf"
	setsid sh -c 'echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec "$@"' "$pidf" "$@" >>"$ROOT/logs/$name.log" 2>&1 </dev/null 9>&- 7>&- &
	for _ in $(seq 50); do
		[ -s "$pidf" ] && break
		sleep 0.1
	done
	[ -s "$pidf" ] || die "$name did not start (log $ROOT/logs/$name.log)"
	step "$name started (pid $(cat "$pidf"), log $ROOT/logs/$name.log)"
}
# alive NAME: fail with the log's tail when NAME died.
alive() {
	running "$1" && return 0
	# Asked once more: read while the process execs, /proc/PID/cmdline can
	# be empty for a moment (seen once: a containerd that came up and ran
	# was called dead here, 1 s into a start).
	sleep 0.5
	running "$1" && return 0
	tail -n 30 "$ROOT/logs/$1.log" >&2 || true
	die "$1 is not running (log $ROOT/logs/$1.log)"
}

ports="2379 2380 6443 10249 10250 10256 10257 10259"
[ "$N" = 1 ] || ports="$KUBELET_PORT $KUBELET_HEALTHZ"
for port in $ports; do
	owner=$(ss -Hltnp "sport = :$port" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n1)
	[ -z "$owner" ] && continue
	grep -qF "$ROOT/" "/proc/$owner/cmdline" 2>/dev/null ||
		die "port $port is taken by pid $owner ($(tr '\0' ' ' </proc/"$owner"/cmdline | cut -c1-100))"
done

cd "$ROOT"
if [ "$only" != containerd ] && [ "$N" = 1 ]; then
	start etcd etcd --name sandbox-kube --data-dir "$ROOT/var/etcd" \
		--listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
		--listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
		--initial-cluster sandbox-kube=http://127.0.0.1:2380
	# The audit log records the exec subresource's requests (their URIs) as a
	# cluster's audit would: the tests read it for what must not be there (a
	# command's environment). Nothing else is audited.
	cat >"$ROOT/etc/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources: [{group: "", resources: [pods/exec]}]
- level: None
EOF
	# Every address (the pods reach it on the bridge, which comes up with the
	# first pod); the host guard keeps the port shut to anything but loopback
	# and the pods. The kubernetes Service's endpoint is the bridge's address.
	start apiserver "$ROOT/bin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
		--bind-address=0.0.0.0 --secure-port=6443 --advertise-address="$POD_GW" \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
		--token-auth-file="$P/tokens.csv" --authorization-mode=Node,RBAC \
		--service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$P/sa.pub" \
		--service-account-signing-key-file="$P/sa.key" --service-cluster-ip-range="$SERVICE_CIDR" \
		--allow-privileged=true --kubelet-preferred-address-types=InternalIP \
		--kubelet-client-certificate="$P/kubelet-client.crt" --kubelet-client-key="$P/kubelet-client.key" \
		--profiling=false --audit-policy-file="$ROOT/etc/audit-policy.yaml" \
		--audit-log-path="$ROOT/logs/audit.log" --audit-log-maxsize=50 --audit-log-maxbackup=1
fi
start "containerd$sfx" "$ROOT/bin/containerd" --config "$ROOT/etc/containerd$sfx.toml"
for _ in $(seq 150); do
	[ -S "$CTRD_SOCK" ] && "$ROOT/bin/ctr" -a "$CTRD_SOCK" version >/dev/null 2>&1 && break
	alive "containerd$sfx"
	sleep 0.2
done
CTR=("$ROOT/bin/ctr" -a "$CTRD_SOCK" -n k8s.io)
"${CTR[@]}" version >/dev/null 2>&1 || die "containerd does not answer on $CTRD_SOCK"

pause_id=$(sha256sum "$ROOT/bin/pause" | cut -c1-16)
if ! "${CTR[@]}" images ls -q "labels.\"org.sandboxd.pause\"==$pause_id" 2>/dev/null | grep -q .; then
	step "import $PAUSE_IMAGE (Go pause)"
	rm -rf "$ROOT/images/pause-rootfs"
	mkdir -p "$ROOT/images/pause-rootfs"
	cp "$ROOT/bin/pause" "$ROOT/images/pause-rootfs/pause"
	"$ROOT/bin/imgtar" -ref "$PAUSE_IMAGE" -cmd /pause -tmp "$ROOT/images" "$ROOT/images/pause-rootfs" 2>/dev/null |
		"${CTR[@]}" images import --label "org.sandboxd.pause=$pause_id" - >/dev/null 2>"$ROOT/logs/pause-import.log" || {
		cat "$ROOT/logs/pause-import.log" >&2
		die "pause image import failed"
	}
fi

if [ "$only" = containerd ]; then
	step "containerd up (KUBE_UP_ONLY=containerd; the rest starts on a run without it)"
	exit 0
fi

# The host guard, before ip_forward is on and before any pod starts (see the
# top): one chain per hook, jumped to first.
guard() {
	local c t
	for t in iptables ip6tables; do
		for c in SBXKUBE-FWD SBXKUBE-IN; do
			$t -w -N "$c" 2>/dev/null || $t -w -F "$c"
		done
	done
	# pod to pod (bridged, seen here through br_netfilter): kube-netpol decides
	# (bridged within a node, routed between the nodes' bridges sbxkube0, sbxkube1)
	iptables -w -A SBXKUBE-FWD -i 'sbxkube+' -o 'sbxkube+' -j RETURN
	iptables -w -A SBXKUBE-FWD -i 'sbxkube+' -o 'sbxt+' -j RETURN
	iptables -w -A SBXKUBE-FWD -i 'sbxt+' -o 'sbxkube+' -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
	iptables -w -A SBXKUBE-FWD -i 'sbxkube+' -j DROP
	iptables -w -A SBXKUBE-FWD -o 'sbxkube+' -j DROP
	# to the host itself: answers to what the host started, and the
	# apiserver through its Service, as kube-netpol judges it (the queue has
	# no bypass: with no enforcer reading it, nothing passes), each node's
	# pods to their node's kube-netpol (queue 99+N), which knows their policies
	iptables -w -A SBXKUBE-IN -i 'sbxkube+' -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN
	for n in 1 2; do
		iptables -w -A SBXKUBE-IN -i "sbxkube$((n - 1))" -d "$POD_GW" -p tcp --dport 6443 -m conntrack --ctstate NEW \
			--ctorigdst "${SERVICE_CIDR%.0.0/*}.0.1" --ctorigdstport 443 -j NFQUEUE --queue-num "$((99 + n))"
	done
	iptables -w -A SBXKUBE-IN -i 'sbxkube+' -j DROP
	# the apiserver and the kubelet listen on every address: only loopback
	# (the apiserver reaches the kubelet at the node's address, from this
	# host) and the pods (whose packets were judged above)
	iptables -w -A SBXKUBE-IN -i lo -p tcp -m multiport --dports 6443,10250,10251 -j RETURN
	iptables -w -A SBXKUBE-IN -p tcp -m multiport --dports 6443,10250,10251 -j DROP
	# IPv6: the cluster is IPv4, but the bridge, every pod's interface and
	# gVisor's copy of it have link-local addresses, and the apiserver
	# listens on [::] too. No pod packet over IPv6 goes anywhere (bridged
	# ones pass here: bridge-nf-call-ip6tables), nor do the two ports
	# answer off loopback.
	ip6tables -w -A SBXKUBE-FWD -i 'sbxkube+' -j DROP
	ip6tables -w -A SBXKUBE-FWD -o 'sbxkube+' -j DROP
	ip6tables -w -A SBXKUBE-IN -i 'sbxkube+' -j DROP
	ip6tables -w -A SBXKUBE-IN -i lo -p tcp -m multiport --dports 6443,10250,10251 -j RETURN
	ip6tables -w -A SBXKUBE-IN -p tcp -m multiport --dports 6443,10250,10251 -j DROP
	[ "$(cat /proc/sys/net/bridge/bridge-nf-call-ip6tables 2>/dev/null)" = 1 ] ||
		die "net.bridge.bridge-nf-call-ip6tables is not 1: bridged IPv6 between pods would pass the guard"
	guard_first
}
# guard_first: the guard's chains are jumped to first, before kube-proxy's
# (which it prepends when it starts), in both families.
guard_first() {
	local hook c t
	for t in iptables ip6tables; do
		for hook in FORWARD:SBXKUBE-FWD INPUT:SBXKUBE-IN; do
			c=${hook#*:}
			while $t -w -D "${hook%%:*}" -j "$c" 2>/dev/null; do :; done
			$t -w -I "${hook%%:*}" 1 -j "$c"
		done
	done
}
if [ "$N" = 1 ]; then
	step "host guard (iptables SBXKUBE-FWD, SBXKUBE-IN), ip_forward"
	guard # under set -e: a rule that fails stops the script
	[ -s "$ROOT/run/ip_forward.before" ] || cat /proc/sys/net/ipv4/ip_forward >"$ROOT/run/ip_forward.before"
	echo 1 >/proc/sys/net/ipv4/ip_forward
else
	# Node 2 joins node 1's cluster: its control plane, guard and kube-proxy.
	running apiserver || die "node 1 is not up: run scripts/kube-up.sh $ROOT first"
	[ -z "$new_token" ] || die "the apiserver started before $P/tokens.csv named $new_token: restart the cluster (scripts/kube-down.sh, scripts/kube-up.sh)"
	iptables -w -C FORWARD -j SBXKUBE-FWD 2>/dev/null || die "node 1's host guard is not in place: run scripts/kube-up.sh $ROOT"
	# The kubelet wants its cgroup root to exist (cgroupfs driver): in each
	# v1 hierarchy, or in the unified one.
	if [ -e /sys/fs/cgroup/cgroup.controllers ]; then
		mkdir -p "/sys/fs/cgroup$CGROUP_ROOT"
	else
		for h in /sys/fs/cgroup/*/; do
			[ -e "$h/cgroup.procs" ] && mkdir -p "$h${CGROUP_ROOT#/}"
		done
	fi
fi

step "waiting for the apiserver"
alive etcd
alive apiserver
export KUBECONFIG=$ROOT/etc/admin.kubeconfig
kubecheck readyz -timeout 2m || {
	tail -n 20 "$ROOT/logs/apiserver.log" >&2
	die "apiserver not ready"
}
# A second node's Node object outlives its kubelet (etcd's data is kept):
# until the node controller marks it NotReady, pods would be scheduled onto
# a node that is not there. Without its kubelet it goes.
if [ "$N" = 1 ] && ! running kubelet-2 &&
	curl -fsS -o /dev/null --cacert "$P/ca.crt" -H "Authorization: Bearer $admin_token" \
		-X DELETE https://127.0.0.1:6443/api/v1/nodes/sandbox-node-2 2>/dev/null; then
	step "removed node sandbox-node-2 (an earlier run's; its kubelet is not running)"
fi
# The enforcer before the kubelet: no pod runs before its policies do.
start "netpol$sfx" "$ROOT/bin/kube-netpol" -kubeconfig="$ROOT/etc/admin.kubeconfig" -hostname-override="$NODE" \
	-nfqueue-id="$NETPOL_QUEUE" -table="$NETPOL_TABLE"
for _ in $(seq 150); do
	"$ROOT/bin/kube-netpol" -check -table="$NETPOL_TABLE" && break
	alive "netpol$sfx"
	sleep 0.2
done
"$ROOT/bin/kube-netpol" -check -table="$NETPOL_TABLE" || die "kube-netpol installed no nftables rules (log $ROOT/logs/netpol$sfx.log)"
since=0
running "kubelet$sfx" || since=$(($(date +%s) - 1)) # a new kubelet: its own report of Ready, not the last one's
start "kubelet$sfx" "$ROOT/bin/kubelet" --config="$ROOT/etc/kubelet$sfx.yaml" --kubeconfig="$ROOT/etc/kubelet$sfx.kubeconfig" \
	--root-dir="$ROOT/var/kubelet$sfx" --cert-dir="$P/kubelet$sfx" --hostname-override="$NODE"
if [ "$N" != 1 ]; then
	step "waiting for node $NODE Ready"
	if ! kubecheck wait -node "$NODE" -since "$since" -timeout 3m; then
		for p in "kubelet$sfx" "containerd$sfx" "netpol$sfx"; do alive "$p"; done
		tail -n 20 "$ROOT/logs/kubelet$sfx.log" >&2
		die "node $NODE not Ready"
	fi
	for p in "containerd$sfx" "netpol$sfx" "kubelet$sfx"; do alive "$p"; done
	step "node $NODE ready (import images into it: KUBE_NODE=$N scripts/kube-image.sh $ROOT NAME:TAG DIR)"
	exit 0
fi
start scheduler "$ROOT/bin/kube-scheduler" --kubeconfig="$ROOT/etc/admin.kubeconfig" --leader-elect=false \
	--bind-address=127.0.0.1 --profiling=false
start controller-manager "$ROOT/bin/kube-controller-manager" --kubeconfig="$ROOT/etc/admin.kubeconfig" \
	--leader-elect=false --bind-address=127.0.0.1 --profiling=false \
	--service-account-private-key-file="$P/sa.key" --root-ca-file="$P/ca.crt" --use-service-account-credentials=false

# Service routing in iptables mode. No NodePort on loopback (that needs
# route_localnet, which would let the pods' packets reach 127.0.0.1), and a
# NodePort from outside meets the host guard. No conntrack sysctls: this VM
# may not let them be set.
start kube-proxy "$ROOT/bin/kube-proxy" --kubeconfig="$ROOT/etc/admin.kubeconfig" --hostname-override="$NODE" \
	--proxy-mode=iptables --cluster-cidr="$CLUSTER_CIDR" --conntrack-max-per-core=0 --iptables-localhost-nodeports=false \
	--metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256

step "waiting for node $NODE Ready and the default service account"
if ! kubecheck wait -node "$NODE" -since "$since" -timeout 3m; then
	for p in kubelet controller-manager containerd netpol; do alive "$p"; done
	tail -n 20 "$ROOT/logs/kubelet.log" >&2
	die "node $NODE not Ready"
fi
kubecheck runtimeclasses gvisor=runsc runc=runc
for p in etcd apiserver containerd netpol kubelet scheduler controller-manager kube-proxy; do alive "$p"; done
# kube-proxy prepends its jumps when it first syncs, each family on its own
# and after the other: put the guard back in front until both are synced and
# it stays first (kube-proxy only re-adds a jump that is missing).
guard_is_first() {
	local t
	for t in iptables ip6tables; do
		$t -w -C FORWARD -m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD 2>/dev/null || return 1
		[ "$($t -w -S FORWARD | sed -n 2p)" = "-A FORWARD -j SBXKUBE-FWD" ] || return 1
		[ "$($t -w -S INPUT | sed -n 2p)" = "-A INPUT -j SBXKUBE-IN" ] || return 1
	done
}
for _ in $(seq 100); do
	guard_first
	sleep 0.2
	guard_is_first && break
done
guard_is_first || die "the host guard is not the first rule of FORWARD and INPUT (iptables and ip6tables) after kube-proxy's sync"

# The add-ons' images (imported only when their binaries changed) and the
# add-ons themselves.
mkimage() { # mkimage REF DIR: import DIR as REF
	bash "$REPO/scripts/kube-image.sh" "$ROOT" "$1" "$2" >>"$ROOT/logs/addons.log" 2>&1 || {
		tail -n 20 "$ROOT/logs/addons.log" >&2
		die "importing $1 failed (log $ROOT/logs/addons.log)"
	}
}
r=$ROOT/images/coredns-rootfs
if ! cmp -s "$ROOT/bin/coredns" "$r/coredns"; then
	rm -rf "$r" && mkdir -p "$r/etc"
	cp -p "$ROOT/bin/coredns" "$r/coredns"
fi
mkimage sandbox/coredns:local "$r" -- /coredns
# The provisioner and, for its helper pods, a shell (busybox: the setup and
# teardown scripts need sh, mkdir and rm; the rest serves checks).
r=$ROOT/images/local-path-rootfs
links="sh mkdir rm chmod ls cat sleep nc nslookup"
if ! cmp -s "$ROOT/bin/local-path-provisioner" "$r/usr/local/bin/local-path-provisioner" ||
	! cmp -s /bin/busybox "$r/bin/busybox" || [ "$(cat "$r/.links" 2>/dev/null)" != "$links" ]; then
	rm -rf "$r" && mkdir -p "$r/usr/local/bin" "$r/bin" "$r/tmp"
	cp -p "$ROOT/bin/local-path-provisioner" "$r/usr/local/bin/"
	cp -p /bin/busybox "$r/bin/busybox"
	for a in $links; do ln -s busybox "$r/bin/$a"; done
	echo "$links" >"$r/.links"
fi
mkimage sandbox/local-path:local "$r" -- /usr/local/bin/local-path-provisioner
# 0700: the volumes inside are 0777 (the provisioner's helper makes them so
# for any pod's uid), so their parent keeps this host's other users out.
mkdir -p "$ROOT/var/local-path"
chmod 0700 "$ROOT/var/local-path"
sed -e "s|@DNS_IP@|$DNS_IP|g" -e "s|@LOCAL_PATH_DIR@|$ROOT/var/local-path|g" "$KUBE_SRC/addons.yaml" >"$ROOT/etc/addons.yaml"
step "add-ons: CoreDNS (kube-dns $DNS_IP), local-path-provisioner (default StorageClass local-path)"
kubecheck apply "$ROOT/etc/addons.yaml"
kubecheck rollout -timeout 3m kube-system/coredns local-path-storage/local-path-provisioner || {
	tail -n 20 "$ROOT/logs/kube-proxy.log" >&2
	die "the add-ons did not come up (is the apiserver reachable from pods? log $ROOT/logs/kube-proxy.log)"
}

step "cluster ready"
cat <<EOF
  node:        $NODE (RuntimeClasses gvisor -> runsc, runc -> runc)
  policies:    kube-network-policies $NETPOL (kube-netpol), host guard SBXKUBE-FWD/SBXKUBE-IN
  services:    kube-proxy (iptables), cluster DNS $DNS_IP (CoreDNS $COREDNS)
  storage:     default StorageClass local-path ($ROOT/var/local-path)
  kubeconfig:  $ROOT/etc/admin.kubeconfig
  binaries:    $ROOT/bin (kubecheck, ctr$( [ -x "$ROOT/bin/kubectl" ] && echo ", kubectl"))
  logs:        $ROOT/logs
  import:      $REPO/scripts/kube-image.sh $ROOT sandbox/exec:local /var/lib/sandbox/images/exec/rootfs
  stop:        $REPO/scripts/kube-down.sh $ROOT
$ROOT/etc/admin.kubeconfig
EOF
