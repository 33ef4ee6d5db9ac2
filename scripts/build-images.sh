#!/usr/bin/env bash
# Build sandbox class images (root filesystems for the gVisor runtime).
#
#   scripts/build-images.sh [NAME...]        default: exec dev
#   IMAGES_DIR=/srv/images scripts/build-images.sh exec
#
# Each image is built by `sandbox image build NAME --images DIR`, which is
# idempotent: an image whose recipe has not changed is not rebuilt. Needs root
# and mmdebstrap (apt-get install mmdebstrap). The exec image takes ~1.5 min
# and ~2 GB; dev a little more.
set -euo pipefail

cd "$(dirname "$0")/.."

dir="${IMAGES_DIR:-/var/lib/sandbox/images}"
if [ "$#" -eq 0 ]; then
	set -- exec dev
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "build-images: must run as root (mmdebstrap --mode=root)" >&2
	exit 1
fi
if ! command -v mmdebstrap >/dev/null 2>&1; then
	echo "build-images: mmdebstrap is not installed: apt-get install mmdebstrap" >&2
	exit 1
fi

for name in "$@"; do
	echo "== $name -> $dir"
	go run ./cmd/sandbox image build "$name" --images "$dir"
done
