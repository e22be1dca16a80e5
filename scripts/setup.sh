#!/usr/bin/env bash
# Install what bigbinf needs on Debian 12 (as root): the system tools and servers from
# apt, and the Python package in a venv at .venv.  Idempotent; safe to run again.
#   scripts/setup.sh          # what the demo and the exporter need
#   scripts/setup.sh --test   # also what the tests need (tshark, Chromium, Go, the [test] extras, ...)
# It says what it installs, how much, and how long each step took: a download is never
# mistaken for a hang.
set -euo pipefail
FOR_TESTS=0
[ "${1:-}" = "--test" ] && FOR_TESTS=1
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root (apt-get, network namespaces, tcpdump)" >&2
  exit 1
fi

APT_PACKAGES=(
  python3 python3-venv python3-pip make   # the exporter (make: the Makefile's shortcuts)
  iproute2 ethtool kmod procps             # the lab: namespaces, veth, tc, offloads
  tcpdump                                  # capture
  openssh-server openssh-client            # scp/sftp server and client in the lab
  iperf3                                   # memory-to-memory baseline
  coreutils curl lftp vsftpd rsync nginx-light        # clients and servers of the protocols
  globus-gridftp-server-progs globus-gass-copy-progs libglobus-xio-udt-driver  # GridFTP (+UDT)
  xrootd-server xrootd-client
  prometheus prometheus-node-exporter prometheus-alertmanager  # the monitoring stack (+promtool, amtool)
)
# Only the tests need these (the demo and the exporter never run them).
TEST_APT_PACKAGES=(
  tshark                                  # the tests' independent truth of a capture
  openssl util-linux passwd               # the tests: a CA for the web config's TLS; setpriv, unshare; useradd
  nftables e2fsprogs mount                # the verdict matrix: a policer, a loop-mounted slow disk
  systemd                                 # systemd-analyze verify of packaging/ (nothing is started)
  chromium chromium-driver                # the exporter's pages, tested in a real browser (selenium)
  # The compose stack brought up for real (tests/e2e/test_compose_stack.py): rootful podman
  # with runc, netavark + aardvark-dns (networks with name resolution; iptables for their
  # NAT) and debootstrap (the base image, built from apt's mirror).  podman-compose comes
  # from the test extra: Debian 12's is too old for compose.yaml (pyproject.toml).
  podman runc netavark aardvark-dns iptables debootstrap
)
[ "$FOR_TESTS" = 1 ] && APT_PACKAGES+=("${TEST_APT_PACKAGES[@]}")
SETUP_START=$SECONDS
step_done() {  # what, since
  echo "setup: $1 ($((SECONDS - $2)) s)"
}

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  step=$SECONDS
  echo "setup: ${#missing[@]} Debian packages to install: ${missing[*]}"
  echo "setup: reading the package lists (apt-get update)..."
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # How much, before any of it: apt's own count and sizes, with the dependencies.
  plan=$(LC_ALL=C apt-get install --no-install-recommends --assume-no "${missing[@]}" 2>/dev/null || true)
  # Every package apt sets up: those newly installed and those upgraded as dependencies
  # ("N upgraded, M newly installed": counting only M read "[159/156]").
  total=$(sed -n 's/^\([0-9][0-9]*\) upgraded, \([0-9][0-9]*\) newly installed.*/\1 \2/p' <<<"$plan" | awk '{print $1 + $2}')
  sed -n 's/^\(Need to get .*\)/setup: \1/p; s/^\(After this operation, .*\)/setup: \1/p' <<<"$plan"
  echo "setup: ${total:-?} packages with their dependencies; a few minutes on a fast mirror (each is shown as it is set up)"
  # Debian's prometheus packages would start system services where systemd runs; the
  # demo starts its own on loopback, so keep the package scripts from starting anything.
  # An existing policy-rc.d (container images ship one) is kept and put back afterwards.
  if [ -e /usr/sbin/policy-rc.d ]; then cp -p /usr/sbin/policy-rc.d /usr/sbin/policy-rc.d.bigbinf-saved; fi
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'if [ -e /usr/sbin/policy-rc.d.bigbinf-saved ]; then mv /usr/sbin/policy-rc.d.bigbinf-saved /usr/sbin/policy-rc.d; else rm -f /usr/sbin/policy-rc.d; fi' EXIT
  LC_ALL=C apt-get install -y -q --no-install-recommends "${missing[@]}" 2>&1 \
    | awk -v total="${total:-?}" '/^Setting up / {n++; if (total != "?" && n > total) total = n
                                                   printf "setup: [%d/%s] %s\n", n, total, $3; fflush()}
                                 /^(E|W): / {print; fflush()}'
  step_done "Debian packages installed" "$step"
