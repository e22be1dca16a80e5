"""The image's numba cache where nothing is writable (another user, a read-only root):
numba then refuses to use the cache at all, even to load.  Checked for real in a
private mount namespace (root) with read-only bind mounts, as in such a container."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import bigbinf

EXPORTER_TREE = Path(bigbinf.__file__).parent  # numba's in-tree cache (__pycache__) is here

PROBE = """
import json, os, sys
from bigbinf.measure.wire.analyse import analyse_pcap
from bigbinf.measure.wire.analyser_worker import _tiny_capture, analyse_in_worker, shutdown

if __name__ == "__main__":
    import logging
    logging.basicConfig(level=logging.INFO)  # the worker logs at the exporter's level
    way, directory = sys.argv[1:]
    path = os.path.join(directory, "tiny.pcap")
    from pathlib import Path
    _tiny_capture(Path(path), 40)
    if way == "worker":
        analysis = analyse_in_worker(path, "198.18.0.1", "198.18.0.2")
        shutdown()
        cache = None
    else:
        analysis = analyse_pcap(path, "198.18.0.1", "198.18.0.2", engine="auto")
        from bigbinf.measure.wire import fastscan
        cache = type(fastscan.scan._cache).__name__
    expected = analyse_pcap(path, "198.18.0.1", "198.18.0.2", engine="python")
    print(json.dumps({"equal": analysis == expected, "records": analysis.records, "cache": cache}))
"""


# In the private mount namespace: bind each of the first N paths read-only onto itself,
# then become the command that follows (argv lists all the way, no shell).
MOUNT_READ_ONLY_THEN_EXEC = """
import os, subprocess, sys
n = int(sys.argv[1])
for path in sys.argv[2 : 2 + n]:
    subprocess.run(["mount", "--bind", "-o", "ro", path, path], check=True)
os.execv(sys.argv[2 + n], sys.argv[2 + n :])
"""


def _read_only_run(cache: Path, scratch: Path, way: str) -> tuple[dict[str, object], str]:
    """The probe with the cache directory and the package tree bind-mounted read-only
    and no writable user cache: what a non-root user or `--read-only` container sees."""
    (scratch / "tmp").mkdir(exist_ok=True)
    script = scratch / "probe.py"  # a file, so the spawned worker can import __main__ guarded
    script.write_text(PROBE)
    env = {
        **os.environ,
        "NUMBA_CACHE_DIR": str(cache),
        "NUMBA_CPU_NAME": "generic",
        "XDG_CACHE_HOME": "/proc/no-cache-here",  # numba's user-wide cache: not creatable
        "TMPDIR": str(scratch / "tmp"),
    }
    read_only = [str(cache), str(EXPORTER_TREE)]
    probe = [sys.executable, str(script), way, str(scratch)]
    unshared = ["unshare", "-m", "--propagation", "private", sys.executable, "-c", MOUNT_READ_ONLY_THEN_EXEC]
    run = subprocess.run(
        [*unshared, str(len(read_only)), *read_only, *probe],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    )
    return json.loads(run.stdout.splitlines()[-1]), run.stderr


@pytest.mark.lab
def test_a_read_only_cache_is_copied_by_the_worker_and_never_crashes(tmp_path: Path) -> None:
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare (a private mount namespace)")
    cache = tmp_path / "cache"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "NUMBA_CPU_NAME": "generic"}
    subprocess.run(
        [sys.executable, "-m", "bigbinf.measure.wire.analyser_worker", "--warm-up"], check=True, env=env, timeout=300
    )  # the image's build step
    assert list(cache.rglob("fastscan.scan-*.nbi"))

    # In-process, numba finds no writable cache location: fastscan compiles without a
    # cache (a NullCache) and the analysis is still right.
    result, _ = _read_only_run(cache, tmp_path, "in-process")
    assert result == {"equal": True, "records": 120, "cache": "NullCache"}

    # The worker copies the read-only cache to a private directory, analyses from it,
    # and removes the copy when it stops.
    result, stderr = _read_only_run(cache, tmp_path, "worker")
    assert result == {"equal": True, "records": 120, "cache": None}
    assert f"numba's cache {cache} is read-only: using a private copy in {tmp_path / 'tmp'}" in stderr
    assert list((tmp_path / "tmp").iterdir()) == []
