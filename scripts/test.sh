#!/usr/bin/env bash
# The README's test command: provisions what the tests need and is missing,
# says what it installs, then runs `cargo test --workspace` (any arguments are
# passed on to it). `.ci/run` calls this same script.
#
# What the tests use beyond Rust and a C compiler:
#   - PostgreSQL 15+ server binaries (the embedded cluster),
#   - openssl (the TLS test's certificates), ip from iproute2 (network
#     namespaces), promtool from Debian's prometheus package (the alerts),
#   - Python 3 with pyzmq, for examples/publisher.py: installed into a
#     virtual environment under target/ and handed to the tests through
#     TIDEMARK_PYTHON, so the system's Python is left as it was.
# Debian packages are installed with apt-get when run as root; otherwise the
# script stops and prints the command to run.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf 'scripts/test.sh: %s\n' "$*" >&2; }

apt_install() {
    # Installs Debian packages, or stops with the exact command to run.
    if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "missing: $*"
        say "install it, then run this again:  sudo apt-get install -y --no-install-recommends $*"
        exit 1
    fi
    say "installing Debian packages: $*"
    export DEBIAN_FRONTEND=noninteractive
    if [ -z "${APT_UPDATED:-}" ]; then
        apt-get update -q >&2
        APT_UPDATED=1
    fi
    apt-get install -y -q --no-install-recommends "$@" >&2
}

missing=""
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1; then
    missing="$missing postgresql"
fi
command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"
command -v python3 >/dev/null 2>&1 || missing="$missing python3 python3-venv"
if [ -n "$missing" ]; then
    # shellcheck disable=SC2086
    apt_install $missing
fi

# As root each test cluster's data live under /var/tmp (PostgreSQL will not
# run as root), outside the checkout; the suite makes about a dozen. Say so
# before the tests fail one by one on a full disk.
if [ "$(id -u)" -eq 0 ]; then
    free_gb=$(df -Pk /var/tmp 2>/dev/null | awk 'NR == 2 { print int($4 / 1048576) }' || true)
    if [ "${free_gb:-0}" -lt 10 ]; then
        say "warning: ${free_gb} GB free under /var/tmp; the suite's clusters take up to about 10 GB"
        say "clusters of checkouts since deleted are left there as /var/tmp/tidemark-*; remove those no home links to"
    fi
fi

venv="target/test-venv"
if ! "$venv/bin/python" -c 'import zmq' >/dev/null 2>&1; then
    say "installing pyzmq into $venv (for examples/publisher.py)"
    mkdir -p target
    if ! python3 -m venv "$venv" >&2; then
        rm -rf "$venv"
        apt_install python3-venv
        python3 -m venv "$venv" >&2
    fi
    if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check pyzmq >&2; then
        say "could not install pyzmq from PyPI into $venv"
        say "fix the network or proxy settings for pip, then run this again: $venv/bin/python -m pip install pyzmq"
        exit 1
    fi
fi
TIDEMARK_PYTHON="$(pwd)/$venv/bin/python"
export TIDEMARK_PYTHON

exec cargo test --workspace "$@"
