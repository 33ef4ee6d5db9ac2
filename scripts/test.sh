#!/usr/bin/env bash
# test.sh — the one test command: dependencies (scripts/deps.sh), a gofmt
# check, go vet, then every test against the real runsc and real images
# and (with no arguments) every benchmark once.
#
#   sudo scripts/test.sh                         # everything
#   sudo scripts/test.sh -run TestLease -v       # extra flags go to go test
#   sudo scripts/test.sh -v ./internal/api       # packages given: only those
#
# Environment:
#   SANDBOX_IMAGES  built class images (default /var/lib/sandbox/images);
#                   passed to the tests as SANDBOX_TEST_IMAGES
#   SANDBOX_KUBE    1 (default): bring up the single-node cluster
#                   (scripts/kube-up.sh), import the images, run the kube
#                   suite against it, and tear it down; 0: skip the kube suite
#   SANDBOX_KUBE_ROOT  where the cluster lives (default /var/lib/sandbox/kube)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble test

[ "$(id -u)" -eq 0 ] || die "must run as root (sudo $0): the tests start gVisor sandboxes"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
IMAGES=${SANDBOX_IMAGES:-/var/lib/sandbox/images}
KROOT=${SANDBOX_KUBE_ROOT:-/var/lib/sandbox/kube}
# A run with no arguments (CI's) is the full run: the cluster's builds
# beside deps.sh, the host-uplink test, every benchmark once and the second
# node. Arguments run what they name, with the cluster.
full=0
[ $# -gt 0 ] || full=1

# A run killed before its traps ran (a machine stopped mid-run, say) leaves
# its cluster up and its test links behind; the host-uplink test below
# refuses to run beside any sbx* link, and a stale cluster holds ports and
# mounts. No test runs yet, so whatever of ours is here is left over: end it.
sweep() {
	if ip -o link show sbxkube0 >/dev/null 2>&1 || [ -n "$(ls "$KROOT"/run/*.pid 2>/dev/null)" ]; then
		step "a test cluster was left up by an earlier run: scripts/kube-down.sh"
		bash scripts/kube-down.sh "$KROOT" >/tmp/sandbox-kube-down.log 2>&1 || tail -5 /tmp/sandbox-kube-down.log
	fi
	pkill -9 -f 'runsc.*/tmp/sbs-' 2>/dev/null || true
	local m l ns
	{ grep -oE ' /tmp/sb[st]-[^ ]*' /proc/self/mountinfo || true; } | sort -r | while read -r m; do umount -l "$m" 2>/dev/null || true; done
	for l in $(ip -o link show | awk -F': ' '{print $2}' | cut -d@ -f1 | grep '^sbxt' || true); do
		step "removing the leftover test link $l"
		ip link del "$l" 2>/dev/null || true
	done
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep '^sbxt-' || true); do
		ip netns del "$ns" 2>/dev/null || true
	done
}
sweep

# On a fresh machine the cluster's builds (Kubernetes, containerd, gVisor,
# CoreDNS, … from the module proxy: most of a cold cluster's half hour) run
# beside scripts/deps.sh, whose image builds wait on the network and dpkg
# more than on the CPU. kube-up.sh below waits for them; if they failed
# (no Go yet, say), it builds what is missing itself.
kube_build=
if [ "${SANDBOX_KUBE:-1}" = 1 ] && [ "$full" = 1 ]; then
	step "scripts/kube-up.sh's builds in the background (KUBE_UP_BUILD_ONLY=1; log /tmp/sandbox-kube-build.log)"
	# helm after them (it shares their Go caches), off the critical path too.
	{ KUBE_UP_BUILD_ONLY=1 KUBE_UP_KUBECTL=0 bash scripts/kube-up.sh "$KROOT" &&
		bash scripts/helm.sh "$KROOT"; } >/tmp/sandbox-kube-build.log 2>&1 &
	kube_build=$!
	trap 'kill "$kube_build" 2>/dev/null || true' EXIT
fi

SANDBOX_IMAGES=$IMAGES SANDBOX_TEST_DEPS=1 bash scripts/deps.sh

