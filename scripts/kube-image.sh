#!/usr/bin/env bash
# kube-image.sh — import a directory rootfs as an image into the containerd of
# the cluster that scripts/kube-up.sh runs (namespace k8s.io, so pods with
# imagePullPolicy: Never find it).
#
#   sudo scripts/kube-image.sh ROOT NAME:TAG ROOTFS_DIR [-- CMD...]
#   sudo scripts/kube-image.sh /var/lib/sandbox/kube sandbox/exec:local /var/lib/sandbox/images/exec/rootfs
#
# ROOT/bin/imgtar (scripts/kube/imgtar, built by kube-up.sh) writes a
# single-layer docker-archive that keeps the rootfs' numeric uid/gid, modes,
# hardlinks, symlinks, device nodes and xattrs; the layer is streamed to a
# temporary file under ROOT/images (it needs the rootfs' size free) and the
# archive is piped into `ctr images import`.
#
# Idempotent: the source hash — sha256 of ROOTFS_DIR/../image.json when the
# rootfs comes from scripts/build-images.sh (it names the recipe hash and the
# build time), else of a listing of the tree (path, size, mtime, mode, owner)
# — is stored in ROOT/images/NAME_TAG.hash and as the image label
# org.sandboxd.source-hash; when both match, nothing is imported.
# FORCE=1 imports anyway. KUBE_NODE=2 imports into the second node's
# containerd (KUBE_UP_NODE=2 scripts/kube-up.sh) instead of the first's.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble kube-image

[ $# -ge 3 ] || die "usage: $0 ROOT NAME:TAG ROOTFS_DIR [-- CMD...]"
[ "$(id -u)" -eq 0 ] || die "must run as root (sudo $0)"
ROOT=${1%/}
REF=$2
ROOTFS=${3%/}
shift 3
cmd=()
if [ $# -gt 0 ]; then
	[ "$1" = -- ] || die "unexpected argument $1 (a command goes after --)"
	shift
	cmd=("$@")
fi
[ -d "$ROOTFS" ] || die "$ROOTFS is not a directory"
[ -x "$ROOT/bin/imgtar" ] && [ -x "$ROOT/bin/ctr" ] || die "$ROOT/bin/imgtar or ctr missing: run scripts/kube-up.sh $ROOT first"
node=${KUBE_NODE:-1}
case $node in 1) sfx= ;; 2) sfx=-2 ;; *) die "KUBE_NODE=$node: 1 or 2" ;; esac
SOCK=$ROOT/run/containerd$sfx/containerd.sock
CTR=("$ROOT/bin/ctr" -a "$SOCK" -n k8s.io)
"${CTR[@]}" version >/dev/null 2>&1 || die "containerd of $ROOT is not running (scripts/kube-up.sh $ROOT)"

# The name containerd stores (docker.io/ and :latest added as docker does).
full=$REF
case ${full%%/*} in
*.* | *:* | localhost) ;;
*) case $full in */*) full=docker.io/$full ;; *) full=docker.io/library/$full ;; esac ;;
esac
case ${full##*/} in *:* | *@*) ;; *) full=$full:latest ;; esac

FORMAT=imgtar-1 # bump when imgtar's output changes
if [ -f "$ROOTFS/../image.json" ]; then
	src="image.json $(sha256sum <"$ROOTFS/../image.json" | cut -d' ' -f1)"
else
	step "no $ROOTFS/../image.json: hashing a listing of the tree"
	src="tree $(cd "$ROOTFS" && find . -printf '%P\t%s\t%T@\t%m\t%U\t%G\t%l\n' | LC_ALL=C sort | sha256sum | cut -d' ' -f1)"
fi
hash=$(printf '%s %s %s\n' "$FORMAT" "$src" "${cmd[*]}" | sha256sum | cut -d' ' -f1)
mkdir -p "$ROOT/images"
key=$(printf '%s' "$REF" | tr '/:@' '___')$sfx
hashfile=$ROOT/images/$key.hash

# A lock, a temporary directory and a log per image: the three class images
# are imported at once (scripts/test.sh), and a second import of the same
# image waits for the first instead of racing it.
exec 8>"$ROOT/images/.import-$key.lock"
flock 8
tmp=$ROOT/images/tmp-$key
log=$ROOT/images/import-$key.log

# A local image is in no registry: once the kubelet's image collection
# (under disk pressure, or past its high threshold) removed it, no pod of it
# could start again (pull policy Never). containerd reports an image with
# this label as pinned, which the kubelet never collects.
PIN=io.cri-containerd.pinned=pinned
have=$("${CTR[@]}" images ls "name==$full" 2>/dev/null | awk 'NR>1' || true)
if [ "${FORCE:-0}" != 1 ] && [ "$(cat "$hashfile" 2>/dev/null)" = "$hash" ] &&
	grep -qF "org.sandboxd.source-hash=$hash" <<<"$have"; then
	grep -qF "$PIN" <<<"$have" || "${CTR[@]}" images label "$full" "$PIN" >/dev/null
	step "$full is up to date (source hash ${hash:0:16}, $hashfile)"
	exit 0
fi

step "importing $ROOTFS as $full (source: ${src%% *}, hash ${hash:0:16})"
rm -rf "$tmp" # left by an interrupted run (the lock is ours)
mkdir -p "$tmp"
trap 'rm -rf "$tmp"' EXIT
args=(-ref "$REF" -tmp "$tmp" -label "org.sandboxd.source-hash=$hash" -label "org.sandboxd.rootfs=$ROOTFS")
for c in "${cmd[@]}"; do args+=(-cmd "$c"); done
rm -f "$hashfile"
"$ROOT/bin/imgtar" "${args[@]}" "$ROOTFS" |
	"${CTR[@]}" images import --label "org.sandboxd.source-hash=$hash" --label "$PIN" - >"$log" 2>&1 || {
	tail -n 20 "$log" >&2
	die "import failed (log $log)"
}
"${CTR[@]}" images ls "name==$full" 2>/dev/null | awk 'NR>1' | grep -qF "org.sandboxd.source-hash=$hash" ||
	die "$full is not in containerd after the import (log $log)"
printf '%s\n' "$hash" >"$hashfile"
size=$("${CTR[@]}" images ls "name==$full" 2>/dev/null | awk 'NR>1 {print $4, $5}')
step "imported $full ($size) in $(($(date +%s) - T0))s"
