#!/usr/bin/env bash
# `just report-screenshot`: the demo's report page as a real browser draws it
# (headless Chromium, installed from Debian if missing), into
# docs/demo-report.png. Runs the demo first if there is no report yet.
set -euo pipefail
cd "$(dirname "$0")/.."
home="${TIDEMARK_HOME:-.tidemark}"
page="$home/report/index.html"
browser="$(command -v chromium || command -v chromium-browser || true)"
if [ -z "$browser" ]; then
    echo "installing chromium (Debian package)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
    browser="$(command -v chromium)"
fi
[ -f "$page" ] || cargo run --release -- demo
# Chromium's sandbox refuses to run as root.
sandbox=()
[ "$(id -u)" = 0 ] && sandbox=(--no-sandbox)
"$browser" --headless "${sandbox[@]}" --disable-gpu --hide-scrollbars --window-size=1200,2900 \
    --screenshot="$PWD/docs/demo-report.png" "file://$(realpath "$page")" 2>/dev/null
echo "docs/demo-report.png from $page"
