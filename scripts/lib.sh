# shellcheck shell=bash
# lib.sh — shell functions shared by deps.sh and test.sh (sourced, not run).

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
