# Shortcuts; the quick start itself needs no make: scripts/demo.sh | scripts/test.sh
.PHONY: setup demo demo-stop test test-fast check rules dashboards lab-up lab-down

setup:
	scripts/setup.sh

demo:
	scripts/demo.sh

demo-stop:
	scripts/demo-stop.sh

test:
	scripts/test.sh

# Unit tests only (no root, no lab).
test-fast:
	.venv/bin/python -m pytest -ra -m "not lab"

check:
	.venv/bin/bigbinf-exporter --config.file schedules/lab.yaml --config.check
	promtool check config prometheus/prometheus.yml
	promtool check config prometheus/prometheus-compose.yml
	promtool test rules prometheus/tests/*.yml
	amtool check-config prometheus/alertmanager.yml
	.venv/bin/python prometheus/generate_rules.py --check
	.venv/bin/python grafana/generate.py --check

# Regenerate the committed rules and dashboards after changing their generators.
rules:
	.venv/bin/python prometheus/generate_rules.py

dashboards:
	.venv/bin/python grafana/generate.py

lab-up:
	.venv/bin/bigbinf-exporter --config.file schedules/lab.yaml lab up

lab-down:
	.venv/bin/bigbinf-exporter --config.file schedules/lab.yaml lab down
