#!/usr/bin/env bash
# deps.sh — install everything the sandbox server and its tests need on a
# Debian 12 host, then build bin/sandbox, bin/sandbox-runner and the exec and
# dev images.
# Idempotent: a second run only rebuilds what changed.
#
#   sudo scripts/deps.sh
#
# Environment:
#   SANDBOX_IMAGES  where class images are built (default /var/lib/sandbox/images)
#   SANDBOX_RUNSC   an existing runsc to use instead of building the pinned one
#   GOTOOLCHAIN     defaults to auto, so an older Go fetches the go.mod toolchain
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble deps

[ "$(id -u)" -eq 0 ] || die "must run as root (sudo $0)"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$(pwd -P)
IMAGES=${SANDBOX_IMAGES:-/var/lib/sandbox/images}
export DEBIAN_FRONTEND=noninteractive

# --- apt packages -----------------------------------------------------------

apt_updated=0
apt_update() {
	if [ "$apt_updated" -eq 0 ]; then
		step "apt-get update"
		apt-get update -q
		apt_updated=1
	fi
}

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

# mmdebstrap builds the images; git is what go uses for VCS stamping and
# direct module fetches. Debian's runsc package is deliberately absent: it is
# too old for current kernels (see the pinned build below).
# e2fsprogs and util-linux format and loop-mount project volumes; procps for
# the tests' process checks.
packages=(mmdebstrap ca-certificates iproute2 git e2fsprogs util-linux procps)
# The tests drive the terminal and screen pages in a real headless browser,
# `sandbox shell` in a real pseudo-terminal (tmux), and the SDKs' own suites
# (Python from Debian's packages, no index; Node for the TypeScript SDK);
# images are pulled from a real registry (the CNCF distribution registry)
# and built from a static busybox; the docs' examples run with curl.
if [ "${SANDBOX_TEST_DEPS:-}" = 1 ]; then
	packages+=(chromium tmux python3-httpx python3-websockets python3-pytest python3-venv nodejs docker-registry busybox-static curl)
fi
# What the Python SDK needs, from Debian (scripts/up.sh asks for them: its
# quick start installs the SDK with no package index).
if [ "${SANDBOX_SDK_DEPS:-}" = 1 ]; then
	packages+=(python3-httpx python3-websockets python3-venv)
fi
missing=()
for p in "${packages[@]}"; do
	installed "$p" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
	apt_update
	step "apt-get install ${missing[*]}"
	apt-get install -y -q "${missing[@]}"
else
	step "apt packages present: ${packages[*]}"
fi

# --- Go -----------------------------------------------------------------------


