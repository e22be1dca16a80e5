#!/usr/bin/env bash
# Stop everything scripts/demo.sh started (by PID), each waited for until it has exited
# (SIGTERM; the exporter ends its round, journals what it measured and ends its children
# within seconds: issue 36; SIGKILL only past STOP_SECONDS, and said), then take the
# lab down.  One stop at a time: a second one (demo.sh's own exit while `make demo-stop`
# runs) waits for the first to finish and does nothing more.
set -uo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-schedules/demo.yaml}
STATE=${STATE:-/var/lib/bigbinf/demo}
STOP_SECONDS=${STOP_SECONDS:-30}  # as the systemd unit's TimeoutStopSec
mkdir -p "$STATE"
exec 9>"$STATE/stop.lock"
if ! flock -n 9; then
  flock 9  # another stop is under way: once it is done, nothing is left to do
  exit 0
fi
# demo.sh's loop reads this: the exporter it watches was stopped on purpose.
touch "$STATE/stopping"
trap 'rm -f "$STATE/stopping"' EXIT

running() {  # pid: a live process, not a zombie
  local state
  state=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)
  [ -n "$state" ] && [ "$state" != Z ]
}

for pidfile in "$STATE"/pids/*.pid; do
  [ -e "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  name=$(basename "$pidfile" .pid)
  if kill "$pid" 2>/dev/null; then
    started=$(date +%s%N)
    deadline=$(( $(date +%s) + STOP_SECONDS ))
    while running "$pid" && [ "$(date +%s)" -lt "$deadline" ]; do sleep 0.1; done
    if running "$pid"; then
      kill -9 "$pid" 2>/dev/null
      echo "$name ($pid) did not exit within $STOP_SECONDS s: killed; see $STATE/$name.log" >&2
    else
      ms=$(( ($(date +%s%N) - started) / 1000000 ))
      echo "stopped $name ($pid) in $((ms / 1000)).$((ms % 1000 / 100)) s"
    fi
  fi
  rm -f "$pidfile"
done
.venv/bin/bigbinf-exporter --config.file "$CONFIG" lab down