# imports: the three class images into the cluster's containerd, at once (a
# lock and temporary directory per image; one after another they took 207
# s). scripts/kube-image.sh skips an image whose source hash it imported.
# On a full run the exec image goes into the second node's containerd too
# (started alone: the node joins after the other suites, below).
imports() {
	local name pids=() i
	for name in exec dev desktop; do
		bash scripts/kube-image.sh "$KROOT" "sandbox/$name:local" "$IMAGES/$name/rootfs" >"/tmp/sandbox-import-$name.log" 2>&1 &
		pids+=($!)
	done
	if [ "$full" = 1 ]; then
		{ KUBE_UP_NODE=2 KUBE_UP_ONLY=containerd bash scripts/kube-up.sh "$KROOT" &&
			KUBE_NODE=2 bash scripts/kube-image.sh "$KROOT" sandbox/exec:local "$IMAGES/exec/rootfs"; } >/tmp/sandbox-import-node2.log 2>&1 &
		pids+=($!)
	else
		echo "(no second node on a run with arguments)" >/tmp/sandbox-import-node2.log
	fi
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || { tail -20 /tmp/sandbox-import-{exec,dev,desktop,node2}.log; return 1; }
	done
	tail -qn1 /tmp/sandbox-import-{exec,dev,desktop,node2}.log
}
# A fresh machine's imports (~3 minutes of disk, 2.5 GB each) go beside the
# cluster's builds (CPU) rather than after them: the builds make containerd
# and imgtar first, then containerd starts alone (KUBE_UP_ONLY=containerd:
# exit 3 while they are not built yet) and the images go in. If this fails,
# the imports after kube-up.sh below do the work.
early=
if [ -n "$kube_build" ]; then
	step "the class images into the cluster's containerd beside its builds (log /tmp/sandbox-import-early.log)"
	{
		for _ in $(seq 120); do
			rc=0
			KUBE_UP_ONLY=containerd bash scripts/kube-up.sh "$KROOT" || rc=$?
			[ "$rc" = 3 ] && kill -0 "$kube_build" 2>/dev/null || break
			sleep 5
		done
		[ "$rc" = 0 ] && imports
	} >/tmp/sandbox-import-early.log 2>&1 &
	early=$!
	trap 'kill "$kube_build" "$early" 2>/dev/null || true; bash scripts/kube-down.sh "$KROOT" >/dev/null 2>&1 || true' EXIT
fi

# The Go deps.sh found or installed (lib.sh's find_go: the same search).
gobin=$(find_go) || die "no Go >= 1.21 found after scripts/deps.sh"
PATH="$(dirname "$gobin"):$PATH"
export PATH
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
# The build settings of every other build of this module (deps.sh, the
# tests' own go builds, server-image.sh): one compile of each package in
# Go's cache serves vet, the tests and the binaries they build.
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:+$GOFLAGS }-trimpath"

# gofmt of the toolchain go.mod selects, not whatever gofmt is on PATH.
gofmt="$(go env GOROOT)/bin/gofmt"
step "gofmt -l"
unformatted=$(find . -name '*.go' -not -path './.git/*' -not -path './vendor/*' -not -path '*/testdata/*' -print0 |
	xargs -0 -r "$gofmt" -l)
if [ -n "$unformatted" ]; then
	printf '%s\n' "$unformatted" >&2
	die "these files are not gofmt-formatted (run: gofmt -w FILE)"
fi

step "go vet ./..."
go vet ./...

