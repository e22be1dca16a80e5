#!/usr/bin/env bash
# Install what bigbinf needs on Debian 12 (as root): the system tools and servers from
# apt, and the Python package in a venv at .venv.  Idempotent; safe to run again.
#   scripts/setup.sh          # what the demo and the exporter need
#   scripts/setup.sh --test   # also what the tests need (Go, for the compose.yaml check)
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
  tcpdump tshark                           # capture; tshark is the tests' independent truth
  openssh-server openssh-client            # scp/sftp server and client in the lab
  iperf3                                   # memory-to-memory baseline
  coreutils curl lftp vsftpd rsync nginx-light        # clients and servers of the protocols
  globus-gridftp-server-progs globus-gass-copy-progs libglobus-xio-udt-driver  # GridFTP (+UDT)
  xrootd-server xrootd-client
  prometheus prometheus-node-exporter prometheus-alertmanager  # the monitoring stack (+promtool, amtool)
  openssl util-linux passwd               # the tests: a CA for the web config's TLS; setpriv, unshare; useradd
  nftables e2fsprogs mount                # the verdict matrix: a policer, a loop-mounted slow disk
  systemd                                 # systemd-analyze verify of packaging/ (nothing is started)
  chromium chromium-driver                # the exporter's pages, tested in a real browser (selenium)
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Debian's prometheus packages would start system services where systemd runs; the
  # demo starts its own on loopback, so keep the package scripts from starting anything.
  # An existing policy-rc.d (container images ship one) is kept and put back afterwards.
  if [ -e /usr/sbin/policy-rc.d ]; then cp -p /usr/sbin/policy-rc.d /usr/sbin/policy-rc.d.bigbinf-saved; fi
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'if [ -e /usr/sbin/policy-rc.d.bigbinf-saved ]; then mv /usr/sbin/policy-rc.d.bigbinf-saved /usr/sbin/policy-rc.d; else rm -f /usr/sbin/policy-rc.d; fi' EXIT
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
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
  echo "setup: installing Go from bookworm-backports (for the compose.yaml test)"
  export DEBIAN_FRONTEND=noninteractive
  # The same mirror apt already uses here (deb822 sources, or the classic list).
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -n 1)
  [ -n "$mirror" ] || mirror=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null)
  [ -n "$mirror" ] || { echo "setup: no Debian mirror found in apt's sources; install Go >= 1.21 by hand" >&2; exit 1; }
  echo "deb $mirror bookworm-backports main" > /etc/apt/sources.list.d/bookworm-backports.list
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends -t bookworm-backports golang-go >/dev/null
fi

# The compose stack brought up for real (tests/e2e/test_compose_stack.py): rootful podman
# with runc, netavark + aardvark-dns (networks with name resolution; iptables for their
# NAT) and debootstrap (the base image, built from apt's mirror).  podman-compose comes
# from the test extra below: Debian 12's is too old for compose.yaml (pyproject.toml).
if [ "$FOR_TESTS" = 1 ]; then
  container_missing=()
  for p in podman runc netavark aardvark-dns iptables debootstrap; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || container_missing+=("$p")
  done
  if [ ${#container_missing[@]} -gt 0 ]; then
    echo "setup: installing ${container_missing[*]} (for the compose stack test)"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${container_missing[@]}" >/dev/null
  fi
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test,report]'
echo "setup: done ($(.venv/bin/bigbinf-exporter --version))"
