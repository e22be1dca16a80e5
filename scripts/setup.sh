#!/usr/bin/env bash
# Install what bigbinf needs on Debian 12 (as root): the system tools and servers from
# apt, and the Python package in a venv at .venv.  Idempotent; safe to run again.
#   scripts/setup.sh          # runtime + tests
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" -ne 0 ]; then
  echo "setup: run as root (apt-get, network namespaces, tcpdump)" >&2
  exit 1
fi

APT_PACKAGES=(
  python3 python3-venv python3-pip        # the exporter
  iproute2 ethtool kmod procps             # the lab: namespaces, veth, tc, offloads
  tcpdump tshark                           # capture; tshark is the tests' independent truth
  openssh-server openssh-client            # scp/sftp server and client in the lab
  iperf3                                   # memory-to-memory baseline
  prometheus prometheus-node-exporter prometheus-alertmanager  # the monitoring stack (+promtool, amtool)
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
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/pip install -q --upgrade pip >/dev/null
.venv/bin/pip install -q -e '.[test,report]'
echo "setup: done ($(.venv/bin/bigbinf-exporter --version))"
