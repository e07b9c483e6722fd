# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The TTFT the front door (roles/front_door: nginx, TLS, the key check) adds on loopback: the same streaming
completions sent straight to the upstream and through the door, interleaved one by one so that drift hits both,
on one kept-alive connection each (what an agent's SDK does), or a new connection (a new TLS handshake) per request
with --new-connections. Prints p50/p95 of each and of the difference; the goal is an added p50 <= 2 ms.

On a box with the door (the upstream's key from /etc/vllm/secrets.env, a client key, the lab CA):
    front_door_ttft.py --direct http://127.0.0.1:8000 --upstream-key KEY \\
        --door https://localhost:443 --key CLIENT_KEY --ca /etc/nginx/gpuhost-front-door/lab-ca.crt --model MODEL
In the checkout, with the vLLM test double and nginx rendered from the role as the unit tests start them
(Debian's nginx installed or in the lab's apt pool; `. scripts/lab-env.sh` first):
    front_door_ttft.py --local
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import ssl
import statistics
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class Client:
    """One base URL: a kept-alive connection (or a new one per request), streaming completions, TTFT in seconds."""

    def __init__(self, base_url, headers, ca=None, new_connections=False, timeout=60):
        url = urllib.parse.urlsplit(base_url)
        self.https = url.scheme == "https"
        self.host, self.port = url.hostname, url.port or (443 if self.https else 80)
        self.headers = dict(headers, **{"content-type": "application/json"})
        self.context = ssl.create_default_context(cafile=ca) if self.https else None
        self.new_connections = new_connections
        self.timeout = timeout
        self.conn = None

    def _connection(self):
        if self.conn is None or self.new_connections:
            if self.conn is not None:
                self.conn.close()
            self.conn = (http.client.HTTPSConnection(self.host, self.port, timeout=self.timeout, context=self.context)
                         if self.https else http.client.HTTPConnection(self.host, self.port, timeout=self.timeout))
        return self.conn

    def ttft(self, model, prompt, max_tokens):
        body = json.dumps({"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
                           "stream": True}).encode()
        conn = self._connection()
        start = time.perf_counter()
        conn.request("POST", "/v1/completions", body=body, headers=self.headers)
        resp = conn.getresponse()
        if resp.status != 200:
            raise SystemExit("%s:%s answered %d: %s" % (self.host, self.port, resp.status, resp.read()[:300]))
        first = None
        while True:
            line = resp.readline()
            if not line:
                break
            if first is None and line.startswith(b"data: {"):
                first = time.perf_counter() - start
        if first is None:
            raise SystemExit("no token from %s:%s" % (self.host, self.port))
        return first


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def measure(direct, door, model, rounds, max_tokens, warmup=5):
    times = {"direct": [], "door": []}
    for i in range(warmup + rounds):
        prompt = "front door bench %d: say something" % i
        pair = (("direct", direct), ("door", door)) if i % 2 == 0 else (("door", door), ("direct", direct))
        for name, client in pair:
            value = client.ttft(model, prompt, max_tokens)
            if i >= warmup:
                times[name].append(value)
    return times


def report(times, label):
    added = [b - a for a, b in zip(times["direct"], times["door"])]
    print("front door TTFT on loopback (%s, %d requests each, interleaved)" % (label, len(added)))
    print("  %-8s %9s %9s" % ("", "p50 ms", "p95 ms"))
    for name in ("direct", "door"):
        print("  %-8s %9.2f %9.2f" % (name, 1000 * statistics.median(times[name]), 1000 * percentile(times[name], 0.95)))
    p50 = 1000 * (statistics.median(times["door"]) - statistics.median(times["direct"]))
    print("  added    %9.2f %9.2f   (p50 of door minus p50 of direct; p95 of the pairwise differences)"
          % (p50, 1000 * percentile(added, 0.95)))
    print("  goal: added p50 <= 2 ms: %s" % ("met" if p50 <= 2.0 else "NOT met"))
    return p50


def local(args):
    """The vLLM test double behind nginx rendered from the role, with the lab CA tls.yml makes (as the unit tests)."""
    import tempfile  # pylint: disable=import-outside-toplevel
    import pathlib  # pylint: disable=import-outside-toplevel
    collections = os.path.join(ROOT, ".cache", "collections")
    sys.path.insert(0, collections)
    from ansible.plugins.loader import init_plugin_loader  # noqa: E402  (the role's filters for its templates)
    init_plugin_loader([collections])
    from ansible_collections.gpuhost.inference.tests.unit.doubles.test_vllm_double import Double  # noqa: E402
    from ansible_collections.gpuhost.inference.tests.unit.roles import test_front_door as fd  # noqa: E402

    class Factory:  # pytest's tmp_path_factory, enough for the harness
        def __init__(self, base):
            self.base = base

        def mktemp(self, name):
            path = pathlib.Path(tempfile.mkdtemp(prefix=name, dir=self.base))
            return path

    with tempfile.TemporaryDirectory(prefix="front-door-bench-") as tmp:
        tmp_path = pathlib.Path(tmp)
        factory = Factory(tmp)
        nginx_bin = fd._nginx_binary(factory.mktemp("nginx-deb"))  # pylint: disable=protected-access
        tls = fd.make_lab_tls(factory.mktemp("tls"))
        double = Double(tmp_path, settings={"api_key": fd.UPSTREAM_KEY, "served_model_name": "lab-model"})
        try:
            door = fd.Nginx(nginx_bin, tmp_path, double.port, tls)
            try:
                key = fd.CLIENTS["alice"]
                direct = Client("http://127.0.0.1:%d" % double.port, {"Authorization": "Bearer " + fd.UPSTREAM_KEY},
                                new_connections=args.new_connections)
                through = Client("https://localhost:%d" % door.port, {"Authorization": "Bearer " + key}, ca=tls["ca"],
                                 new_connections=args.new_connections)
                times = measure(direct, through, "lab-model", args.rounds, args.max_tokens)
            finally:
                door.stop()
        finally:
            double.stop()
    return times


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--local", action="store_true", help="the vLLM test double and nginx from the role, here")
    parser.add_argument("--direct", help="the upstream's base URL (http://127.0.0.1:8000)")
    parser.add_argument("--upstream-key", default="", help="the upstream's own key, for the direct requests")
    parser.add_argument("--door", help="the door's base URL (https://localhost:443)")
    parser.add_argument("--key", default="", help="a client key of the door")
    parser.add_argument("--ca", help="the CA the door's certificate is checked with")
    parser.add_argument("--model", default="lab-model")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--max-tokens", type=int, default=4)
    parser.add_argument("--new-connections", action="store_true", help="a new connection (TLS handshake) per request")
    args = parser.parse_args(argv)
    label = "a new connection per request" if args.new_connections else "kept-alive connections"
    if args.local:
        times = local(args)
    else:
        if not (args.direct and args.door):
            parser.error("--direct and --door (or --local)")
        direct = Client(args.direct, {"Authorization": "Bearer " + args.upstream_key} if args.upstream_key else {},
                        new_connections=args.new_connections)
        door = Client(args.door, {"Authorization": "Bearer " + args.key}, ca=args.ca, new_connections=args.new_connections)
        times = measure(direct, door, args.model, args.rounds, args.max_tokens)
    report(times, label)
    return 0


if __name__ == "__main__":
    sys.exit(main())
