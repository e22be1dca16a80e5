"""A killed exporter leaves nothing: 50 SIGKILLs at random moments of rounds of mixed
transfers, then a start left to finish; before and after compared.  Every other kill
(--with-guardian, a fraction) kills the exporter's guardian at the same moment (`kill -9`
of both, issue 36): then the kernel's parent-death signal and the ssh masters' bounded
ControlPersist alone end what it started (process.owned).

Usage (root; about half an hour):
    sudo .venv/bin/python benchmarks/bench_chaos.py [--kills 50] [--with-guardian 0.5] [--seed N]

The exporter measures a lab (50 Mbit/s) as a plain remote: ssh with a ControlMaster for
its stats and tcp commands, scp both ways with congestion cubic (a route on the sender),
http both ways with tcp_buffer_max (caps on both ends, the remote's over ssh), sftp
(tests/support/chaos.py).  Two whole rounds first (the first also compiles the
analyser): the state after the second is what must hold at the end, and its length is
the horizon the kill moments are drawn from (uniform in [0.2 s, round]).  Each start
resumes the round the last one left and then starts one of its own, so the kills fall
in both.  For each kill: how long until nothing the exporter started ran (processes
carrying its marker, any in the client namespace, ss watchers and sshd sessions in the
remote one, its ssh masters), and what it left for the next start (transfer
directories and captures, undo entries, a round unfinished).  At the end: the
differences before/after (processes, sysctls, routes, files, namespaces, listening
sockets; locally and in the remote namespace), the journal (torn lines, duplicates,
rounds not whole) and /metrics against it.  The lab is removed afterwards, even on
failure.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "exporter"))
sys.path.insert(0, str(ROOT))

from tests.conftest import lab_config  # noqa: E402
from tests.support import chaos  # noqa: E402

from bigbinf import lab  # noqa: E402
from bigbinf.lab import LabLayout  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument(
        "--with-guardian", type=float, default=0.5, help="the fraction of kills that kill the guardian too"
    )
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    name = "bbc" + uuid.uuid4().hex[:7]
    with tempfile.TemporaryDirectory(prefix="bench-chaos-") as tmp:
        work = Path(tmp)
        config = lab_config(
            work, name, link=chaos.LINK, datasets=chaos.DATASETS, protocols=chaos.PROTOCOLS, servers=chaos.SERVERS
        )
        run: chaos.Chaos | None = None
        try:
            lab.up(config)
            run = chaos.Chaos(config, work)
            for _ in range(2):
                proc, seconds = run.run_round()
                run.stop(proc)
            time.sleep(1)
            before = run.snapshot()
            print(f"seed {seed}; a whole round of {len(run.transfers)} transfers took {seconds:.1f} s", flush=True)
            rng = random.Random(seed)
            both_every = round(1 / args.with_guardian) if args.with_guardian > 0 else 0
            for i in range(args.kills):
                with_guardian = bool(both_every) and i % both_every == both_every - 1
                cycle = run.kill_at(rng.uniform(0.2, seconds), with_guardian=with_guardian)
                ended = "STILL RUNNING" if cycle.gone_seconds is None else f"all ended in {cycle.gone_seconds:.2f} s"
                print(
                    f"kill {i + 1:2d}{' +guardian' if with_guardian else ''} at {cycle.killed_after:5.1f} s "
                    f"({cycle.doing[:70]}): {ended}; "
                    f"left {cycle.left_files} files, {cycle.left_undo} undo entries"
                    + (", a round unfinished" if cycle.left_round else "")
                    + "".join(f"\n    still running: {command}" for command in cycle.left_running),
                    flush=True,
                )
            report = chaos.chaos(run, kills=0, seed=seed, horizon=seconds)
            time.sleep(1)
            after = run.snapshot()
            differences = chaos.differences(before, after)
            print(chaos.dumps(chaos.summary(run.cycles)))
            print(f"the last start finished in {report['settle_seconds']:.1f} s")
            rounds = run.rounds()
            print(
                f"journal: {sum(sum(c.values()) for c in rounds.values())} results in {len(rounds)} rounds; "
                f"problems: {report['journal'] or 'none'}"
            )
            print(f"/metrics against the journal: {report['published'] or 'equal'}")
            print(f"leftovers (before/after differences): {chaos.dumps(differences) if differences else 0}")
            print(f"undo journal left: {run.undo.exists()}; round left unfinished: {run.marker.exists()}")
            said = [line for line in run.log.read_text().splitlines() if line.startswith("bigbinf guardian:")]
            unusual = [line for line in said if "did not reach" in line or "ask failed" in line]
            print(f"the guardian's lines: {len(said)}; a master ended by its title or an ask failed: {len(unusual)}")
            print(*unusual, sep="\n")
            running = any(c.gone_seconds is None for c in run.cycles)
            return 1 if differences or report["journal"] or report["published"] or running else 0
        finally:
            if run is not None:
                run.cleanup()
            lab.teardown(LabLayout(config.lab))


if __name__ == "__main__":
    sys.exit(main())
