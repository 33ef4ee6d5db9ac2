# shellcheck shell=bash
# lib.sh — shell functions shared by the scripts here (sourced, not run).

# preamble NAME: what a script begins with, its messages prefixed by NAME:
# T0 (its start), step MSG (progress, stamped with the seconds since T0),
# die MSG (an error on stderr, exit 1).
preamble() {
	SCRIPT=$1
	T0=$(date +%s)
}
step() { printf '[%s %4ss] %s\n' "$SCRIPT" "$(($(date +%s) - T0))" "$*"; }
die() {
	printf '[%s] error: %s\n' "$SCRIPT" "$*" >&2
	exit 1
}

# help_if_asked ARG...: -h or --help as the first ARG prints the calling
# script's header comment (line 2 up to its `set -` line) and exits.
help_if_asked() {
	case ${1:-} in -h | --help)
		sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
		exit 0
		;;
	esac
}

# go_ok BIN: BIN is a Go of at least 1.21, the first that can fetch the
# toolchain go.mod asks for (GOTOOLCHAIN=auto).
go_ok() {
	local v major rest minor
	v=$(cd / && GOTOOLCHAIN=local "$1" env GOVERSION 2>/dev/null) || return 1
	v=${v#go}
	major=${v%%.*}
	rest=${v#*.}
	minor=${rest%%[!0-9]*}
	[[ $major =~ ^[0-9]+$ && $minor =~ ^[0-9]+$ ]] || return 1
	((major > 1 || (major == 1 && minor >= 21)))
}

find_go() {
	local c
	for c in "$(command -v go 2>/dev/null || true)" /usr/local/go/bin/go /usr/lib/go-1.*/bin/go; do
		if [ -n "$c" ] && [ -x "$c" ] && go_ok "$c"; then
			echo "$c"
			return 0
		fi
	done
	return 1
}

# The builds of kube-up.sh and helm.sh, into ROOT (set by the caller, as is
# die): one Go cache and module cache under ROOT/go, binaries in ROOT/bin,
# each stamped with what it was built from.

# root_go_env: the Go environment of those builds (static, no VCS stamps,
# the local toolchain, no DWARF: the binaries are stripped at link, and not
# writing it saves the compiler ~11% of its CPU, measured on client-go cold:
# 123.6 vs 110.2 CPU-s; a fresh machine compiles ~20 minutes of them).
root_go_env() {
	export GOMODCACHE=$ROOT/go/mod GOCACHE=$ROOT/go/cache GOPATH=$ROOT/go
	export GOFLAGS="-buildvcs=false -gcflags=all=-dwarf=false" CGO_ENABLED=0 GOTOOLCHAIN=local
}

# need_build NAME STAMP BIN...: true when a binary is missing or the stamp
# recorded for NAME differs from STAMP.
need_build() {
	local name=$1 stamp=$2 b
	shift 2
	for b in "$@"; do [ -x "$ROOT/bin/$b" ] || return 0; done
	[ "$(cat "$ROOT/bin/.stamp-$name" 2>/dev/null)" != "$stamp" ]
}
set_stamp() { printf '%s\n' "$2" >"$ROOT/bin/.stamp-$1"; }

# quiet CMD...: run a go command with its output in ROOT/logs/build.log,
# shown only when it fails.
quiet() {
	printf '\n==== %s %s (in %s)\n' "$(date -u +%FT%TZ)" "$*" "$(pwd)" >>"$ROOT/logs/build.log"
	"$@" >>"$ROOT/logs/build.log" 2>&1 && return 0
	tail -n 40 "$ROOT/logs/build.log" >&2
	die "failed: $* (log $ROOT/logs/build.log)"
}
