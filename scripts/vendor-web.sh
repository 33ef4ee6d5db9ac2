#!/usr/bin/env bash
# vendor-web.sh — fetch the pinned browser libraries of the terminal and
# screen pages from npm and write them into internal/pages/assets, where the
# binary embeds them (the pages load nothing from another origin). Run it
# only to change a version; its output is committed.
#
#   xterm.js + its fit addon: used as shipped (UMD builds).
#   noVNC: ships ES modules only (one with a top-level await); esbuild bundles
#   core/rfb.js into one module script
#   that defines window.noVNC.RFB, which the page inlines as type=module.
set -euo pipefail
XTERM=6.0.0
XTERM_FIT=0.11.0
NOVNC=1.7.0
ESBUILD=0.28.2

here=$(cd "$(dirname "$0")/.." && pwd)
out="$here/internal/pages/assets"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "@xterm/xterm@$XTERM" "@xterm/addon-fit@$XTERM_FIT" "@novnc/novnc@$NOVNC" >/dev/null
for f in *.tgz; do mkdir "${f%.tgz}" && tar -xzf "$f" -C "${f%.tgz}"; done
install -m 0644 "xterm-xterm-$XTERM/package/lib/xterm.js" "$out/xterm.js"
install -m 0644 "xterm-xterm-$XTERM/package/css/xterm.css" "$out/xterm.css"
install -m 0644 "xterm-addon-fit-$XTERM_FIT/package/lib/addon-fit.js" "$out/addon-fit.js"
printf 'import RFB from "./core/rfb.js";\nwindow.noVNC = { RFB };\n' > "novnc-novnc-$NOVNC/package/entry.js"
npx --yes "esbuild@$ESBUILD" "novnc-novnc-$NOVNC/package/entry.js" --bundle --format=esm --minify \
	--target=es2022 --log-level=warning --outfile="$out/novnc.js"
cat > "$out/VERSIONS" <<VERSIONS
@xterm/xterm $XTERM (MIT)
@xterm/addon-fit $XTERM_FIT (MIT)
@novnc/novnc $NOVNC (MPL-2.0), bundled with esbuild $ESBUILD
VERSIONS
ls -l "$out"
