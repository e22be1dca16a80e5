"""The exporter as packaging/bigbinf-exporter.service runs it, without systemd: a system
user made for the test, exactly the unit's ambient capabilities (setpriv) and system call
filter (tests/support/seccomp_exec.py), in a network
namespace of its own (the lab's client side), completing a round against a remote that is
not a lab remote (the lab's sshd and vsftpd in another namespace, configured by address,
key and ssh_config as a real site is).  The wire bytes equal the kernel's counters, and a
password the round used is nowhere it must not be."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from bigbinf.journal.store import Journal
from bigbinf.lab import LabLayout

from ..conftest import veth_counters
from ..support import session
from ..support.exporter import ROOT
from ..support.prometheus import LoopbackServer, free_port
from ..support.systemd import unit_capabilities

pytestmark = pytest.mark.lab

MiB = 1 << 20


@pytest.fixture
def service_user() -> Iterator[pwd.struct_passwd]:
    """A system user of its own for the test, deleted after (with its group)."""
    name = session.register_user("bbu" + uuid.uuid4().hex[:8])  # the reaper deletes it if this test never ends
    subprocess.run(
        ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent",
         "--shell", "/usr/sbin/nologin", name],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], capture_output=True, timeout=60)


def _closed_dirs(path: Path) -> list[Path]:
    """The directories above `path` (outermost first) that others cannot enter: /root,
    where a pyenv interpreter lives, or the 0700 directory a clone was made in (mktemp -d,
    a home directory)."""
    return [parent for parent in reversed(path.parents) if not os.stat(parent).st_mode & 0o001]


def _mount_script(needed: list[Path], scratch: Path) -> str:
    """sh that makes every path in `needed` reachable for the service user in this private
    mount namespace, then execs the rest: each closed directory above one of them gets a
    tmpfs (mode 0755) over it with only the needed entries bound back, outermost first (a
    closed directory inside a closed directory is bound back, then opened the same way).
    The originals are bound aside first, so every bind reads the real tree.  Nothing
    changes outside the namespace, and no file is copied."""
    children: dict[Path, set[Path]] = {}
    for path in needed:
        for closed in _closed_dirs(path):
            children.setdefault(closed, set()).add(closed / path.relative_to(closed).parts[0])
    steps = ["set -e"]
    kept: dict[Path, Path] = {}
    for closed in sorted(children, key=lambda d: len(d.parts)):
        for child in sorted(children[closed]):
            keep = kept.setdefault(child, scratch / f"keep{len(kept)}")
            steps.append(f"mkdir -p {shlex.quote(str(keep))}")
            steps.append(f"mount --bind {shlex.quote(str(child))} {shlex.quote(str(keep))}")
    for closed in sorted(children, key=lambda d: len(d.parts)):
        steps.append(f"mount -t tmpfs -o mode=0755 tmpfs {shlex.quote(str(closed))}")
        for child in sorted(children[closed]):
            quoted = shlex.quote(str(child))
            steps.append(f"mkdir -p {quoted}")
            steps.append(f"mount --bind {shlex.quote(str(kept[child]))} {quoted}")
    return "; ".join([*steps, 'exec "$@"'])


def _curl_recorder(directory: Path, owner: pwd.struct_passwd) -> Path:
    """A directory for the front of the service user's PATH holding `curl`: it writes its
    argv and environment into `directory` (one file pair per process), then execs the real
    curl.  A short-lived curl cannot be missed, however busy the machine is, where
    sampling /proc can miss it."""
    real = shutil.which("curl")
    assert real, "curl is not installed"
    bindir = directory / "bin"
    bindir.mkdir(parents=True)
    wrapper = bindir / "curl"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"cat /proc/$$/environ > {shlex.quote(str(directory))}/curl.$$.environ\n"
        f"printf '%s\\0' \"$@\" > {shlex.quote(str(directory))}/curl.$$.argv\n"
        # The netrc it was given, as it was when it ran (the exporter removes it after).
        'prev=; for a in "$@"; do [ "$prev" = --netrc-file ] && cat "$a" > '
        f"{shlex.quote(str(directory))}/curl.$$.netrc; prev=$a; done\n"
        f'exec {shlex.quote(real)} "$@"\n'
    )
    wrapper.chmod(0o755)
    os.chown(directory, owner.pw_uid, owner.pw_gid)
    directory.chmod(0o700)
    return bindir


def _recorded(directory: Path, kind: str) -> dict[str, bytes]:
    return {p.name.split(".")[1]: p.read_bytes() for p in directory.glob(f"curl.*.{kind}")}


class ProcWatch:
    """The argv of the service user's processes, sampled every 5 ms while it runs: enough
    for the long-lived ones (the exporter, its capture); the short-lived curl is recorded
    by its wrapper instead (_curl_recorder)."""

    def __init__(self, uid: int) -> None:
        self.uid = uid
        self.argvs: dict[int, bytes] = {}
        self.environs: dict[tuple[int, bytes], bytes] = {}  # (pid, its argv then): environment
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
                try:
                    if os.stat(f"/proc/{pid}").st_uid != self.uid:
                        continue
                    self.argvs[pid] = self.argvs.get(pid, b"") + b"\0" + Path(f"/proc/{pid}/cmdline").read_bytes()
                    program = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if program and (pid, program) not in self.environs:  # once per program a process runs
                        environ = Path(f"/proc/{pid}/environ").read_bytes()
                        # Only a reading taken while the same program ran (not one across
                        # an exec: between vfork and exec a child still shows its parent's
                        # memory, the exporter's initial environment block included).
                        if Path(f"/proc/{pid}/cmdline").read_bytes() == program:
                            self.environs[pid, program] = environ
                except OSError:
                    continue


def _exporter_pid(uid: int) -> int:
    """The exporter's own process (the service user's `python -m bigbinf`, after the
    wrappers in front of it have exec'd into it)."""
    for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            if os.stat(f"/proc/{pid}").st_uid == uid and b"\0bigbinf\0" in Path(f"/proc/{pid}/cmdline").read_bytes():
                return pid
        except OSError:
            continue
    raise AssertionError("the exporter's process is not running")


