#!/usr/bin/env python3
"""A webhook receiver that prints what Alertmanager sends, one JSON line per alert.

prometheus/alertmanager.yml sends its notifications to http://127.0.0.1:5001/bigbinf.
compose.yaml runs this script there (service alert-webhook, in Alertmanager's network
namespace), so the demo's notifications are visible with `docker compose logs
alert-webhook`; natively:

    python3 prometheus/webhook_logger.py --listen 127.0.0.1:5001

Standard library only (compose runs it in a stock python image).  A POST whose body is
an Alertmanager webhook payload gets 200; anything else gets 400, so a misconfigured
sender shows up as failed notifications in Alertmanager's log.  GET answers 200 (a
liveness check).
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Notifications of different groups arrive at once, each on its own thread: one write of
# a whole line at a time, or print()'s separate writes of text and newline interleave
# ("{...}{...}\n\n").
OUTPUT = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            payload = json.loads(body)
            alerts = payload["alerts"]
            assert isinstance(alerts, list)
        except (ValueError, KeyError, TypeError, AssertionError):
            self.send_error(400, "not an Alertmanager webhook payload")
            return
        lines = []
        for alert in alerts:
            annotations = alert.get("annotations") or {}
            lines.append(
                json.dumps(
                    {
                        "path": self.path,
                        "receiver": payload.get("receiver"),
                        "status": alert.get("status"),
                        "labels": alert.get("labels") or {},
                        "summary": annotations.get("summary"),
                        "runbook_url": annotations.get("runbook_url"),
                        "startsAt": alert.get("startsAt"),
                    },
                    sort_keys=True,
                )
                + "\n"
            )
        with OUTPUT:
            sys.stdout.write("".join(lines))
            sys.stdout.flush()
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"webhook logger: POST Alertmanager notifications here\n")

    def log_message(self, format: str, *args: object) -> None:
        # The access log would repeat every notification without its content.
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", default="127.0.0.1:5001", metavar="HOST:PORT")
    args = parser.parse_args(argv)
    host, _, port = args.listen.rpartition(":")
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), Handler)
    print(f"webhook logger listening on {args.listen}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
