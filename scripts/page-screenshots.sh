#!/usr/bin/env bash
# The screenshots in docs/pages.md, made by the browser test itself
# (tests/e2e/test_page_browser.py) of its exporter on a seeded journal: what an operator
# sees, judged, unjudged, failed and UDT transfers and a series in an open regression.
# Needs chromium and chromium-driver (scripts/setup.sh --test).
set -euo pipefail
cd "$(dirname "$0")/.."
BIGBINF_SCREENSHOTS="$PWD/docs/pages" .venv/bin/python -m pytest -q -n 0 -p no:cacheprovider \
  tests/e2e/test_page_browser.py -k "slow_and_why or screenshot or busy_host"
ls -l docs/pages/*.png
