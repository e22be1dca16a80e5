#!/usr/bin/env bash
# Stop everything scripts/demo.sh started (by PID), then take the lab down.
set -uo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-schedules/demo.yaml}
STATE=${STATE:-/var/lib/bigbinf/demo}
for pidfile in "$STATE"/pids/*.pid; do
  [ -e "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill "$pid" 2>/dev/null && echo "stopped $(basename "$pidfile" .pid) ($pid)"
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -9 "$pid" 2>/dev/null
  rm -f "$pidfile"
done
.venv/bin/bigbinf-exporter --config.file "$CONFIG" lab down