install_go() {
	local codename bp mirror pkg minor src=/etc/apt/sources.list.d/sandbox-backports.sources
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
	bp="$codename-backports"
	if ! grep -Eqs "^[^#]*[[:space:]]$bp([[:space:]]|\$)" /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; then
		# Reuse the Debian mirror the host already uses.
		mirror=$(grep -Ehos 'https?://[^[:space:]]*/debian/?([[:space:]]|$)' \
			/etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources |
			head -n1 | tr -d '[:space:]' || true)
		mirror=${mirror:-http://deb.debian.org/debian}
		step "adding $bp ($mirror) to $src"
		cat >"$src" <<EOF
Types: deb
URIs: $mirror
Suites: $bp
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
		apt_updated=0
	fi
	apt_update
	pkg=$(apt-cache search --names-only '^golang-1\.[0-9]+-go$' | awk '{print $1}' | sort -V | tail -n1 || true)
	minor=${pkg#golang-1.}
	minor=${minor%-go}
	if [ -z "$pkg" ] || ! [[ $minor =~ ^[0-9]+$ ]] || [ "$minor" -lt 21 ]; then
		die "no Go >= 1.21 in apt (${pkg:-none found}); install Go into /usr/local/go and rerun"
	fi
	step "apt-get install -t $bp $pkg"
	apt-get install -y -q -t "$bp" "$pkg"
}

if ! gobin=$(find_go); then
	step "no Go >= 1.21 found (PATH, /usr/local/go/bin, /usr/lib/go-1.*)"
	install_go
	gobin=$(find_go) || die "Go was installed but no Go >= 1.21 was found"
fi
PATH="$(dirname "$gobin"):$PATH"
export PATH
# Debian's Go (and some go env files) default to GOTOOLCHAIN=local; auto lets
# an older Go fetch the toolchain go.mod names through the module proxy.
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
step "go: $gobin ($(cd / && GOTOOLCHAIN=local go env GOVERSION)); toolchain for this module: $(go env GOVERSION) (GOTOOLCHAIN=$GOTOOLCHAIN)"

# --- binary and images --------------------------------------------------------

# Both static and trimmed: the in-sandbox runner must be (it runs on the
# image's libc, not the host's; `sandbox serve` finds it beside
# bin/sandbox), and the server is built the way everything else builds this
# module (scripts/test.sh, the tests' own builds, scripts/server-image.sh),
# so that Go's cache compiles each package once: on a fresh machine a second
# set of flags cost a second cold compile of the server's ~1200 packages.
step "go build -trimpath -o bin/ ./cmd/sandbox ./cmd/sandbox-runner (static; in $repo)"
CGO_ENABLED=0 go build -trimpath -o bin/ ./cmd/sandbox ./cmd/sandbox-runner

# The three class images at once, beside the runsc build below: each is
# mostly downloads and dpkg (one after another they took 13.8 minutes on a
# fresh machine: exec 5.6, dev 3.7, desktop 4.4). Up to date, each is a
# check of a second.
install -d -m 0755 "$IMAGES"
image_pids=() image_names=(exec dev desktop)
for name in "${image_names[@]}"; do
	step "image $name in $IMAGES, in the background (log /tmp/sandbox-image-$name.log; a first build takes 4-6 min and ~3 GB)"
	bin/sandbox image build "$name" --images "$IMAGES" >"/tmp/sandbox-image-$name.log" 2>&1 &
	image_pids+=($!)
done
# A stop before they are waited for (a failed runsc build, Ctrl-C) ends them.
trap 'kill "${image_pids[@]}" 2>/dev/null || true; rm -rf "${tmp:-}"' EXIT

# --- runsc --------------------------------------------------------------------

# The pinned path is the runtime's const PinnedRunsc; its name carries the
# gVisor pseudo-version to build.
RUNSC=$(sed -n 's/^const PinnedRunsc = "\(.*\)"$/\1/p' internal/runtime/gvisor/gvisor.go)
[[ $RUNSC =~ /runsc-([0-9]{14})-([0-9a-f]{12})$ ]] ||
	die "cannot read PinnedRunsc from internal/runtime/gvisor/gvisor.go (got '$RUNSC')"
RUNSC_VERSION="v0.0.0-${BASH_REMATCH[1]}-${BASH_REMATCH[2]}"

# What the build below is made of, beside RUNSC_VERSION: a runsc at $RUNSC
# whose $RUNSC.recipe says otherwise (an earlier deps.sh's, without the
# precompiled seccomp programs) is built again.
runsc_recipe="$RUNSC_VERSION filtergen-$(cat internal/runtime/gvisor/filtergen/main.go internal/runtime/gvisor/platforms.go | sha256sum | cut -c1-16)"

if [ -n "${SANDBOX_RUNSC:-}" ] && [ "$SANDBOX_RUNSC" != "$RUNSC" ]; then
	[ -x "$SANDBOX_RUNSC" ] || die "SANDBOX_RUNSC=$SANDBOX_RUNSC is not an executable"
	step "runsc: using SANDBOX_RUNSC=$SANDBOX_RUNSC (pinned build skipped)"
elif [ -x "$RUNSC" ] && [ "$(cat "$RUNSC.recipe" 2>/dev/null)" = "$runsc_recipe" ]; then
	step "runsc: $RUNSC present"
else
	# Built in this module, whose go.mod requires gVisor at the same version
	# (TestPinnedRunscIsLinked): the server links runsc's own packages
	# for its exec channel, and built with the same flags they are compiled
	# once for both. A `go install runsc@version` of gVisor's own module
	# compiled the sentry a second time (~3 CPU minutes on a fresh machine)
	# for a runsc whose only difference is patch versions of x/sys and a few
	# other dependencies: the ones the server's copy of the same code uses.
	step "runsc: building gvisor.dev/gvisor/runsc $RUNSC_VERSION in this module (the server's packages, already compiled, plus runsc's own)"
	grep -q "^[[:space:]]*gvisor.dev/gvisor $RUNSC_VERSION\$" go.mod ||
		die "go.mod does not require gvisor.dev/gvisor $RUNSC_VERSION, the version PinnedRunsc names"
	tmp=$(mktemp -d)
	# With its seccomp programs compiled now rather than at every boot
	# (gVisor's own build does the same; the module's runsc has none): each
	# sandbox's start saved 20-40 ms of CPU. filtergen writes them into a
	# copy of the module (the go command overlays nothing in its module
	# cache), which this build uses in place of the cache's (-modfile: a
	# go.mod of its own with a replace; every other package stays the
	# cached one). ~70 CPU-seconds, on a fresh machine beside the images.
	step "runsc: its seccomp programs, precompiled (internal/runtime/gvisor/filtergen)"
	src=$(go list -m -f '{{.Dir}}' gvisor.dev/gvisor)
	[ -d "$src" ] || die "go list -m gvisor.dev/gvisor gave no directory"
	cp -r "$src" "$tmp/gvisor"
	chmod -R u+w "$tmp/gvisor"
	CGO_ENABLED=0 go run -trimpath ./internal/runtime/gvisor/filtergen -gvisor "$tmp/gvisor"
	cp go.mod "$tmp/runsc.mod"
	cp go.sum "$tmp/runsc.sum"
	printf '\nreplace gvisor.dev/gvisor => %s\n' "$tmp/gvisor" >>"$tmp/runsc.mod"
	CGO_ENABLED=0 go build -trimpath -modfile="$tmp/runsc.mod" -o "$tmp/bin/runsc" gvisor.dev/gvisor/runsc
	"$tmp/bin/runsc" --version >/dev/null || die "the built runsc does not run"
	install -d -m 0755 "$(dirname "$RUNSC")"
	install -m 0755 "$tmp/bin/runsc" "$RUNSC.new"
	mv -f "$RUNSC.new" "$RUNSC"
	echo "$runsc_recipe" >"$RUNSC.recipe"
	step "runsc: installed $RUNSC ($runsc_recipe)"
fi

# The images: a line of progress every 30 s while any builds, then each
# one's result (or its log's tail, and a stop).
images_running() {
	local p
	for p in "${image_pids[@]}"; do kill -0 "$p" 2>/dev/null && return 0; done
	return 1
}
while images_running; do
	for _ in $(seq 30); do
		sleep 1
		images_running || break
	done
	images_running || break
	for name in "${image_names[@]}"; do
		step "image $name: $(grep -v '^[[:space:]]*$' "/tmp/sandbox-image-$name.log" 2>/dev/null | tail -n1 | sed 's/^[[:space:]]*//' | cut -c1-120 || true)"
	done
done
for i in "${!image_pids[@]}"; do
	name=${image_names[$i]}
	if ! wait "${image_pids[$i]}"; then
		tail -n 30 "/tmp/sandbox-image-$name.log" >&2
		die "image $name failed (log /tmp/sandbox-image-$name.log)"
	fi
	step "image $name: $(tail -n1 "/tmp/sandbox-image-$name.log")"
done
image_pids=()
step "done"
