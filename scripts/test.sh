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
# Independent tests in parallel (pytest-xdist): a module goes whole to one worker, so a
# module's shared lab is built once; labs have unique names, servers free ports.  Most
# of the lab and e2e tiers wait on shaped links and on Prometheus, so more workers than
# cores pay (docs/benchmarks.md, "The test suite").  BIGBINF_TEST_WORKERS=0 runs serially.
# --no-loadscope-reorder: the modules go out in tests/conftest.py's order, longest first
# (xdist would order them by their number of tests, leaving a long module for the end).
# The suite starts the exporter hundreds of times: compiled once here, each start reads
# bytecode rather than compiling the package again (about 0.3 CPU-s a start where the
# environment sets PYTHONDONTWRITEBYTECODE, as CI shells may; an installed exporter is
# compiled by pip).
.venv/bin/python -m compileall -q -j 0 exporter/bigbinf tests >/dev/null
# The pcap analyser compiled once into numba's cache here (about a minute on a busy host
# from a fresh clone; a second where the cache holds it), not by the first exporter of
# each worker at once, inside a test's first round: each later start loads it.  Tests of
# the compilation itself use caches of their own (NUMBA_CACHE_DIR).
.venv/bin/python -m bigbinf.measure.wire.analyser_worker --warm-up >/dev/null
workers=${BIGBINF_TEST_WORKERS:-4}
parallel=()
[ "$workers" != 0 ] && parallel=(-n "$workers" --dist loadfile --no-loadscope-reorder)
# The slowest tests named at the end: where the suite's time goes (docs/benchmarks.md, "The test suite").
exec .venv/bin/python -m pytest -ra --durations=25 "${parallel[@]}" "$@"
