#!/usr/bin/env bash
# Stops the cluster of a demo run under HOME (`bench/demo_down.sh HOME`) and
# deletes its files: as root they live outside the home, under /var/tmp
# (the home's `pg` links to them), and a bench's many runs would fill a disk.
set -euo pipefail
home="$1"
if TIDEMARK_HOME="$home" target/release/tidemark db down > /dev/null 2>&1; then
    pg="$(readlink "$home/pg" || true)"
    case "$pg" in /var/tmp/tidemark-*) rm -rf "$pg" "$home/pg" ;; esac
fi
