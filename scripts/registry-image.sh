#!/usr/bin/env bash
# registry-image.sh — build an image of the CNCF distribution registry from
# Debian's docker-registry package (the registry the tests already run) and
# import it into the containerd of the cluster scripts/kube-up.sh runs: the
# image the chart's own registry (registry.enabled) runs in the tests, where
# the cluster reaches no public registry.
#
#   sudo scripts/registry-image.sh ROOT NAME:TAG
#   sudo scripts/registry-image.sh /var/lib/sandbox/kube sandbox/registry:local
#
# The rootfs holds /usr/bin/docker-registry, the C library it links (it is
# a Go program built with cgo: libc and the loader only), and a config that
# the chart's environment overrides (address, storage directory, deletes).
# kube-image.sh imports it only when the tree changed.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble registry-image
[ $# -eq 2 ] || die "usage: $0 ROOT NAME:TAG"
ROOT=${1%/}
REF=$2
bin=/usr/bin/docker-registry
[ -x "$bin" ] || die "no $bin: apt-get install docker-registry (scripts/deps.sh installs it for the tests)"
r=$ROOT/images/registry-$(printf '%s' "$REF" | tr '/:@' '___')-rootfs
mkdir -p "$r/usr/bin" "$r/etc/docker/registry" "$r/var/lib/registry" "$r/tmp"
chmod 1777 "$r/tmp"
cmp -s "$bin" "$r/usr/bin/docker-registry" || cp "$bin" "$r/usr/bin/docker-registry"
# The loader and the libraries ldd names, at their own paths.
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
	mkdir -p "$r$(dirname "$lib")"
	cmp -s "$lib" "$r$lib" || cp -L "$lib" "$r$lib"
done
conf='version: 0.1
storage:
  filesystem:
    rootdirectory: /var/lib/registry
http:
  addr: :5000'
[ "$(cat "$r/etc/docker/registry/config.yml" 2>/dev/null)" = "$conf" ] || printf '%s\n' "$conf" >"$r/etc/docker/registry/config.yml"
put() { [ "$(cat "$1" 2>/dev/null)" = "$2" ] || printf '%s\n' "$2" >"$1"; }
put "$r/etc/passwd" 'nonroot:x:65532:65532:registry:/var/lib/registry:/sbin/nologin'
put "$r/etc/group" 'nonroot:x:65532:'
bash "$REPO/scripts/kube-image.sh" "$ROOT" "$REF" "$r" -- /usr/bin/docker-registry serve /etc/docker/registry/config.yml
