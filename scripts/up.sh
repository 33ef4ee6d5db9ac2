#!/usr/bin/env bash
# up.sh — set up a fresh Debian 12 machine and run the server: installs the
# dependencies (scripts/deps.sh), mints an API key, prints a ready-to-paste
# curl, then serves in the foreground (Ctrl-C stops the server; sandboxes
# survive and are found again on the next start).
#
#   sudo scripts/up.sh
#
# Environment:
#   SANDBOX_DATA    data directory (default /var/lib/sandbox)
#   SANDBOX_IMAGES  built class images (default /var/lib/sandbox/images)
#   SANDBOX_LISTEN  HTTP address (default 127.0.0.1:8080)
#   SANDBOX_ORG     org of the minted key (default demo)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
. "$REPO/scripts/lib.sh"
preamble up

[ "$(id -u)" -eq 0 ] || die "must run as root (sudo $0)"

cd "$(dirname "${BASH_SOURCE[0]}")/.."
DATA=${SANDBOX_DATA:-/var/lib/sandbox}
IMAGES=${SANDBOX_IMAGES:-/var/lib/sandbox/images}
LISTEN=${SANDBOX_LISTEN:-127.0.0.1:8080}
ORG=${SANDBOX_ORG:-demo}

SANDBOX_IMAGES=$IMAGES SANDBOX_SDK_DEPS=1 bash scripts/deps.sh

# Every idle sandbox holds ~30 host tasks (its sentry's, gofer's and
# systrap stubs' threads): the kernel's default pid_max of 32768 (a host
# whose init is not systemd keeps it) runs out near 1,000 sandboxes, and
# the host then stalls. systemd's 4194304 is kept; a lower one is raised,
# now and at boot.
if [ "$(cat /proc/sys/kernel/pid_max)" -lt 4194304 ]; then
	step "raising kernel.pid_max to 4194304 (was $(cat /proc/sys/kernel/pid_max)), in /etc/sysctl.d/60-sandbox.conf too"
	sysctl -q -w kernel.pid_max=4194304
	printf 'kernel.pid_max = 4194304\n' >/etc/sysctl.d/60-sandbox.conf
fi

install -d -m 0700 "$DATA"
step "minting a tenant API key for org $ORG in $DATA"
KEY=$(bin/sandbox keys create --data "$DATA" --org "$ORG")

# The address a client on this machine dials.
host=${LISTEN%:*}
port=${LISTEN##*:}
case $host in
'' | 0.0.0.0 | '[::]') host=127.0.0.1 ;;
esac
URL="http://$host:$port"

cat <<EOF

Server starting on $LISTEN (data $DATA, images $IMAGES).
API key for org $ORG (shown once, stored hashed):

  $KEY

In another terminal, lease an exec sandbox, then run Python in it:

ID=\$(curl -sS -X POST $URL/v1/sandbox -H 'Authorization: Bearer $KEY' -d '{"class":"exec"}' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p'); echo \$ID
curl -sS -X POST $URL/v1/sandbox/\$ID/exec -H 'Authorization: Bearer $KEY' -d '{"argv":["python3","-c","print(6*7)"]}'

The second command answers {"exitCode":0,"stdout":"42\n","stderr":""}.

Or hand code to the interpreter (13 languages; pass session_id again to keep its files):

curl -sS $URL/v1/exec -H 'Authorization: Bearer $KEY' -d '{"language":"py","code":"print(6*7)"}'

Or from Python (the SDK installs from this checkout, no package index). A sandbox may ask for the
internet (public addresses only; a lease without "network" gets no network at all):

python3 -m venv --system-site-packages /tmp/sbx && /tmp/sbx/bin/pip install -q --no-build-isolation --no-index ./sdk/python
SANDBOX_URL=$URL SANDBOX_KEY=$KEY /tmp/sbx/bin/python3 - <<'PY'
from sandboxd import Sandbox
with Sandbox.create(network={"allow": ["internet"]}) as sbx:
    r = sbx.commands.run("pip install -q --user humanize")
    print(r.exit_code, r.stderr)                       # 0
    sbx.run_code("import humanize, pandas as pd")      # a code context: a Jupyter kernel, its state kept
    ex = sbx.run_code("humanize.naturalsize(10**6)")
    print(ex.text, ex.error)                           # '1.0 MB' None
    ex = sbx.run_code("pd.DataFrame({'a': [1, 2]})")
    print(ex.results[0].html[:30])                     # <div>… an HTML table
PY

A shell in the browser: POST $URL/v1/sandbox/\$ID/terminal/ticket, then open $URL + the "url" it answers.
MCP clients connect to $URL/mcp with the same key. docs/api.md has the rest of the API.

This key is tenant-scoped: the org's sandboxes only. An admin key manages the org's keys
(--scope admin), and one of the operator org every org's keys and quotas and /metrics:

  bin/sandbox keys create --data $DATA --org system --scope admin

EOF

# Sandboxes may ask for the internet (--network-allow internet: every public
# address, never this host, its networks or the cloud's metadata); none gets
# a network it did not ask for. SANDBOX_NETWORK_ALLOW="" allows none.
exec bin/sandbox serve --data "$DATA" --listen "$LISTEN" --images "$IMAGES" --network-allow "${SANDBOX_NETWORK_ALLOW-internet}"
