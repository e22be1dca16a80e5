#!/usr/bin/env python3
"""A stand-in for the transfer tools, for tests that put hostile strings into the config.

`Stub(record, marker, scratch).run(argv)` takes the place of running `argv` (the tests
patch it in where the protocol modules run their commands): it appends the argv to
`record` (one JSON line) and then does, with the strings it was given, what the real
tool would do with them that could run a command, so that an injection creates the
test's marker file as it would for real:

* ssh, scp, sftp: options parsed as OpenSSH's getopt parses them; a ProxyCommand or
  LocalCommand runs in sh; ssh's remote command (its words joined by spaces, as ssh
  joins them) runs in sh as the remote's shell would, with only no-op stand-ins on its
  PATH (rm, ss, sysctl, ip, scp...: nothing real is removed or changed); scp names a
  remote path to the remote's shell (legacy mode) the same way; an sftp batch line
  starting with `!` runs in sh, as sftp runs it;
* rsync: its -e command split on white space and run as ssh with rsync's remote command
  (each argument quoted, as rsync 3.2.4 and later quote them);
* lftp: the real lftp reads the script (or -e commands), with retries and timeouts cut
  short, so lftp's own command language (`!`, `||`, `;`) is judged by lftp itself;
* bbftp: its -L ssh command as ssh; its -e commands split as bbftp splits them: a
  command other than get, put or rm, or with more words than it takes, counts as run
  (the marker is created);
* anything else (curl, globus-url-copy, xrdcp, iperf3, ...): recorded only.
"""

from __future__ import annotations

import contextlib
import getopt
import json
import os
import shlex
import subprocess
import tempfile
from pathlib import Path

LFTP = "/usr/bin/lftp"  # the real one
SSH_OPTS = "1246ab:c:e:fgi:kl:m:no:p:qstvxAB:CD:E:F:GI:J:KL:MNO:PQ:R:S:TVw:W:XYy"
SCP_OPTS = "12346ABCTdfOpqRrsvD:F:i:J:l:o:P:S:X:"
SFTP_OPTS = "1246AafhNpqrvCc:D:i:l:o:s:S:b:B:F:J:P:R:"
BBFTP_OPTS = "b:d:e:E:i:I:kK:l:L:mno:p:P:q:r:R:sStu:vVw:W"
RSYNC_WITH_VALUE = {"-e", "--rsh", "--rsync-path", "-f", "--filter", "-T", "--temp-dir"}
REMOTE_PROGRAMS = ("rm", "ss", "sysctl", "ip", "scp", "rsync", "bbftpd", "cat", "true")