# Packages default to every package but load/, which runs on its own after
# them (below): its floods take the machine's CPU and would make the timing
# of the suites running beside it meaningless.
mapfile -t pkgs < <(go list ./... | grep -v '/load$')
# go test starts packages (-p, one per core, at a time) in the order given: the longest
# suites first (their seconds alone, warm: test/integration ~850 with its
# parallel tests, the kube runtime ~350, the SDKs, the client and the CLI
# ~180 each), so the short ones fill in beside them instead of one long
# suite starting last (test/integration, last, began ~9 minutes in).
long=(test/integration internal/runtime/kube sdk client cmd/sandbox)
mapfile -t pkgs < <(for p in "${long[@]}"; do
	printf '%s\n' "${pkgs[@]}" | grep "/$p\$" || true
done; printf '%s\n' "${pkgs[@]}" | grep -Ev "/($(IFS='|'; echo "${long[*]}"))\$")
load=1
for a in "$@"; do
	case $a in
	./* | ../* | github.com/sandboxd/sandbox*) pkgs=() load=0 ;;
	esac
done
# The egress rules with the default uplink (this host's own namespace) are
# tested before the cluster comes up: the egress table drops whatever comes
# in on an sbx* link that is no sandbox's, and the cluster's bridge is
# sbxkube0, so beside the cluster the test skips (test/integration
# TestEgressHostUplinkOnRunsc).
if [ "$full" = 1 ]; then
	step "go test -run TestEgressHostUplinkOnRunsc ./test/integration/ (no cluster up yet)"
	SANDBOX_TEST_IMAGES=$IMAGES SANDBOX_TEST_REQUIRE=gvisor go test -count=1 -timeout 10m -run '^TestEgressHostUplinkOnRunsc$' -v ./test/integration/ >/tmp/sandbox-hostuplink.log 2>&1 || true
	tail -5 /tmp/sandbox-hostuplink.log
	grep -q -- '^--- PASS: TestEgressHostUplinkOnRunsc' /tmp/sandbox-hostuplink.log || die "TestEgressHostUplinkOnRunsc did not pass (see above; a test cluster left up makes it skip: scripts/kube-down.sh)"
fi

# The kube suite needs a real cluster: bring one up (about 7 minutes cold,
# one minute warm), import the images it runs, and tear it down at the end.
kubeconfig= helm=
if [ "${SANDBOX_KUBE:-1}" = 1 ]; then
	if [ -n "$kube_build" ]; then
		t0=$SECONDS
		wait "$kube_build" && step "the cluster's background builds are done (waited $((SECONDS - t0)) s)" ||
			{ tail -5 /tmp/sandbox-kube-build.log; step "the cluster's background builds failed: kube-up.sh builds what is missing"; }
	fi
	if [ -n "$early" ]; then
		t0=$SECONDS
		wait "$early" && step "the images went in beside the builds (waited $((SECONDS - t0)) s)" ||
			{ tail -5 /tmp/sandbox-import-early.log; step "the imports beside the builds failed: importing after kube-up.sh"; }
	fi
	# Traefik serves one test (TestHelmIngress, which waits for it while
	# ROOT/bin/.traefik.building names a live build): its ~5.5 cold minutes
	# go beside the cluster's start and the first suites, not before them.
	step "scripts/traefik.sh in the background (log /tmp/sandbox-traefik-build.log)"
	bash scripts/traefik.sh "$KROOT" >/tmp/sandbox-traefik-build.log 2>&1 &
	traefik_build=$!
	trap 'kill "$traefik_build" ${early:+"$early"} 2>/dev/null || true; bash scripts/kube-down.sh "$KROOT" >/dev/null 2>&1 || true' EXIT
	step "scripts/kube-up.sh $KROOT"
	KUBE_UP_KUBECTL=0 bash scripts/kube-up.sh "$KROOT"
	step "scripts/helm.sh $KROOT (the chart's suite: real helm)"
	bash scripts/helm.sh "$KROOT"
	helm=$KROOT/bin/helm
	step "import sandbox/{exec,dev,desktop}:local into the cluster (logs /tmp/sandbox-import-NAME.log)"
	imports || die "an image import failed"
	kubeconfig=$KROOT/etc/admin.kubeconfig
fi

# Every real-runtime suite this script set up must run: a suite that would
# skip for a missing part fails instead (internal/testenv).
require=gvisor,browser,registry
[ -n "$kubeconfig" ] && require=$require,kube
[ -n "$helm" ] && require=$require,helm
export SANDBOX_TEST_IMAGES=$IMAGES SANDBOX_TEST_KUBECONFIG=$kubeconfig SANDBOX_TEST_KUBE_ROOT=${kubeconfig:+$KROOT} SANDBOX_TEST_HELM=$helm SANDBOX_TEST_REQUIRE=$require

# The suites mostly wait on something real (a pod, a sandbox's boot, a
# timeout that proves a refusal): alone, test/integration left the two
# cores 60% idle. So within a package up to four tests that call
# t.Parallel() run at once (test/integration's parallel_test.go says which
# and why). Packages stay two at a time: with three, the serial tests that
# compare timings (the resolver flood's latency under load) failed.
# A benchmark that no longer runs is a defect: with no arguments (CI), each
# one runs once, after its package's tests in the same test binary. The flag
# goes to the binaries (-args -test.bench), not to go test: go test -bench
# runs the packages one at a time, the first after every build (measured:
# the warm run's test phase 15 -> 29 min). A pass of its own afterwards
# relinked every test binary and ran test/integration's ~4 minutes of
# benchmarks after all else (~5.5 min). The numbers of BENCHMARKS.md come
# from -benchtime runs of their own (see there).
# CI stops a run at 90 minutes: when the tests begin past
# SANDBOX_BENCH_BUDGET_MIN (50) minutes of this script (a fresh machine
# spends ~25 building), the benchmarks are skipped, loudly, rather than
# failing everything for the clock.
bench=()
if [ "$full" = 1 ] && [ $((SECONDS / 60)) -ge "${SANDBOX_BENCH_BUDGET_MIN:-50}" ]; then
	step "WARNING: $((SECONDS / 60)) min spent (budget ${SANDBOX_BENCH_BUDGET_MIN:-50}): the benchmarks are skipped this run"
elif [ "$full" = 1 ]; then
	bench=(-args -test.bench=. -test.benchtime=1x)
fi
step "go test -count=1 -timeout 60m -parallel 4 $* ${pkgs[*]:-} ${bench[*]} (SANDBOX_TEST_REQUIRE=$require)"
go test -count=1 -timeout 60m -parallel 4 "$@" "${pkgs[@]}" "${bench[@]}"
if [ "$load" = 1 ]; then
	step "go test -count=1 $* ./load/ ${bench[*]} (the hostile-tenant suite, alone on the machine)"
	go test -count=1 -timeout 20m "$@" ./load/ "${bench[@]}"
fi
# A second node joins the cluster (on this machine: scripts/kube-up.sh's
# KUBE_UP_NODE=2) after every other suite, which it would otherwise spread
# their pods over, and one test leases across both.
if [ -n "$kubeconfig" ] && [ "$full" = 1 ]; then
	step "KUBE_UP_NODE=2 scripts/kube-up.sh $KROOT (a second node), then TestKubeTwoNodes"
	KUBE_UP_NODE=2 KUBE_UP_KUBECTL=0 bash scripts/kube-up.sh "$KROOT"
	KUBE_NODE=2 bash scripts/kube-image.sh "$KROOT" sandbox/exec:local "$IMAGES/exec/rootfs"
	SANDBOX_TEST_REQUIRE=$require,kube-nodes go test -count=1 -timeout 10m -run '^TestKubeTwoNodes$' ./test/integration/
fi
