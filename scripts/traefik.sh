#!/usr/bin/env bash
# traefik.sh — Traefik (github.com/traefik/traefik/v3, stock), the test
# cluster's ingress controller, built from the Go module proxy into
# ROOT/bin/traefik. test/integration TestHelmIngress deploys it to prove the
# chart's Ingress: the API host and the previews' wildcard host, in Chromium.
# A preview host's label is a DNS label ("8000-sb-…", the sandbox id with "-"
# for its "_"), which stock Traefik's wildcard (*.DOMAIN, a label of
# [a-zA-Z0-9-]) matches: no patch.
#
#   scripts/traefik.sh [ROOT]       # ROOT defaults to /var/lib/sandbox/kube
#
# Idempotent (ROOT/bin/.stamp-traefik holds the version) and on
# scripts/kube-up.sh's Go caches. ~5.5 min cold on 2 cores: scripts/test.sh
# runs it in the background beside the cluster's start and the tests, off
# the critical path of a fresh machine; while it builds, ROOT/bin/.traefik.building
# names its pid and TestHelmIngress waits for the binary.
set -euo pipefail

TRAEFIK=v3.6.12 # 3.7's lego needs a ucloud-sdk-go version the module proxy does not serve

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble traefik

help_if_asked "$@"
ROOT=${1:-/var/lib/sandbox/kube}
[ $# -le 1 ] || die "usage: $0 [ROOT]"
case $ROOT in /*) ;; *) ROOT=$(pwd)/$ROOT ;; esac
ROOT=${ROOT%/}

mkdir -p "$ROOT"/{bin,src,logs,go}

gobin=$(find_go) || die "no Go >= 1.21 found: run scripts/deps.sh first"
PATH="$(dirname "$gobin"):$PATH"
export PATH
root_go_env

if need_build traefik "$TRAEFIK" traefik; then
	marker=$ROOT/bin/.traefik.building
	echo $$ >"$marker"
	trap 'rm -f "$marker"' EXIT
	step "go build: Traefik $TRAEFIK into $ROOT/bin/traefik (~5.5 min cold)"
	src=$(cd "$ROOT/src" && go mod download -json "github.com/traefik/traefik/v3@$TRAEFIK" | grep '"Dir"' | cut -d'"' -f4)
	[ -n "$src" ] && [ -d "$src" ] || die "go mod download github.com/traefik/traefik/v3@$TRAEFIK gave no source directory"
	# Built inside its own module, whose go.mod's replaces a wrapper would lose.
	d=$ROOT/src/traefik
	rm -rf "$d" && cp -r "$src" "$d" && chmod -R u+w "$d"
	# A temporary name, then a rename: a waiting test never runs half a binary.
	(cd "$d" && quiet go build -trimpath -ldflags="-s -w" -o "$ROOT/bin/.traefik.tmp" ./cmd/traefik)
	mv -f "$ROOT/bin/.traefik.tmp" "$ROOT/bin/traefik"
	set_stamp traefik "$TRAEFIK"
else
	step "Traefik $TRAEFIK present ($ROOT/bin/traefik)"
fi
step "done in $(($(date +%s) - T0)) s"
