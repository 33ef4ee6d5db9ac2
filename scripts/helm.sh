#!/usr/bin/env bash
# helm.sh — real Helm (helm.sh/helm/v3 v3.22.0, cmd/helm), built from the Go
# module proxy into ROOT/bin/helm, for the chart deploy/helm/sandbox and its
# tests (SANDBOX_TEST_HELM).
#
#   scripts/helm.sh [ROOT]          # ROOT defaults to /var/lib/sandbox/kube
#   ROOT/bin/helm version
#
# Idempotent: a second run rebuilds nothing when ROOT/bin/.stamp-helm holds
# this version (the pattern of scripts/kube-up.sh's builds). The module lives
# in ROOT/src/helm, never in this repository's go.mod, and the build uses
# scripts/kube-up.sh's Go caches (ROOT/go/mod, ROOT/go/cache): most of helm's
# dependencies (client-go, apimachinery, ...) are the Kubernetes build's.
#
# Measured on 2 cores: cold (empty Go caches, a fresh ROOT) 229 s; with
# scripts/kube-up.sh's caches already filled by the Kubernetes build 164 s;
# a second run (the stamp matches) 0 s.
#
# The version is stamped with -X helm.sh/helm/v3/internal/version.version
# (else `helm version` says v3.x-dev and charts' kubeVersion checks misjudge it).
set -euo pipefail

HELM=v3.22.0

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble helm

help_if_asked "$@"
ROOT=${1:-/var/lib/sandbox/kube}
[ $# -le 1 ] || die "usage: $0 [ROOT]"
case $ROOT in /*) ;; *) ROOT=$(pwd)/$ROOT ;; esac
ROOT=${ROOT%/}

mkdir -p "$ROOT"/{bin,src/helm,logs,go}

gobin=$(find_go) || die "no Go >= 1.21 found: run scripts/deps.sh first"
PATH="$(dirname "$gobin"):$PATH"
export PATH
root_go_env


if need_build helm "$HELM" helm; then
	step "go: build helm $HELM into $ROOT/bin/helm"
	(
		cd "$ROOT/src/helm"
		# A module of its own that requires helm: helm's go.mod (its
		# versions, its replace-free graph) decides every dependency.
		printf 'module sandboxkube/helm\n\ngo 1.25.0\n\nrequire helm.sh/helm/v3 %s\n' "$HELM" >go.mod
		printf '//go:build tools\n\npackage tools\n\nimport _ "helm.sh/helm/v3/cmd/helm"\n' >tools.go
		quiet go mod tidy
		# Build to a temporary name and rename: a failed or interrupted
		# build never leaves a half-written helm that the stamp vouches for.
		quiet go build -trimpath \
			-ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM" \
			-o "$ROOT/bin/.helm.tmp" helm.sh/helm/v3/cmd/helm
		mv -f "$ROOT/bin/.helm.tmp" "$ROOT/bin/helm"
	)
	got=$("$ROOT/bin/helm" version --template '{{.Version}}')
	[ "$got" = "$HELM" ] || die "built helm says $got, want $HELM"
	set_stamp helm "$HELM"
else
	step "helm $HELM present ($ROOT/bin/helm)"
fi
step "done in $(($(date +%s) - T0)) s"
