# Shortcuts; the quick start itself needs no make: scripts/demo.sh | scripts/test.sh
.PHONY: setup demo demo-stop test test-fast lint check rules dashboards lab-up lab-down

setup:
	scripts/setup.sh

demo:
	scripts/demo.sh

demo-stop:
	scripts/demo-stop.sh

test:
	scripts/test.sh

# Unit tests only (no root, no lab, no Prometheus): tests/unit.
test-fast:
	.venv/bin/python -m pytest -ra tests/unit

# What CI checks before the tests: lint, format, types.
lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

check:
	.venv/bin/bigbinf-exporter --config.file schedules/lab.yaml --config.check
	promtool check config prometheus/prometheus.yml
	promtool check config prometheus/prometheus-compose.yml
	promtool test rules prometheus/tests/*.yml
	amtool check-config prometheus/alertmanager.yml
	.venv/bin/python -m bigbinf.mixin.rules --check
	.venv/bin/python -m bigbinf.mixin.dashboards --check

# Regenerate the committed rules and dashboards after changing their generators.
rules:
	.venv/bin/python -m bigbinf.mixin.rules

dashboards:
	.venv/bin/python -m bigbinf.mixin.dashboards

lab-up:
	.venv/bin/bigbinf-exporter --config.file schedules/lab.yaml lab up

lab-down:
	.venv/bin/bigbinf-exporter --config.file schedules/lab.yaml lab down