def _log_tail(log: Path) -> str:
    lines = [line for line in log.read_text(errors="replace").splitlines() if "DEBUG" not in line]
    return "\n".join(lines[-40:])


def _ok_transfers(metrics: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("bigbinf_transfers_total{") and 'outcome="ok"' in line
    )


def test_a_round_as_an_unprivileged_user_with_only_the_units_capabilities(
    make_lab, service_user: pwd.struct_passwd, tmp_path: Path
) -> None:
    lab_config = make_lab(
        # 50 Mbit/s: each transfer lasts ~0.7 s, so the process watch below sees every one.
        link={"rate": "50mbit"},
        protocols={"scp": {}, "ftp": {}},
        datasets={"f4m": {"file": "f4m.bin", "size": "4MiB"}},
        servers=["sshd", "vsftpd"],
    )
    layout = LabLayout(lab_config.lab)
    user = service_user
    state = Path(f"/var/tmp/{user.pw_name}-state")  # the StateDirectory's stand-in
    scratch = Path(f"/var/tmp/{user.pw_name}-scratch")
    record = Path(f"/var/tmp/{user.pw_name}-record")  # what the user's curl processes ran with
    proc: subprocess.Popen[bytes] | None = None
    try:
        state.mkdir(mode=0o700)
        scratch.mkdir(mode=0o700)
        record.mkdir(mode=0o700)
        recorder = _curl_recorder(record, user)
        # The site's secrets as an operator installs them: owned by the service user.
        key, known_hosts, ssh_config, sums = (state / n for n in ("id_ed25519", "known_hosts", "ssh_config", "SUMS"))
        shutil.copy(layout.client_key, key)
        shutil.copy(layout.known_hosts, known_hosts)
        shutil.copy(layout.checksums, sums)
        address = lab_config.lab.remote_address
        ssh_config.write_text(
            f"Host {address}\n  IdentityFile {key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {known_hosts}\n"
            "  StrictHostKeyChecking yes\n  BatchMode yes\n"
        )
        site = {
            "address": address,
            "data_dir": str(layout.data_dir),
            "serve_root": str(layout.serve_root),
            "checksums": str(sums),
            "interface": layout.client_if,  # the exporter is in the client namespace itself: no netns
            "probe": {"enabled": False},  # only the transfers on the wire, for the counters
        }
        password = "bbpw-" + secrets.token_hex(16)
        config = {
            "remotes": {
                "site": {**site, "user": "root", "key": str(key), "ssh_config": str(ssh_config)},
                "ftpsite": {**site, "user": "ftp", "password_env": "BIGBINF_TEST_FTP_PASSWORD"},
            },
            "datasets": {"f4m": {"file": "f4m.bin", "size": "4MiB"}},
            "protocols": {"scp": {}, "ftp": {}},
            "schedule": {
                "interval": "1h",
                "start_delay": "1s",
                "transfers": [
                    {"protocol": "scp", "remote": "site", "dataset": "f4m"},
                    {"protocol": "ftp", "remote": "ftpsite", "dataset": "f4m"},
                ],
            },
            # keep_files: the transfer's directory stays, and with it the proof that the
            # netrc (the password) does not.
            "transfer": {"workdir": str(state / "work"), "timeout": "2m", "keep_files": True},
            "capture": {"directory": str(state / "captures")},
            "journal": {"path": str(state / "journal.jsonl")},
        }
        config_path = state / "config.yaml"
        config_path.write_text(yaml.safe_dump(config))
        for path in (state, key, known_hosts, ssh_config, sums, config_path):
            os.chown(path, user.pw_uid, user.pw_gid)
        key.chmod(0o600)

        port = free_port()
        caps = ",".join("+" + c.removeprefix("CAP_").lower() for c in unit_capabilities())
        # What the user runs: the interpreter (under /root with pyenv) and this checkout
        # (its .venv and the source it installs in editable mode), wherever they live.
        reachable = [Path(sys.executable).resolve(), ROOT]
        argv = [
            "ip", "netns", "exec", layout.client_ns,
            "unshare", "--mount", "--propagation", "private",
            "sh", "-c", _mount_script(reachable, scratch), "sh",
            "setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
            f"--inh-caps=-all,{caps}", f"--ambient-caps=-all,{caps}", f"--bounding-set=-all,{caps}",
            "--no-new-privs", "--",
            # The unit's SystemCallFilter, installed as systemd installs it: last, before exec.
            sys.executable, "-m", "tests.support.seccomp_exec", "--",
            sys.executable, "-m", "bigbinf", "--config.file", str(config_path),
            "--web.listen-address", f"127.0.0.1:{port}", "--log.level", "debug",
        ]  # fmt: skip
        env = {
            "PATH": f"{recorder}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "HOME": str(state),
            "LANG": "C.UTF-8",
            "BIGBINF_TEST_FTP_PASSWORD": password,
        }
        log = tmp_path / "exporter.log"

        # A key others may read: refused at start, as ssh refuses it.
        key.chmod(0o644)
        refused = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert refused.returncode == 1, refused.stderr
        assert f"remotes.site.key: {key}: permissions 0644 are too open" in refused.stderr
        key.chmod(0o600)

        before = veth_counters(lab_config)
        with ProcWatch(user.pw_uid) as watch, open(log, "wb") as log_file:
            proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log_file,
                                    start_new_session=True)  # fmt: skip
            journal = Journal(state / "journal.jsonl")

            def round_done() -> bool:
                if proc.poll() is not None:
                    raise RuntimeError(f"exporter exited {proc.returncode}: {log.read_text()[-3000:]}")
                return (state / "journal.jsonl").exists() and len(list(journal.read())) == 2

            LoopbackServer.wait_for(round_done, timeout=180, what="the round's two results")
            after = veth_counters(lab_config)
            exporter_pid = _exporter_pid(user.pw_uid)
            status = Path(f"/proc/{exporter_pid}/status").read_text()

            def scrape() -> str:
                # On the namespace's loopback: not on the veth whose counters are compared.
                return subprocess.run(
                    ["ip", "netns", "exec", layout.client_ns, "curl", "-sS", "--fail", f"http://127.0.0.1:{port}/metrics"],
                    capture_output=True, text=True, timeout=60, check=True,
                ).stdout  # fmt: skip

            results = list(journal.read())
            outcomes = {r.protocol: (r.outcome, r.error) for r in results}
            # Journaled first, then published: wait for /metrics to have both results.
            metrics = LoopbackServer.wait_for(
                lambda: _ok_transfers(text := scrape()) == 2 and text,
                timeout=60,
                what=f"both results on /metrics (journaled: {outcomes}; log: {_log_tail(log)})",
            )

        # Who ran it: the service user, with exactly the unit's capabilities and no more.
        fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
        assert fields["Uid"].split() == [str(user.pw_uid)] * 4
        cap_bits = {"CAP_NET_RAW": 13, "CAP_NET_ADMIN": 12}
        expected_caps = sum(1 << cap_bits[c] for c in unit_capabilities())
        for name in ("CapEff", "CapPrm", "CapAmb", "CapBnd"):
            assert int(fields[name], 16) == expected_caps, (name, fields[name])
        assert fields["NoNewPrivs"].strip() == "1"
        assert fields["Seccomp"].strip() == "2"  # the unit's system call filter is in force

        # The round: both transfers ok, captured by the unprivileged capture, bytes = kernel's.
        assert {r.protocol: r.outcome for r in results} == {"scp": "ok", "ftp": "ok"}, [r.error for r in results]
        assert all(r.verified and r.file_bytes == 4 * MiB and r.wire_measured for r in results)
        assert all(r.capture_dropped == 0 for r in results)
        assert any(b"pcapdump.py" in argv_ for argv_ in watch.argvs.values())  # the capture ran as the user
        print(
            f"unprivileged round: wire down {[r.wire_bytes_down for r in results]} "
            f"(kernel {after['down'] - before['down']}), up {[r.wire_bytes_up for r in results]} "
            f"(kernel {after['up'] - before['up']})"
        )
        assert sum(r.wire_bytes_down for r in results) == after["down"] - before["down"]
        assert sum(r.wire_bytes_up for r in results) == after["up"] - before["up"]
        assert sum(r.packets_down for r in results) == after["packets_down"] - before["packets_down"]
        # ... and /metrics publishes the same bytes.
        wire = sum(
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("bigbinf_transfer_wire_bytes_total{") and 'way="down"' in line
        )
        assert wire == after["down"] - before["down"]

        # The password reached the FTP transfer where curl reads it (the netrc it was given)...
        curl_argvs, curl_environs = _recorded(record, "argv"), _recorded(record, "environ")
        curl_netrcs = _recorded(record, "netrc")
        assert any(b"ftp://" in argv_ for argv_ in curl_argvs.values()), "no FTP transfer's curl ran"
        assert any(password.encode() in netrc for netrc in curl_netrcs.values())
        # ... and nowhere else: no process's environment (not curl's: it reads the netrc;
        # not the exporter's own, which every child would inherit), argv (every curl's, and
        # every process the watch sampled), the log (debug level: what the journal would
        # get under systemd), the journal, /metrics (labels and values), or any file left
        # behind (keep_files keeps the transfer's directory, but never its netrc).
        assert curl_environs and all(password.encode() not in environ for environ in curl_environs.values())
        # Every other child's (the capture, ss, ...): the exporter's own initial environment
        # block (/proc/PID/environ: what it was started with, readable by its user and
        # root only) keeps the variable, but that is not what its children inherit.
        # (A child between fork and exec is still the exporter's program: left out.)
        children = {key: env for key, env in watch.environs.items() if b"\0bigbinf\0" not in key[1]}
        holding = {argv for (_, argv), env in children.items() if password.encode() in env}
        assert children and not holding, holding
        assert all(password.encode() not in argv_ for argv_ in curl_argvs.values())
        assert all(password.encode() not in argv_ for argv_ in watch.argvs.values())
        assert password not in log.read_text()
        assert password not in (state / "journal.jsonl").read_text()
        assert password not in metrics
        for path in state.rglob("*"):
            if path.is_file():
                assert password.encode() not in path.read_bytes(), path
        assert json.dumps(config).find(password) == -1  # the config never held it
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        # Nothing of the test user's may outlive the test (userdel refuses a user with processes).
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{pid}").st_uid == user.pw_uid:
                    os.kill(pid, signal.SIGKILL)
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(record, ignore_errors=True)
