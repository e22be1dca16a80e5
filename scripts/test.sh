#!/usr/bin/env bash
# Install what the tests need, check lint, format and types, then run every test
# (CI runs this through .ci/run).  Arguments go to pytest, e.g. scripts/test.sh tests/unit
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --test
echo "test: ruff check, ruff format --check, mypy"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy
exec .venv/bin/python -m pytest -ra "$@"
