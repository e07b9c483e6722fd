# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A stand-in for an on-call chat or paging webhook (issue 45.5): the receiver Alertmanager's `webhook_configs` posts to.

Standard library only and self-contained (the tests send its source to the box's python3 with `-c`, so it cannot
import tests/doubles/http_double.py): listens on HOST:PORT and appends every POSTed notification,
Alertmanager's webhook JSON (version 4: status, groupLabels, alerts with labels and annotations), as one line of
{"t": unix time, "path": request path, "body": the JSON} to OUT; answers 200. The molecule tests start it on the
monitoring host as a transient unit and read OUT:

    python3 alert_webhook_double.py 127.0.0.1 19093 /run/alert-webhook.jsonl
"""
from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_LOCK = threading.Lock()


def make_handler(out_path):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"unparsed": raw.decode("utf-8", "replace")}
            line = json.dumps({"t": time.time(), "path": self.path, "body": body}, sort_keys=True)
            with _LOCK, open(out_path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
            return

    return Handler


def main(argv=None):
    host, port, out_path = (argv if argv is not None else sys.argv[1:])[:3]
    server = ThreadingHTTPServer((host, int(port)), make_handler(out_path))
    server.daemon_threads = True
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
