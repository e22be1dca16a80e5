"""A third-party GridFTP transfer with a UDT data channel, run as its own process:

    python -m bigbinf.protocols.gridftp_udt SRC_HOST:PORT SRC_PATH DST_HOST:PORT DST_PATH [STACK]

(an IPv6 host in brackets: [2001:db8::1]:2811)

Why not `globus-url-copy -udt`?  It passes the net stack only for gsiftp:// URLs, so with
ftp:// it silently stays on TCP, two-party and third-party alike (read in its source and
seen on the wire in the lab).  This drives both servers' control channels directly:
SITE SETNETSTACK udt on both, PASV on the destination, PORT on the source (over IPv6 their
extended forms, RFC 2428: EPSV names only a port, EPRT the address), then STOR and RETR,
and waits for both 226 replies.  For a download the source is the remote server and
the destination a GridFTP server on this host, which writes the file locally.

Anonymous logins only (the lab's servers); exit status 0 on success, 1 with the failing
server's reply otherwise.
"""

from __future__ import annotations

import ftplib
import sys

TIMEOUT_SECONDS = 600


def split_hostport(hostport: str) -> tuple[str, int]:
    """("2001:db8::1", 2811) from "[2001:db8::1]:2811", ("host", 2811) from "host:2811"."""
    host, _, port = hostport.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, int(port)


def connect(hostport: str) -> ftplib.FTP:
    host, port = split_hostport(hostport)
    ftp = ftplib.FTP()
    ftp.connect(host, int(port), timeout=TIMEOUT_SECONDS)
    ftp.login("anonymous", "bigbinf@")
    ftp.sendcmd("TYPE I")
    return ftp


def final_reply(ftp: ftplib.FTP) -> str:
    """Skip preliminary (1xx) replies; return the completion reply."""
    while True:
        reply = ftp.getmultiline()
        if not reply.startswith("1"):
            return reply


def transfer(src_hostport: str, src_path: str, dst_hostport: str, dst_path: str, stack: str = "udt") -> None:
    src, dst = connect(src_hostport), connect(dst_hostport)
    try:
        for ftp in (src, dst):
            ftp.sendcmd(f"SITE SETNETSTACK {stack}")
        dst_host = split_hostport(dst_hostport)[0]
        if ":" in dst_host:  # IPv6: PASV and PORT carry IPv4 addresses only
            passive = dst.sendcmd("EPSV")  # 229 Entering Extended Passive Mode (|||port|)
            port = passive[passive.index("(") + 1 : passive.index(")")].strip("|")
            src.sendcmd(f"EPRT |2|{dst_host}|{port}|")
        else:
            passive = dst.sendcmd("PASV")
            src.sendcmd("PORT " + passive[passive.index("(") + 1 : passive.index(")")])
        dst.putcmd(f"STOR {dst_path}")
        src.putcmd(f"RETR {src_path}")
        for name, ftp in (("destination", dst), ("source", src)):
            reply = final_reply(ftp)
            if not reply.startswith("226"):
                raise ftplib.Error(f"{name} {ftp.host}: {reply}")
    finally:
        for ftp in (src, dst):
            try:
                ftp.quit()
            except (OSError, ftplib.Error):
                ftp.close()


def main(argv: list[str]) -> int:
    if len(argv) not in (4, 5):
        print(__doc__, file=sys.stderr)
        return 2
    try:
        transfer(*argv)
    except (OSError, ftplib.Error, ValueError) as exc:
        print(f"gridftp-udt: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
