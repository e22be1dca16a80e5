"""The servers the lab runs in its remote namespace, one entry per server.

Each server writes its own config under the lab's state dir, runs in the foreground
(no daemons, no systemd) inside `<name>-remote`, and is ready when its port listens
there.  All of them serve the same tree, `srv/`, so one dataset is reachable by every
protocol: `srv/data` (downloads, read-only) and `srv/upload` (uploads, world-writable
since servers write as different users: ftp for FTP, xrootd for xrootd).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bigbinf.lab.layout import LabLayout
from bigbinf.process import in_netns
from bigbinf.protocols.hosts import is_ipv6, url_host


class ServerError(RuntimeError):
    pass


@dataclass(frozen=True)
class LabServer:
    name: str
    binary: str
    port: int
    configure: Callable[[LabLayout], None]
    argv: Callable[[LabLayout], list[str]]
    serves: str  # what protocols use it, for `lab status`
    # Where it runs: "remote" (the remote namespace), "client" (UDT's local end), or
    # "ssh": started per transfer through the remote's sshd (bbftpd -s), so the lab only
    # needs its binary installed and sshd up; its state is sshd's.
    side: str = "remote"

    def netns(self, layout: LabLayout) -> str | None:
        if layout.in_place:
            return None  # `lab serve`: this namespace is the remote site
        return layout.client_ns if self.side == "client" else layout.remote_ns

    def installed(self) -> bool:
        return shutil.which(self.binary) is not None or Path(self.binary).exists()


def write_file(path: Path, text: str, mode: int = 0o644) -> None:
    """Every file the lab writes (configs, keys' companions, ssh_config): with its mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


def _lines(*lines: str) -> str:
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- sshd


def _sshd_configure(layout: LabLayout) -> None:
    addr = layout.config.remote_address
    write_file(
        layout.sshd_config,
        _lines(
            f"ListenAddress {addr}",
            "Port 22",
            f"HostKey {layout.host_key}",
            f"AuthorizedKeysFile {layout.authorized_keys}",
            f"PidFile {layout.run_dir / 'sshd.pid'}",
            "PermitRootLogin prohibit-password",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "UseDNS no",
            "Subsystem sftp internal-sftp",
            "MaxStartups 100",
            "LogLevel INFO",
        ),
        0o600,
    )
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir


def _sshd_argv(layout: LabLayout) -> list[str]:
    return [
        shutil.which("sshd") or "/usr/sbin/sshd",
        "-D",
        "-f",
        str(layout.sshd_config),
        "-E",
        str(layout.logfile("sshd")),
    ]


# ---------------------------------------------------------------- vsftpd


def _vsftpd_configure(layout: LabLayout) -> None:
    empty = layout.run_dir / "vsftpd-empty"
    empty.mkdir(parents=True, exist_ok=True)
    empty.chmod(0o555)
    address = layout.config.remote_address
    # vsftpd listens on one family: IPv4 (listen, listen_address) or IPv6 (listen_ipv6,
    # listen_address6); pasv_address is what PASV replies name, IPv4 only (IPv6 clients
    # use EPSV, which names no address).
    if is_ipv6(address):
        family = ["listen=NO", "listen_ipv6=YES", f"listen_address6={address}"]
    else:
        family = ["listen=YES", "listen_ipv6=NO", f"listen_address={address}", f"pasv_address={address}"]
    write_file(
        layout.config_file("vsftpd.conf"),
        _lines(
            *family,
            "listen_port=21",
            "background=NO",
            "seccomp_sandbox=NO",
            # Anonymous FTP rooted at srv/: downloads from data/, uploads into upload/.
            # The anonymous user is Debian's "ftp" (created by the vsftpd package); nobody's
            # home /nonexistent makes vsftpd refuse logins even with anon_root set.
            "anonymous_enable=YES",
            "no_anon_password=YES",
            f"anon_root={layout.serve_root}",
            "write_enable=YES",
            "anon_upload_enable=YES",
            "anon_mkdir_write_enable=YES",
            "anon_other_write_enable=YES",
            "anon_umask=022",
            "local_enable=NO",
            f"secure_chroot_dir={empty}",
            "pasv_enable=YES",
            "pasv_min_port=30000",
            "pasv_max_port=30100",
            "xferlog_enable=YES",
            f"vsftpd_log_file={layout.logfile('vsftpd')}",
            "dual_log_enable=YES",
            f"xferlog_file={layout.logfile('vsftpd-xfer')}",
        ),
    )


def _vsftpd_argv(layout: LabLayout) -> list[str]:
    return [shutil.which("vsftpd") or "/usr/sbin/vsftpd", str(layout.config_file("vsftpd.conf"))]


# ---------------------------------------------------------------- rsync daemon


def _rsyncd_configure(layout: LabLayout) -> None:
    write_file(
        layout.config_file("rsyncd.conf"),
        _lines(
            f"pid file = {layout.run_dir / 'rsyncd.pid'}",
            "use chroot = no",
            "uid = root",
            "gid = root",
            f"log file = {layout.logfile('rsyncd')}",
            "[data]",
            f"    path = {layout.data_dir}",
            "    read only = yes",
            "[upload]",
            f"    path = {layout.upload_dir}",
            "    read only = no",
        ),
    )


def _rsyncd_argv(layout: LabLayout) -> list[str]:
    return [
        "rsync",
        "--daemon",
        "--no-detach",
        f"--config={layout.config_file('rsyncd.conf')}",
        f"--address={layout.config.remote_address}",
        "--port=873",
    ]


# ---------------------------------------------------------------- nginx (HTTP, WebDAV PUT for uploads)


def _nginx_configure(layout: LabLayout) -> None:
    tmp = layout.run_dir / "nginx"
    tmp.mkdir(parents=True, exist_ok=True)
    write_file(
        layout.config_file("nginx.conf"),
        _lines(
            "daemon off;",
            "master_process on;",
            "worker_processes 1;",
            "user root;",
            f"pid {layout.run_dir / 'nginx.pid'};",
            f"error_log {layout.logfile('nginx')} info;",
            "events { worker_connections 64; }",
            "http {",
            f"    access_log {layout.logfile('nginx-access')};",
            f"    client_body_temp_path {tmp}/body;",
            f"    proxy_temp_path {tmp}/proxy;",
            f"    fastcgi_temp_path {tmp}/fastcgi;",
            f"    uwsgi_temp_path {tmp}/uwsgi;",
            f"    scgi_temp_path {tmp}/scgi;",
            "    sendfile on;",
            "    tcp_nopush on;",
            "    types { application/octet-stream bin; }",
            f"    server {{ listen {url_host(layout.config.remote_address)}:80; root {layout.serve_root};",
            "        location /upload/ { dav_methods PUT DELETE; create_full_put_path on; client_max_body_size 0; } }",
            "}",
        ),
    )


def _nginx_argv(layout: LabLayout) -> list[str]:
    return [
        shutil.which("nginx") or "/usr/sbin/nginx",
        "-c",
        str(layout.config_file("nginx.conf")),
        "-p",
        str(layout.run_dir),
    ]


# ---------------------------------------------------------------- xrootd


def _xrootd_configure(layout: LabLayout) -> None:
    admin = layout.run_dir / "xrootd"
    admin.mkdir(parents=True, exist_ok=True)
    shutil.chown(admin, "xrootd", "xrootd")
    write_file(
        layout.config_file("xrootd.cfg"),
        _lines(
            f"all.export {layout.serve_root}",
            "xrd.port 1094",
            "xrd.network nodnr",
            f"all.adminpath {admin}",
            f"all.pidpath {admin}",
        ),
    )


def _xrootd_argv(layout: LabLayout) -> list[str]:
    # It drops to the xrootd user before opening its log: the log lives in a dir it owns.
    return [
        shutil.which("xrootd") or "/usr/bin/xrootd",
        "-c",
        str(layout.config_file("xrootd.cfg")),
        "-l",
        str(layout.run_dir / "xrootd" / "xrootd.log"),
        "-R",
        "xrootd",
    ]


# ---------------------------------------------------------------- GridFTP


def netns_hosts(ns: str) -> Path:
    """`ip netns exec NS` bind-mounts /etc/netns/NS/* over /etc: a private hosts file."""
    return Path("/etc/netns") / ns / "hosts"


def _gridftp_configure(layout: LabLayout) -> None:
    # globus-gridftp-server reverse-resolves its listen address (getnameinfo without
    # NI_NUMERICHOST) and gives up with "Temporary failure in name resolution" when no
    # resolver answers, as in a namespace; neither -hostname nor GLOBUS_HOSTNAME avoids
    # it.  A private hosts file naming both lab addresses (and this host) does.
    name = layout.config.name
    hosts = _lines(
        "127.0.0.1 localhost",
        f"127.0.1.1 {socket.gethostname()}",
        f"{layout.config.client_address} {name}-client",
        f"{layout.config.remote_address} {name}-remote",
    )
    if not layout.in_place:  # a container's own /etc/hosts already names its address
        for ns in (layout.remote_ns, layout.client_ns):
            write_file(netns_hosts(ns), hosts)
    logs = layout.run_dir / "gridftp-log"
    logs.mkdir(parents=True, exist_ok=True)
    logs.chmod(0o1777)  # sessions run as the anonymous user (nobody) and log from there


def _gridftp_argv_for(address: str, layout: LabLayout, tag: str) -> list[str]:
    logs = layout.run_dir / "gridftp-log"
    return [
        shutil.which("globus-gridftp-server") or "/usr/sbin/globus-gridftp-server",
        "-aa",
        "-anonymous-user",
        "nobody",
        "-p",
        "2811",
        "-control-interface",
        address,
        "-data-interface",
        address,
        "-port-range",
        "50000,50100",
        # udt must be whitelisted for SITE SETNETSTACK udt to be accepted
        "-dc-whitelist",
        "udt,tcp",
        "-l",
        str(logs / f"{tag}.log"),
        "-Z",
        str(logs / f"{tag}-transfers.log"),
        "-log-module",
        "stdio:buffer=0",
    ]


def _gridftp_argv(layout: LabLayout) -> list[str]:
    return _gridftp_argv_for(layout.config.remote_address, layout, "remote")


def _gridftp_client_argv(layout: LabLayout) -> list[str]:
    return _gridftp_argv_for(layout.config.client_address, layout, "client")


# ---------------------------------------------------------------- iperf3


def _nothing(layout: LabLayout) -> None:
    return None


def _iperf3_argv(layout: LabLayout) -> list[str]:
    return ["iperf3", "-s", "-B", layout.config.remote_address, "-p", "5201"]


SERVERS: dict[str, LabServer] = {
    "sshd": LabServer("sshd", "sshd", 22, _sshd_configure, _sshd_argv, "scp, sftp, rsync over ssh"),
    "vsftpd": LabServer("vsftpd", "vsftpd", 21, _vsftpd_configure, _vsftpd_argv, "ftp"),
    "rsyncd": LabServer("rsyncd", "rsync", 873, _rsyncd_configure, _rsyncd_argv, "rsync daemon"),
    "nginx": LabServer("nginx", "nginx", 80, _nginx_configure, _nginx_argv, "http"),
    "xrootd": LabServer("xrootd", "xrootd", 1094, _xrootd_configure, _xrootd_argv, "xrootd"),
    "gridftp": LabServer("gridftp", "globus-gridftp-server", 2811, _gridftp_configure, _gridftp_argv, "gridftp"),
    # UDT needs a GridFTP server at this end too: the transfer is third-party.
    "gridftp-client": LabServer(
        "gridftp-client",
        "globus-gridftp-server",
        2811,
        _gridftp_configure,
        _gridftp_client_argv,
        "gridftp UDT (local end)",
        side="client",
    ),
    "iperf3": LabServer("iperf3", "iperf3", 5201, _nothing, _iperf3_argv, "iperf3"),
    # Not a daemon of the lab: bbftp's ssh mode runs `bbftpd -s` through sshd per transfer.
    "bbftpd": LabServer(
        "bbftpd", "bbftpd", 22, _nothing, _sshd_argv, "bbftp (bbftpd -s, started through sshd)", side="ssh"
    ),
}


# ---------------------------------------------------------------- running them


def pidfile(layout: LabLayout, server: LabServer) -> Path:
    return layout.run_dir / f"{server.name}.launcher.pid"


def _started_by(server: LabServer) -> LabServer:
    """The server whose process stands for this one: sshd for an ssh-started one."""
    return SERVERS["sshd"] if server.side == "ssh" else server


def running_pid(layout: LabLayout, server: LabServer) -> int | None:
    """PID of the server we started, if it is still that process."""
    server = _started_by(server)
    try:
        pid = int(pidfile(layout, server).read_text().split()[0])
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except (OSError, ValueError, IndexError):
        return None
    return pid if str(layout.state_dir) in cmdline or server.binary in cmdline else None


def listening(layout: LabLayout, server: LabServer) -> bool:
    server = _started_by(server)
    ns = server.netns(layout)
    argv = ["ss", *(["-N", ns] if ns else []), "-Hltn", f"sport = :{server.port}"]
    out = subprocess.run(argv, capture_output=True, text=True).stdout
    return bool(out.strip())


def start(layout: LabLayout, server: LabServer, timeout: float = 15.0) -> int:
    # An ssh-started server is up when sshd is: start (or find) sshd, whose pid it shares.
    server = _started_by(server)
    pid = running_pid(layout, server)
    if pid and listening(layout, server):
        return pid
    server.configure(layout)
    # A server killed by a signal while it starts is started once more: xrootd 5.5 has
    # crashed (SIGSEGV) at start on a busy machine, and a lab must not fail for that
    # once.  An exit status (a bad config) is final at once.
    for attempt in (1, 2):
        with open(layout.logfile(server.name + ".stdout"), "ab") as log:  # the server keeps its own copy
            proc = subprocess.Popen(
                in_netns(server.netns(layout), server.argv(layout)),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=_base_env(),
            )
        pidfile(layout, server).write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + timeout
        while not listening(layout, server):
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                raise ServerError(
                    f"{server.name} did not listen on port {server.port} within {timeout:g}s; "
                    f"see {layout.logfile(server.name + '.stdout')}"
                )
            time.sleep(0.1)
        else:
            return proc.pid
        if proc.returncode >= 0 or attempt == 2:
            raise ServerError(
                f"{server.name} exited {proc.returncode} in {server.netns(layout)}"
                f"{' twice' if attempt == 2 else ''}; "
                f"see {layout.logfile(server.name + '.stdout')} and {layout.logfile(server.name)}"
            )
        with open(layout.logfile(server.name + ".stdout"), "a") as log:
            signal_number = -proc.returncode
            log.write(f"bigbinf lab: {server.name} was killed by signal {signal_number} at start; starting it again\n")
    raise AssertionError("unreachable")


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")} | {"HOME": "/root"}
