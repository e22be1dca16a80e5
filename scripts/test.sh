#!/usr/bin/env bash
# Install what the tests need, then run them all (CI runs this through .ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
exec .venv/bin/python -m pytest -ra "$@"