class Stub:
    def __init__(self, record: Path, marker: Path, scratch: Path) -> None:
        self.record, self.marker, self.scratch = record, marker, scratch
        self.bin = scratch / "remote-bin"  # what the emulated remote shell finds on PATH
        self.bin.mkdir(parents=True, exist_ok=True)
        for program in REMOTE_PROGRAMS:
            (self.bin / program).write_text("#!/bin/sh\nexit 0\n")
            (self.bin / program).chmod(0o755)

    def run(self, argv: list[str]) -> None:
        with open(self.record, "a") as record:
            record.write(json.dumps({"tool": os.path.basename(argv[0]), "argv": argv}) + "\n")
        handler = {"ssh": self.ssh, "scp": self.scp, "hpnscp": self.scp, "sftp": self.sftp, "rsync": self.rsync,
                   "lftp": self.lftp, "bbftp": self.bbftp}.get(os.path.basename(argv[0]))  # fmt: skip
        if handler is not None:
            with contextlib.suppress(getopt.GetoptError):  # the tool would refuse it too
                handler(argv[1:])

    def sh(self, command: str) -> None:
        """`command` as a shell runs it (no-op programs first on PATH), in a scratch directory."""
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.scratch)}
        with tempfile.TemporaryDirectory(dir=self.scratch) as cwd:
            subprocess.run(["/bin/sh", "-c", command], env=env, cwd=cwd, timeout=30, check=False,
                           stdin=subprocess.DEVNULL, capture_output=True)  # fmt: skip

    def ssh_options(self, opts: list[tuple[str, str]]) -> None:
        for flag, value in opts:
            if flag == "-o":
                key, _, setting = value.replace("=", " ", 1).partition(" ")
                if key.lower() in ("proxycommand", "localcommand", "knownhostscommand", "remotecommand"):
                    self.sh(setting)

    def ssh(self, argv: list[str]) -> None:
        opts, rest = getopt.getopt(argv, SSH_OPTS)  # OpenSSH's getopt does not permute
        self.ssh_options(opts)
        if len(rest) > 1:
            self.sh(" ".join(rest[1:]))  # the remote's shell

    def scp(self, argv: list[str]) -> None:
        opts, rest = getopt.getopt(argv, SCP_OPTS)
        self.ssh_options(opts)
        for operand in rest:
            host, colon, path = operand.partition(":")
            if colon and "/" not in host:
                self.sh(f"scp -f {path}")  # legacy mode: the path reaches the remote's shell as written

    def sftp(self, argv: list[str]) -> None:
        opts, _rest = getopt.getopt(argv, SFTP_OPTS)
        self.ssh_options(opts)
        for flag, value in opts:
            if flag == "-b" and os.path.exists(value):
                for line in Path(value).read_text().splitlines():
                    if line.lstrip().startswith("!"):
                        self.sh(line.lstrip()[1:])  # sftp's local shell escape

    def rsync(self, argv: list[str]) -> None:
        rsh, operands, i = "ssh", [], 0
        while i < len(argv):
            arg = argv[i]
            if arg == "--":
                operands += argv[i + 1 :]
                break
            if arg in RSYNC_WITH_VALUE:
                rsh = argv[i + 1] if arg in ("-e", "--rsh") else rsh
                i += 2
                continue
            if arg.startswith("--rsh="):
                rsh = arg.split("=", 1)[1]
            elif not arg.startswith("-"):
                operands.append(arg)
            i += 1
        for operand in operands:
            host, colon, path = operand.partition(":")
            if colon and "/" not in host and not operand.startswith("rsync://"):
                words = shlex.split(rsh)
                self.ssh([*words[1:], host, "rsync", "--server", "--sender", "-logDtpre.iLsfxCIvu", ".",
                          shlex.quote(path)])  # fmt: skip

    def lftp(self, argv: list[str]) -> None:
        limits = "set net:max-retries 1; set net:reconnect-interval-base 1; set net:timeout 2; set dns:fatal-timeout 2"
        if "-f" in argv:
            script = self.scratch / "stub.lftp"
            script.write_text(limits + "\n" + Path(argv[argv.index("-f") + 1]).read_text())
            command = [LFTP, "--norc", "-f", str(script)]
        elif "-e" in argv:
            sites = [a for a in argv[argv.index("-e") + 2 :] if not a.startswith("-")]
            command = [LFTP, "--norc", "-e", limits + "; " + argv[argv.index("-e") + 1], *sites[:1]]
        else:
            return
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.scratch)}
        subprocess.run(command, timeout=60, capture_output=True, check=False, stdin=subprocess.DEVNULL, env=env,
                       cwd=self.scratch)  # fmt: skip

    def bbftp(self, argv: list[str]) -> None:
        opts, rest = getopt.getopt(argv, BBFTP_OPTS)
        values = dict(opts)
        if "-L" in values and rest:
            self.ssh([*shlex.split(values["-L"])[1:], "-l", values.get("-u", "root"), rest[0], "bbftpd -s"])
        for command in values.get("-e", "").split(";"):
            words = command.split()
            if words and (words[0] not in ("get", "put", "rm") or len(words) > (2 if words[0] == "rm" else 3)):
                self.marker.touch()  # bbftp would have run a command nobody configured
