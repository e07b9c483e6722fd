# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the HTTP test doubles share (stdlib http.server): a quiet JSON handler, and a threaded
server on a free loopback port that runs in a thread as a context manager.

    class Handler(JsonHandler):
        def do_GET(self):
            self.send_json(200, {"ok": True})

    with HttpDouble(Handler) as double:
        ... double.url ...
"""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JsonHandler(BaseHTTPRequestHandler):
    """Logs nothing; answers JSON."""

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def bearer_ok(self, key):
        """No key wanted, or the request carries ``Authorization: Bearer <key>``."""
        return key is None or self.headers.get("Authorization") == "Bearer " + key

    def read_json(self):
        """The request body as JSON ({} when empty)."""
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request, client_address):
        pass  # a client that hangs up early (timeouts, kept-alive sockets at the end) is expected


class HttpDouble:
    """A threaded HTTP server of ``handler`` on ``host``:``port`` (0: a free one)."""

    def __init__(self, handler, host="127.0.0.1", port=0):
        self.server = _Server((host, port), handler)
        self.port = self.server.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
        return False

    def serve_forever(self):
        """Serve in this thread (a server process of its own)."""
        self.server.serve_forever()
