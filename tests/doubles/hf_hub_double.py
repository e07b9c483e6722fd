# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""HubDouble: a TEST DOUBLE of the Hugging Face Hub's file API, serving model directories on loopback.

It speaks the part of the Hub that huggingface_hub 2.4.0's ``snapshot_download`` / ``hf_hub_download``
(and vLLM's and transformers' start from a hub id) use, with the Hub's headers and error codes:

  GET  /api/models/{repo}[/revision/{rev}]        repo info: id, sha (the commit), siblings, private, gated
  GET  /api/models/{repo}/tree/{rev}[/{path}]     the file tree (``recursive``), LFS entries for weights
  POST /api/models/{repo}/paths-info/{rev}        entries of given paths (HfFileSystem)
  HEAD /{repo}/resolve/{rev}/{file}               X-Repo-Commit, ETag (git blob sha1) or X-Linked-Etag and
                                                  X-Linked-Size (sha256 and size, for LFS files), Content-Length
  GET  /{repo}/resolve/{rev}/{file}               the bytes; ``Range: bytes=a-[b]`` answers 206 + Content-Range
  GET  /_double/requests                          what it was asked (the log below), for tests

Errors as the Hub sends them: an unknown repo (or a missing/wrong token when one is required) is 401
with ``X-Error-Code: RepoNotFound``; an unknown revision 404 ``RevisionNotFound``; an unknown file 404
``EntryNotFound`` with X-Repo-Commit. The revision is ``main`` or the commit, which is a sha1 of the
directory's listing, so it changes when a file does.

Fault injection for the tests: ``cut_after`` cuts the connection of the first GET of each file longer
than that after that many bytes (once per file: the client's resume with Range then gets the rest); ``rate`` limits
each download to that many bytes/s (a slow link); ``fail`` ({file: status}) answers the GETs of a file
with that status (its HEAD still answers, as a CDN failing behind the Hub does); ``stall`` holds a cut
download open after ``cut_after`` bytes until the test sets ``release`` (or kills the client).

Standard library only, one file, so that it can be copied into a lab box and run there
(``python3 hf_hub_double.py --repo gpuhost-lab/tiny-qwen3=/srv/models/tiny-qwen3 --port-file F``);
it refuses any address but loopback.

    with HubDouble({"gpuhost-lab/tiny-qwen3": "/srv/models/tiny-qwen3"}) as hub:
        ... hub.url ...                   # http://127.0.0.1:<port>, HF_ENDPOINT for the client
        hub.requests                      # [{"method", "path", "range", "status", "bytes", "auth", "agent"}, ...]
"""
from __future__ import annotations

import argparse
import email.utils
import hashlib
import ipaddress
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# Files the Hub stores in LFS (the weights): tree entries carry "lfs", resolve answers X-Linked-*.
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")
CHUNK = 64 * 1024
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a file's content (what the Hub's ETag and tree "oid" are for non-LFS files)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's id, not security


class Repo:
    """One model directory: its files (relative paths, '/'-separated) with size, oid, sha256, and the commit."""

    def __init__(self, repo_id: str, directory: str):
        self.repo_id = repo_id
        self.directory = os.path.abspath(directory)
        self.files: dict[str, dict] = {}
        for base, dirs, names in os.walk(self.directory):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if name.startswith("."):
                    continue
                full = os.path.join(base, name)
                rel = os.path.relpath(full, self.directory).replace(os.sep, "/")
                with open(full, "rb") as handle:
                    data = handle.read()
                entry = {"size": len(data), "oid": git_blob_sha1(data), "sha256": hashlib.sha256(data).hexdigest(),
                         "lfs": rel.endswith(LFS_SUFFIXES)}
                if entry["lfs"]:
                    pointer = ("version https://git-lfs.github.com/spec/v1\noid sha256:%s\nsize %d\n"
                               % (entry["sha256"], entry["size"])).encode()
                    entry["pointer_size"] = len(pointer)
                    entry["oid"] = git_blob_sha1(pointer)
                self.files[rel] = entry
        listing = "".join("%s %s\n" % (rel, f["oid"]) for rel, f in sorted(self.files.items()))
        self.commit = hashlib.sha1(("%s\n%s" % (repo_id, listing)).encode()).hexdigest()  # noqa: S324

    def path(self, rel: str) -> str:
        return os.path.join(self.directory, *rel.split("/"))

    def folders(self) -> set:
        out = set()
        for rel in self.files:
            parts = rel.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                out.add("/".join(parts[:i]))
        return out

    def entry(self, rel: str) -> dict:
        """The tree entry of a file or folder, as the Hub's tree API writes it."""
        if rel in self.files:
            f = self.files[rel]
            # For an LFS file "oid" is the pointer's git id and "size" the file's; "lfs" has its sha256.
            out = {"type": "file", "oid": f["oid"], "size": f["size"], "path": rel}
            if f["lfs"]:
                out["lfs"] = {"oid": f["sha256"], "size": f["size"], "pointerSize": f["pointer_size"]}
            return out
        return {"type": "directory", "oid": hashlib.sha1(rel.encode()).hexdigest(), "size": 0, "path": rel}  # noqa: S324

    def tree(self, prefix: str, recursive: bool) -> list | None:
        """Entries under ``prefix`` ('' = the root), None when there is no such folder."""
        prefix = prefix.strip("/")
        if prefix and prefix not in self.folders():
            return None
        names = sorted(set(self.files) | self.folders())
        out = []
        for rel in names:
            if prefix and not rel.startswith(prefix + "/"):
                continue
            rest = rel[len(prefix) + 1:] if prefix else rel
            if not recursive and "/" in rest:
                continue
            out.append(self.entry(rel))
        return out

    def info(self) -> dict:
        return {"_id": hashlib.md5(self.repo_id.encode()).hexdigest()[:24],  # noqa: S324 - an id
                "id": self.repo_id, "modelId": self.repo_id, "author": self.repo_id.split("/")[0],
                "sha": self.commit, "lastModified": "2026-01-01T00:00:00.000Z", "private": False,
                "gated": False, "disabled": False, "downloads": 0, "likes": 0, "tags": ["safetensors"],
                "library_name": "transformers", "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": rel} for rel in sorted(self.files)]}


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def handle_error(self, request, client_address):
        pass  # clients that hang up (a cut download, a killed fetch) are expected


