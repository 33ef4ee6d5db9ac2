#!/usr/bin/env bash
# server-image.sh — build the server's container image from this checkout and
# import it into the containerd of the cluster scripts/kube-up.sh runs (for
# another cluster, push the same rootfs to your registry instead: see
# deploy/kube/README.md).
#
#   sudo scripts/server-image.sh [-v VERSION] ROOT NAME:TAG
#   sudo scripts/server-image.sh /var/lib/sandbox/kube sandbox/server:0.2.0
#
# The image holds /usr/local/bin/sandbox and, beside it, sandbox-runner (an
# init container of this image puts the runner on each sandbox pod's
# read-only runner volume: --runner-image), both static (pure Go,
# CGO_ENABLED=0); the CA bundle of this machine; a passwd/group naming uid
# 65532 (the chart runs the server as that user, non-root, on a read-only
# root filesystem with /data and /tmp its only writable places). -v stamps
# the server's version (server.Version, shown as the OpenAPI document's
# info.version), so that an upgrade to a rebuilt image can be told apart.
# The rootfs is ROOT/images/server-TAG-rootfs; kube-image.sh imports it when
# its tree changed (a rebuild that changed nothing imports nothing).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble server-image
version=
if [ "${1:-}" = -v ]; then
	version=${2:?-v needs a VERSION}
	shift 2
fi
[ $# -eq 2 ] || die "usage: $0 [-v VERSION] ROOT NAME:TAG"
ROOT=${1%/}
REF=$2
gobin=$(find_go) || die "no Go found: run scripts/deps.sh first"
PATH="$(dirname "$gobin"):$PATH"

# Test packages run at once and each builds this image: one at a time per
# image, so none reads a binary another is still copying.
mkdir -p "$ROOT/images"
key=$(printf '%s' "$REF" | tr '/:@' '___')
exec 9>"$ROOT/images/.server-$key.lock"
flock 9

ld="-s -w"
[ -z "$version" ] || ld+=" -X github.com/sandboxd/sandbox/internal/server.Version=$version"
bin=$ROOT/images/server-build/$key
mkdir -p "$bin"
step "go build: sandbox, sandbox-runner${version:+ (version $version)}"
(cd "$REPO" && CGO_ENABLED=0 go build -trimpath -ldflags="$ld" -o "$bin/" ./cmd/sandbox ./cmd/sandbox-runner)

r=$ROOT/images/server-$key-rootfs
mkdir -p "$r/usr/local/bin" "$r/etc/ssl/certs" "$r/tmp" "$r/data"
chmod 1777 "$r/tmp"
# Copied only when changed, so an unchanged tree (kube-image.sh hashes
# paths, sizes and mtimes) imports nothing.
for b in sandbox sandbox-runner; do
	cmp -s "$bin/$b" "$r/usr/local/bin/$b" || cp "$bin/$b" "$r/usr/local/bin/$b"
done
put() { # put FILE CONTENT
	[ "$(cat "$1" 2>/dev/null)" = "$2" ] || printf '%s\n' "$2" >"$1"
}
put "$r/etc/passwd" 'nonroot:x:65532:65532:sandbox server:/data:/sbin/nologin'
put "$r/etc/group" 'nonroot:x:65532:'
if [ -s /etc/ssl/certs/ca-certificates.crt ]; then
	cmp -s /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt" ||
		cp /etc/ssl/certs/ca-certificates.crt "$r/etc/ssl/certs/ca-certificates.crt"
fi
bash "$REPO/scripts/kube-image.sh" "$ROOT" "$REF" "$r" -- /usr/local/bin/sandbox
step "$REF ready"
