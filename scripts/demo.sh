#!/usr/bin/env bash
# The main job on the embedded default: the lab as the remote site, Prometheus,
# node-exporter, Alertmanager and the exporter on a fast schedule, all on loopback.
# Ctrl-C (or `make demo-stop` from another terminal) stops everything it started.
set -euo pipefail
cd "$(dirname "$0")/.."

CONFIG=${CONFIG:-schedules/demo.yaml}
STATE=${STATE:-/var/lib/bigbinf/demo}
PROMETHEUS_PORT=${PROMETHEUS_PORT:-9090}
ALERTMANAGER_PORT=${ALERTMANAGER_PORT:-9093}
NODE_EXPORTER_PORT=${NODE_EXPORTER_PORT:-9100}
EXPORTER_PORT=${EXPORTER_PORT:-9753}
WEBHOOK_PORT=${WEBHOOK_PORT:-5001}
PIDS="$STATE/pids"
EXPORTER=.venv/bin/bigbinf-exporter
# $CONFIG with its schedule sized to this host: the exporter runs this one.
FITTED="$STATE/schedule.yaml"

echo "demo: installing what the demo needs first (scripts/setup.sh; nothing when it is there)"
scripts/setup.sh

for pair in PROMETHEUS_PORT:$PROMETHEUS_PORT ALERTMANAGER_PORT:$ALERTMANAGER_PORT \
            NODE_EXPORTER_PORT:$NODE_EXPORTER_PORT EXPORTER_PORT:$EXPORTER_PORT WEBHOOK_PORT:$WEBHOOK_PORT; do
  port=${pair#*:}
  if ss -Hltn "sport = :$port" | grep -q .; then
    echo "demo: port $port is in use (another Prometheus or exporter?): stop it, or set ${pair%%:*}=<free port>" >&2
    exit 1
  fi
done

mkdir -p "$STATE/prometheus" "$STATE/alertmanager" "$PIDS"
# Prometheus reads the repo's config with the ports of this run substituted.
sed -e "s/127.0.0.1:9753/127.0.0.1:$EXPORTER_PORT/; s/127.0.0.1:9100/127.0.0.1:$NODE_EXPORTER_PORT/" \
    -e "s/127.0.0.1:9093/127.0.0.1:$ALERTMANAGER_PORT/; s/127.0.0.1:9090/127.0.0.1:$PROMETHEUS_PORT/" \
    prometheus/prometheus.yml > "$STATE/prometheus.yml"
# Alertmanager notifies the demo's webhook logger, on this run's port.
sed -e "s/127.0.0.1:5001/127.0.0.1:$WEBHOOK_PORT/" prometheus/alertmanager.yml > "$STATE/alertmanager.yml"
# A fresh copy of the rules: a rule file since removed from the repo must not stay loaded.
rm -rf "$STATE/rules" && cp -r prometheus/rules "$STATE/rules"
# Refuse to start on a broken config rather than run without rules or alerting.
promtool check config "$STATE/prometheus.yml" >/dev/null
amtool check-config "$STATE/alertmanager.yml" >/dev/null

cleanup() {
  trap - INT TERM EXIT
  echo; echo "demo: stopping"
  scripts/demo-stop.sh
}
trap cleanup INT TERM EXIT

"$EXPORTER" --config.file "$CONFIG" lab up

# A round a minute does not fit a busy host (issue 47: 7 of 7 rounds overran, every other
# start skipped, BigbinfRoundsOverrun firing): the schedule is sized from the rounds the
# journal holds, as --config.check estimates them; with none yet, the first round runs
# alone and the schedule is sized from it once it has ended (resize_to_rounds).
fitted=0
said=$(.venv/bin/python -m bigbinf.lab.fit_schedule "$CONFIG" "$FITTED") || fitted=$?
[ "$fitted" = 0 ] || [ "$fitted" = 3 ] || exit 1
echo "demo: $said"

start() {  # name, argv...
  local name=$1; shift
  "$@" >"$STATE/$name.log" 2>&1 &
  echo $! > "$PIDS/$name.pid"
}
start prometheus prometheus --config.file="$STATE/prometheus.yml" --storage.tsdb.path="$STATE/prometheus" \
  --web.listen-address="127.0.0.1:$PROMETHEUS_PORT" --web.enable-lifecycle
start node-exporter prometheus-node-exporter --web.listen-address="127.0.0.1:$NODE_EXPORTER_PORT" \
  --no-collector.systemd
start webhook python3 prometheus/webhook_logger.py --listen "127.0.0.1:$WEBHOOK_PORT"
start alertmanager prometheus-alertmanager --config.file="$STATE/alertmanager.yml" \
  --storage.path="$STATE/alertmanager" --web.listen-address="127.0.0.1:$ALERTMANAGER_PORT" --cluster.listen-address=
start exporter "$EXPORTER" --config.file "$FITTED" --web.listen-address "127.0.0.1:$EXPORTER_PORT"

# After each round the schedule is sized again from the rounds measured (the first one,
# then the last few: a host that got busier or quieter since), and the exporter reloads
# it (SIGHUP) where the interval changed.
resize_to_rounds() {
  local exporter seen=0 rounds before
  exporter=$(cat "$PIDS/exporter.pid")
  while kill -0 "$exporter" 2>/dev/null; do
    rounds=$(curl -sf "http://127.0.0.1:$EXPORTER_PORT/metrics" 2>/dev/null | sed -n 's/^bigbinf_rounds_total \([0-9]*\).*/\1/p')
    if [ -n "$rounds" ] && [ "$rounds" != "$seen" ] && [ "$rounds" -gt 0 ]; then
      seen=$rounds
      before=$(cat "$FITTED")
      if said=$(.venv/bin/python -m bigbinf.lab.fit_schedule "$CONFIG" "$FITTED") \
          && [ "$(cat "$FITTED")" != "$before" ] && kill -HUP "$exporter"; then
        echo "demo: $said"
      fi
    fi
    sleep 5
  done
}
resize_to_rounds &
echo $! > "$PIDS/resize.pid"

sleep 2
for name in prometheus node-exporter webhook alertmanager exporter; do
  if ! kill -0 "$(cat "$PIDS/$name.pid")" 2>/dev/null; then
    echo "demo: $name failed to start; its log:" >&2
    tail -20 "$STATE/$name.log" >&2
    exit 1
  fi
done

# The first round's time as the exporter schedules it (schedule.start_delay after its
# start), once it has said it (after restoring its journal: up to 30 s is waited for).
echo "demo: waiting for the exporter to restore its journal and schedule the first round"
for _ in $(seq 60); do grep -q "next round at" "$STATE/exporter.log" && break; sleep 0.5; done
FIRST=$(sed -n 's/.*next round at //p' "$STATE/exporter.log" | tail -n 1)
cat <<MSG

bigbinf demo is running: the first round of transfers at ${FIRST:-(see the log)}, against the lab; the schedule as said above.
  the exporter's pages http://127.0.0.1:$EXPORTER_PORT/ (the last transfers, why each was slow; its log)
  exporter metrics   http://127.0.0.1:$EXPORTER_PORT/metrics
  Prometheus         http://127.0.0.1:$PROMETHEUS_PORT/graph?g0.expr=bigbinf_last_transfer_throughput_bytes_per_second%20unless%20ignoring(outcome)%20(bigbinf_last_transfer_outcome%7Boutcome%3D%22skipped%22%7D%20%3D%3D%201)&g0.tab=0
  Alertmanager       http://127.0.0.1:$ALERTMANAGER_PORT/
  notifications      $STATE/webhook.log (what Alertmanager sent to its webhook)
  node-exporter      http://127.0.0.1:$NODE_EXPORTER_PORT/metrics
  journal            $(grep -A1 '^journal:' "$CONFIG" | awk '/path:/ {print $2}')
  logs               $STATE/*.log
  one round now      $EXPORTER --config.file $FITTED once
  left behind        $STATE (journal, Prometheus data, logs), the transfers' work and capture directories: README.md, "Removing the demo"
Stop with Ctrl-C (or 'make demo-stop' from another terminal).
MSG

# Follow the exporter's log until interrupted or until something dies.
tail -n +1 -f "$STATE/exporter.log" &
echo $! > "$PIDS/tail.pid"
while kill -0 "$(cat "$PIDS/exporter.pid" 2>/dev/null)" 2>/dev/null; do sleep 2; done
if [ -e "$STATE/stopping" ] || [ ! -e "$PIDS/exporter.pid" ]; then
  # `make demo-stop` stopped it, and takes the rest down itself: not a second stop.
  trap - INT TERM EXIT
  exit 0
fi
echo "demo: the exporter stopped; see $STATE/exporter.log" >&2
exit 1