fi

# Go, for tests/e2e/compose_check (compose.yaml loaded with the compose-go v2 loader, which
# needs Go >= 1.23).  Debian 12's golang-go is 1.19, too old for any compose-go v2;
# bookworm-backports has 1.23.  A Go >= 1.21 already installed is used as it is (it
# fetches the 1.23 toolchain itself through the module proxy when it needs it).
go_usable() {
  local go ver
  go=$(command -v go || true)
  [ -n "$go" ] || { [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go; } || return 1
  ver=$("$go" env GOVERSION 2>/dev/null | sed -n 's/^go1\.\([0-9]*\).*/\1/p')
  [ -n "$ver" ] && [ "$ver" -ge 21 ]
}
if [ "$FOR_TESTS" = 1 ] && ! go_usable; then
  step=$SECONDS
  echo "setup: installing Go from bookworm-backports (for the compose.yaml test; about 100 MB)"
  export DEBIAN_FRONTEND=noninteractive
  # The same mirror apt already uses here (deb822 sources, or the classic list).
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  [ -n "$mirror" ] || { echo "setup: no Debian mirror found in apt's sources; install Go >= 1.21 by hand" >&2; exit 1; }
  echo "deb $mirror bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -t bookworm-backports golang-go >/dev/null
  step_done "Go installed" "$step"
fi

PYTHON=${PYTHON:-python3}
step=$SECONDS
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating the Python venv in .venv"
  "$PYTHON" -m venv .venv
fi
# The demo and the exporter need the package alone (measured from a fresh clone: 320 MB in
# .venv, numba's llvmlite the most of it, 46 s); the tests also its [test] extras and the
# report's [report] (750 MB in .venv: Grafana's SDK, scipy, matplotlib, mypy, ...).
if [ "$FOR_TESTS" = 1 ]; then
  target='.[test,report]'
  installing="installing bigbinf with the tests' and the report's Python packages into .venv (about 750 MB in .venv; a few minutes)"
else
  target='.'
  installing="installing bigbinf and its Python packages into .venv (about 320 MB in .venv; about a minute on a fast link)"
fi
# pip speaks for itself (each package as it is collected, its download's progress, then
# the install): a fresh clone's 166 s of it were silent behind -q.  A venv that holds this
# pyproject.toml's packages already (the stamp, written after a pip run that succeeded)
# is not asked again: the demo runs setup every time.
stamp=.venv/.bigbinf-installed
want="$target $(sha256sum pyproject.toml | cut -d' ' -f1)"
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" = "$want" ] || { [ "$target" = . ] && [ "$have" = ".[test,report] ${want#* }" ]; }; then
  echo "setup: bigbinf's Python packages are in .venv already (pyproject.toml unchanged since; rm $stamp to install again)"
else
  echo "setup: $installing"
  echo "setup: upgrading pip in .venv"
  .venv/bin/pip install -q --upgrade pip >/dev/null
  if ! .venv/bin/pip install -e "$target"; then
    echo "setup: pip could not install $target (its messages are above)" >&2
    exit 1
  fi
  echo "$want" > "$stamp"
fi
step_done "Python packages installed ($(du -sh .venv | cut -f1) in .venv)" "$step"
[ "$FOR_TESTS" = 1 ] || echo "setup: for the report's figures and tests: scripts/setup.sh --test (or .venv/bin/pip install -e '.[report]')"
echo "setup: done in $((SECONDS - SETUP_START)) s ($(.venv/bin/bigbinf-exporter --version))"