class HubDouble:
    """Serve ``repos`` ({repo id: directory}) on ``host``:``port`` (0: a free one), loopback only."""

    def __init__(self, repos: dict, host: str = "127.0.0.1", port: int = 0, token: str | None = None,
                 cut_after: int | None = None, rate: float | None = None, fail: dict | None = None,
                 stall: bool = False, log_file: str | None = None):
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError("hf_hub_double serves on loopback only, not %s" % host)
        self.repos = {rid: Repo(rid, d) for rid, d in repos.items()}
        self.token = token or None
        self.cut_after = cut_after
        self.rate = rate
        self.fail = dict(fail or {})
        self.requests: list[dict] = []
        self.log_file = log_file
        self._cut_done: set = set()
        self._lock = threading.Lock()
        self.stall = stall
        self.stalled = threading.Event()     # set when a download stalls (after cut_after bytes)
        self.release = threading.Event()     # set by the test to end a stall (the connection is then cut)
        self.server = _Server((host, port), self._handler())
        self.port = self.server.server_address[1]
        self.url = "http://%s:%d" % (host, self.port)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()
        return False

    def serve_forever(self):
        self.server.serve_forever()

    def record(self, item: dict):
        with self._lock:
            self.requests.append(item)
            if self.log_file:
                with open(self.log_file, "a", encoding="utf-8") as handle:
                    handle.write(json.dumps(item) + "\n")

    def downloads(self) -> list:
        """The GETs of files (method GET on /resolve/)."""
        return [r for r in self.requests if r["method"] == "GET" and "/resolve/" in r["path"]]

    def _first_cut(self, key: str) -> bool:
        with self._lock:
            if self.cut_after is None or key in self._cut_done:
                return False
            self._cut_done.add(key)
            return True

    def _handler(self):
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # pylint: disable=arguments-differ
                pass

            # ---------------------------------------------------------------- plumbing
            def _send(self, status, body=b"", headers=None, content_type="application/json", head=False):
                # Recorded before the answer leaves: a client's next request can arrive before this thread runs
                # again, and the record must keep the order in which the client asked.
                self._log(status, 0 if head else len(body))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def _json(self, status, obj, headers=None, head=False):
                self._send(status, json.dumps(obj).encode(), headers, head=head)

            def _error(self, status, code, message, headers=None, head=False):
                headers = dict(headers or {}, **{"X-Error-Code": code, "X-Error-Message": message})
                self._json(status, {"error": message}, headers, head=head)

            def _log(self, status, sent, extra=None):
                item = {"method": self.command, "path": urllib.parse.urlsplit(self.path).path,
                        "range": self.headers.get("Range"), "status": status, "bytes": sent,
                        "auth": bool(self.headers.get("Authorization")), "agent": self.headers.get("User-Agent", ""),
                        "time": round(time.time(), 3)}
                item.update(extra or {})
                hub.record(item)

            def _authorized(self):
                if hub.token is None:
                    return True
                return self.headers.get("Authorization") == "Bearer " + hub.token

            def _repo(self, repo_id, head=False):
                repo = hub.repos.get(repo_id)
                if repo is None or not self._authorized():
                    # The Hub answers 401 for a repo that does not exist or that this caller may not read.
                    self._error(401, "RepoNotFound", "Repository not found", head=head)
                    return None
                return repo

            def _revision_ok(self, repo, rev, head=False):
                if rev in ("main", repo.commit):
                    return True
                self._error(404, "RevisionNotFound", "Invalid rev id: %s" % rev, head=head)
                return False

            # ---------------------------------------------------------------- routes
            def do_GET(self):  # noqa: N802
                self._route(head=False)

            def do_HEAD(self):  # noqa: N802
                self._route(head=True)

            def do_POST(self):  # noqa: N802
                parts = urllib.parse.urlsplit(self.path)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode("utf-8", "replace")
                m = re.match(r"^/api/models/(.+)/paths-info/([^/]+)$", parts.path)
                if not m:
                    self._error(404, "NotFound", "Not found")
                    return
                repo = self._repo(urllib.parse.unquote(m.group(1)))
                if repo is None or not self._revision_ok(repo, urllib.parse.unquote(m.group(2))):
                    return
                if self.headers.get("Content-Type", "").startswith("application/json"):
                    paths = (json.loads(body or "{}").get("paths") or [])
                else:
                    paths = urllib.parse.parse_qs(body).get("paths", [])
                known = set(repo.files) | repo.folders()
                self._json(200, [repo.entry(p.strip("/")) for p in paths if p.strip("/") in known])

            def _route(self, head):
                parts = urllib.parse.urlsplit(self.path)
                path = parts.path
                query = urllib.parse.parse_qs(parts.query)
                if path == "/_double/requests":
                    self._json(200, list(hub.requests), head=head)
                    return
                m = re.match(r"^/api/models/([^/]+(?:/[^/]+)?)/tree/([^/]+)(?:/(.*))?$", path)
                if m:
                    repo = self._repo(urllib.parse.unquote(m.group(1)), head)
                    if repo is None or not self._revision_ok(repo, urllib.parse.unquote(m.group(2)), head):
                        return
                    recursive = (query.get("recursive") or ["false"])[0].lower() in ("1", "true")
                    entries = repo.tree(urllib.parse.unquote(m.group(3) or ""), recursive)
                    if entries is None:
                        self._error(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": repo.commit}, head)
                    else:
                        self._json(200, entries, head=head)
                    return
                m = re.match(r"^/api/models/([^/]+(?:/[^/]+)??)(?:/revision/([^/]+))?$", path)
                if m:
                    repo = self._repo(urllib.parse.unquote(m.group(1)), head)
                    if repo is None:
                        return
                    rev = urllib.parse.unquote(m.group(2) or "main")
                    if self._revision_ok(repo, rev, head):
                        self._json(200, repo.info(), head=head)
                    return
                m = re.match(r"^/([^/]+(?:/[^/]+)?)/resolve/([^/]+)/(.+)$", path)
                if m:
                    self._resolve(urllib.parse.unquote(m.group(1)), urllib.parse.unquote(m.group(2)),
                                  urllib.parse.unquote(m.group(3)), head)
                    return
                self._error(404, "NotFound", "Not found", head=head)

            def _resolve(self, repo_id, rev, rel, head):
                repo = self._repo(repo_id, head)
                if repo is None or not self._revision_ok(repo, rev, head):
                    return
                commit = {"X-Repo-Commit": repo.commit}
                if rel in hub.fail and not head:
                    self._error(int(hub.fail[rel]), "InternalError", "injected failure", commit)
                    return
                f = repo.files.get(rel)
                if f is None:
                    self._error(404, "EntryNotFound", "Entry not found", commit, head)
                    return
                headers = dict(commit, **{"Accept-Ranges": "bytes",
                                          "Last-Modified": email.utils.formatdate(0, usegmt=True)})
                if f["lfs"]:
                    headers.update({"ETag": '"%s"' % f["oid"], "X-Linked-Etag": '"%s"' % f["sha256"],
                                    "X-Linked-Size": str(f["size"])})
                else:
                    headers["ETag"] = '"%s"' % f["oid"]
                size = f["size"]
                start, end = 0, size - 1
                status = 200
                wanted = self.headers.get("Range")
                if wanted and not head:
                    r = _RANGE.match(wanted.strip())
                    if not r or (r.group(1) == "" and r.group(2) == ""):
                        self._error(416, "RangeNotSatisfiable", "bad range", commit)
                        return
                    if r.group(1) == "":            # bytes=-N: the last N bytes
                        start, end = max(size - int(r.group(2)), 0), size - 1
                    else:
                        start = int(r.group(1))
                        end = min(int(r.group(2)), size - 1) if r.group(2) else size - 1
                    if start >= size or start > end:
                        self._log(416, 0)
                        self.send_response(416)
                        self.send_header("Content-Range", "bytes */%d" % size)
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    status = 206
                    headers["Content-Range"] = "bytes %d-%d/%d" % (start, end, size)
                length = end - start + 1
                self.send_response(status)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(length))
                for key, value in headers.items():
                    self.send_header(key, value)
                if head:
                    self._log(status, 0)
                self.end_headers()
                if head:
                    return
                # Only a download longer than cut_after is cut (once per file).
                cut = hub.cut_after is not None and length > hub.cut_after and hub._first_cut(repo_id + "/" + rel)
                limit = min(length, hub.cut_after) if cut else length
                sent = 0
                t0 = time.monotonic()
                # Paced in pieces of 1/20 s at the rate, so that even a small file takes its time.
                step = min(CHUNK, max(1024, int(hub.rate / 20))) if hub.rate else CHUNK
                with open(repo.path(rel), "rb") as handle:
                    handle.seek(start)
                    while sent < limit:
                        data = handle.read(min(step, limit - sent))
                        if not data:
                            break
                        try:
                            self.wfile.write(data)
                            self.wfile.flush()
                        except OSError:
                            break
                        sent += len(data)
                        if hub.rate:
                            ahead = sent / hub.rate - (time.monotonic() - t0)
                            if ahead > 0:
                                time.sleep(ahead)
                self._log(status, sent, {"cut": cut})
                if cut:
                    if hub.stall:
                        hub.stalled.set()
                        hub.release.wait(120)
                    self.close_connection = True
                    try:
                        self.connection.shutdown(2)
                    except OSError:
                        pass

        return Handler


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="A test double of the Hugging Face Hub's file API on loopback.")
    ap.add_argument("--repo", action="append", required=True, metavar="ORG/NAME=DIR",
                    help="serve DIR as the model repo ORG/NAME (repeatable)")
    ap.add_argument("--host", default="127.0.0.1", help="a loopback address (default 127.0.0.1)")
    ap.add_argument("--port", type=int, default=0, help="0: a free port")
    ap.add_argument("--port-file", default="", help="write the port here once listening")
    ap.add_argument("--log", default="", help="append one JSON line per request to this file")
    ap.add_argument("--token", default="", help="require 'Authorization: Bearer TOKEN'")
    ap.add_argument("--rate", type=float, default=0, help="bytes per second per download (0: unlimited)")
    ap.add_argument("--cut-after", type=int, default=None, help="cut the first GET of each file after N bytes")
    args = ap.parse_args(argv)
    repos = {}
    for item in args.repo:
        name, sep, directory = item.partition("=")
        if not sep or not os.path.isdir(directory):
            ap.error("--repo wants ORG/NAME=DIR with an existing DIR, got %r" % item)
        repos[name] = directory
    hub = HubDouble(repos, host=args.host, port=args.port, token=args.token or None, cut_after=args.cut_after,
                    rate=args.rate or None, log_file=args.log or None)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(str(hub.port))
        os.replace(tmp, args.port_file)
    print("hf_hub_double: %s serving %s" % (hub.url, ", ".join("%s (commit %s)" % (r.repo_id, r.commit[:12])
                                                               for r in hub.repos.values())), flush=True)
    try:
        hub.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
