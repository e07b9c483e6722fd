"""The vLLM test double's OpenAI-compatible server (stdlib HTTP, simulated engine).

Started exactly like vLLM 0.28.0: `python -m vllm.entrypoints.openai.api_server --config X.yaml`.
It logs vLLM-style startup lines to stderr (the KV-pool line, the init time, "Starting vLLM API
server 0 on ..."), then serves /health, /version, /v1/models, /metrics, /v1/completions
(streaming SSE and not). Faults are injected by environment variables:

  GPUHOST_DOUBLE_STARTUP_S=S              seconds of "engine init" before it listens (1.0)
  GPUHOST_DOUBLE_FAIL_AT_START=1          the engine core fails to start (exit 1)
  GPUHOST_DOUBLE_DIE_AFTER_REQUESTS=N     EngineDeadError after N completions, then exit 0 (as 0.28.0)
  GPUHOST_DOUBLE_KV_TOKENS_PER_GPU=T      KV pool per GPU at gpu_memory_utilization 0.92 (140000)
  GPUHOST_DOUBLE_KV_BYTES_PER_TOKEN=B     sizes the pool from --kv-cache-memory-bytes (1024)
  GPUHOST_DOUBLE_SPEC_KV_FACTOR=F         pool factor with a speculative config (0.865)
  GPUHOST_DOUBLE_STEP_MS, _BATCH_GROWTH, _PREFILL_MS_PER_1K, _SPEC_ACCEPT: see engine.py

and, on the running server, by POST /_double/faults (the double's own route, no key; state of this process only, so a
restart of the unit clears it, as a restart cleared the real incident of issue 45):

  {"forced_tool_call_error": true}        every forced tool call ends in an engine error, as vLLM 0.28.0 ends a
                                          request whose structured-output grammar rejected a token: the EngineCore
                                          logs "grammar rejected tokens ... Terminating request", the request is
                                          counted under vllm:request_success_total{finished_reason="error"}, a stream
                                          gets an error event after its 200 OK, a whole answer is a 500; plain
                                          completions and unforced turns still work.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import sys
import threading
import time
import traceback
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import vllm as _vllm
from vllm._double import agents
from vllm._double import config as cfg
from vllm._double.engine import Engine, Sequence, Speeds

VERSION = _vllm.__version__  # the dist version (0.28.0 unless built otherwise); /version answers it
FINGERPRINT = f"vllm-{VERSION}-{uuid.uuid4().hex[:8]}"
ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)

_PID = os.getpid()
_LOG_LOCK = threading.Lock()


def log(level: str, where: str, message: str, proc: str = "APIServer") -> None:
    pid = _PID + {"APIServer": 0, "EngineCore": 1, "Worker": 2}.get(proc, 3)
    stamp = time.strftime("%m-%d %H:%M:%S")
    with _LOG_LOCK:
        for line in message.split("\n"):
            sys.stderr.write(f"({proc} pid={pid}) {level} {stamp} [{where}] {line}\n")
        sys.stderr.flush()


def raw_log(line: str, proc: str = "APIServer") -> None:
    pid = _PID + {"APIServer": 0, "EngineCore": 1, "Worker": 2}.get(proc, 3)
    with _LOG_LOCK:
        sys.stderr.write(f"({proc} pid={pid}) {line}\n")
        sys.stderr.flush()


def traceback_lines(frames: list[tuple[str, int, str]], error: str, proc: str = "APIServer") -> None:
    raw_log("Traceback (most recent call last):", proc)
    for filename, line, func in frames:
        raw_log(f'  File "{filename}", line {line}, in {func}', proc)
    for line in error.split("\n"):
        raw_log(line, proc)


class StartupError(Exception):
    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class State:
    """Everything the handlers read: the arguments, the engine, the counters."""

    def __init__(self, args: cfg.ServerArgs, environ):
        self.args = args
        self.environ = environ
        self.lock = threading.Lock()
        self.completed = 0
        self.die_after = int(environ.get("GPUHOST_DOUBLE_DIE_AFTER_REQUESTS", "0") or 0)
        self.success = 0
        self.errors = 0  # requests finished with finished_reason "error"
        self.faults: dict[str, bool] = {"forced_tool_call_error": False}
        self.prompt_tokens_total = 0
        self.ttft_counts = [0] * (len(TTFT_BUCKETS) + 1)
        self.ttft_sum = 0.0
        self.ttft_n = 0
        self.engine: Engine | None = None
        self.max_model_len = 0
        self.kv_tokens = 0
        self.num_blocks = 0
        self.max_concurrency = 0.0
        self.spec_tokens = 0
        self.created = int(time.time())
        self.created_at = time.time()
        self.block_size_given = "block_size" in args.raw
        # vLLM's --enable-server-load-tracking: the completions the API server holds, read at GET /load
        self.load_tracking = args.enable_server_load_tracking
        self.server_load = 0
        # The prefix cache's counters (vllm:prefix_cache_queries_total / _hits_total): prompt blocks seen before.
        self.prefix_blocks: set[str] = set()
        self.prefix_queries = 0
        self.prefix_hits = 0

    def prefix_lookup(self, prompt: str) -> int:
        """Count a prompt against the prefix cache: its leading blocks (64 characters, chained) seen before are
        hits; returns the hit tokens. Nothing is cached with --no-enable-prefix-caching."""
        tokens = count_text_tokens(prompt)
        hits = 0
        with self.lock:
            self.prefix_queries += tokens
            if not self.args.enable_prefix_caching:
                return 0
            digest, leading = "", True
            for start in range(0, len(prompt) - 63, 64):
                block = prompt[start:start + 64]
                digest = hashlib.sha256((digest + block).encode()).hexdigest()
                if leading and digest in self.prefix_blocks:
                    hits += count_text_tokens(block)
                else:
                    leading = False
                    if len(self.prefix_blocks) > 200000:
                        self.prefix_blocks.clear()
                    self.prefix_blocks.add(digest)
            hits = min(hits, tokens)
            self.prefix_hits += hits
        return hits

    def observe_ttft(self, seconds: float) -> None:
        with self.lock:
            self.ttft_sum += seconds
            self.ttft_n += 1
            for i, bound in enumerate(TTFT_BUCKETS):
                if seconds <= bound:
                    self.ttft_counts[i] += 1
                    break
            else:
                self.ttft_counts[-1] += 1


# ---------------------------------------------------------------- startup (engine init)

def model_config(model: str) -> dict:
    """A local model directory with a config.json, as a stand-in for loading the model."""
    path = os.path.join(model, "config.json")
    if not os.path.isdir(model) or not os.path.isfile(path):
        raise StartupError(
            "model",
            f"Invalid repository ID or local directory specified: '{model}'.\n"
            "Please verify the following requirements:\n"
            "1. Provide a valid Hugging Face repository ID.\n"
            "2. Specify a local directory that contains a recognized configuration file.\n"
            "   - For Hugging Face models: ensure the presence of a 'config.json'.\n"
            "   - For Mistral models: ensure the presence of a 'params.json'.\n",
        )
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def kv_pool(args: cfg.ServerArgs, environ) -> tuple[int, float]:
    """(pool tokens, KV GiB): from --kv-cache-memory-bytes, else per GPU x TP x utilisation."""
    per_token = float(environ.get("GPUHOST_DOUBLE_KV_BYTES_PER_TOKEN", 1024) or 1024)
    if args.kv_cache_memory_bytes:
        tokens = args.kv_cache_memory_bytes / per_token
    else:
        per_gpu = float(environ.get("GPUHOST_DOUBLE_KV_TOKENS_PER_GPU", 140000) or 140000)
        tokens = per_gpu * max(1, args.tensor_parallel_size) * args.gpu_memory_utilization / 0.92
    if args.speculative_config:
        tokens *= float(environ.get("GPUHOST_DOUBLE_SPEC_KV_FACTOR", 0.865) or 0.865)
    blocks = int(tokens) // args.block_size
    return blocks * args.block_size, blocks * args.block_size * per_token / 2**30


def startup(state: State) -> None:
    args, environ = state.args, state.environ
    banner = ["", "       █     █     █▄   ▄█",
              f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VERSION}",
              f"  █▄█▀ █     █     █     █  model   {args.model}",
              "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀", ""]
    for line in banner:
        log("INFO", "api_utils.py:333", line)
    log("INFO", "api_utils.py:272", f"non-default args: {args.non_default()!r}")
    hf_config = model_config(args.model)
    arch = (hf_config.get("architectures") or ["LlamaForCausalLM"])[0]
    derived = int(hf_config.get("max_position_embeddings") or 2048)
    log("INFO", "model.py:672", f"Resolved architecture: {arch}")
    max_model_len = args.max_model_len or derived
    if max_model_len > derived:
        log("WARNING", "model.py:2025",
            f"User-specified max_model_len ({max_model_len}) is greater than the derived "
            f"max_model_len (max_position_embeddings={derived} in model's config.json). "
            "The test double serves it anyway.")
    log("INFO", "model.py:1965", f"Using max model len {max_model_len}")
    mnbt = args.max_num_batched_tokens or max(8192, 2048)
    log("INFO", "scheduler.py:242", f"Chunked prefill is enabled with max_num_batched_tokens={mnbt}.")
    spec = args.speculative_config or {}
    state.spec_tokens = int(spec.get("num_speculative_tokens", 0) or 0) if spec else 0
    log("INFO", "core.py:122",
        f"Initializing a V1 LLM engine (v{VERSION}) with config: model='{args.model}', "
        f"speculative_config={spec or None}, tokenizer='{args.model}', "
        f"max_seq_len={max_model_len}, tensor_parallel_size={args.tensor_parallel_size}, "
        f"served_model_name={args.names[0]}, enable_prefix_caching={args.enable_prefix_caching}",
        proc="EngineCore")
    started = time.monotonic()
    startup_s = float(environ.get("GPUHOST_DOUBLE_STARTUP_S", "1.0") or 0)
    time.sleep(startup_s * 0.6)
    if environ.get("GPUHOST_DOUBLE_FAIL_AT_START", "") not in ("", "0"):
        raise StartupError(
            "engine",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacity of 23.56 GiB of which 1.12 GiB is free. "
            "(injected by the vLLM test double: GPUHOST_DOUBLE_FAIL_AT_START)")
    tokens, gib = kv_pool(args, environ)
    if args.kv_cache_memory_bytes:
        log("INFO", "cpu_worker.py:255",  # the form of the real capture (CPU build)
            f"Explicitly set ({args.kv_cache_memory_bytes / 2**30:.2f}/23.56) GiB for KV cache on node 0.",
            proc="Worker")
    else:
        log("INFO", "gpu_worker.py:579", f"Available KV cache memory: {gib:.2f} GiB", proc="EngineCore")
    if tokens < max_model_len:
        raise StartupError(
            "kv",
            f"ValueError: To serve at least one request with the models's max seq len "
            f"({max_model_len}), ({max_model_len * gib / max(tokens, 1):.2f} GiB KV cache is needed, "
            f"which is larger than the available KV cache memory ({gib:.2f} GiB). Based on the "
            f"available memory, the estimated maximum model length is {tokens}. Try increasing "
            "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
    state.max_model_len = max_model_len
    state.kv_tokens = tokens
    state.num_blocks = tokens // args.block_size
    state.max_concurrency = tokens / max_model_len
    log("INFO", "kv_cache_utils.py:1869",
        f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens "
        f"per request: {state.max_concurrency:.2f}x", proc="EngineCore")
    time.sleep(startup_s * 0.4)
    log("INFO", "core.py:354",
        f"init engine (profile, create kv cache, warmup model) took {time.monotonic() - started:.2f} s",
        proc="EngineCore")
    state.engine = Engine(args.max_num_seqs, tokens, args.block_size, state.spec_tokens,
                          Speeds.from_env(environ))
    state.engine.start()
    log("INFO", "api_server.py:653", "Supported tasks: ['generate']")


def startup_failure(exc: StartupError) -> int:
    if exc.kind == "model":
        traceback_lines([
            ("<frozen runpy>", 198, "_run_module_as_main"),
            ("/opt/vllm/venv/lib/python3/site-packages/vllm/entrypoints/openai/api_server.py", 2019, "<module>"),
            ("/opt/vllm/venv/lib/python3/site-packages/vllm/engine/arg_utils.py", 1523, "create_model_config"),
            ("/opt/vllm/venv/lib/python3/site-packages/vllm/transformers_utils/config.py", 731, "get_config"),
        ], "ValueError: " + str(exc))
    else:
        log("ERROR", "core.py:1065", "EngineCore failed to start.", proc="EngineCore")
        traceback_lines([
            ("/opt/vllm/venv/lib/python3/site-packages/vllm/v1/engine/core.py", 1039, "run_engine_core"),
            ("/opt/vllm/venv/lib/python3/site-packages/vllm/v1/engine/core.py", 110, "__init__"),
            ("/opt/vllm/venv/lib/python3/site-packages/vllm/v1/engine/core.py", 241, "_initialize_kv_caches"),
        ], str(exc), proc="EngineCore")
        traceback_lines([
            ("<frozen runpy>", 198, "_run_module_as_main"),
            ("/opt/vllm/venv/lib/python3/site-packages/vllm/v1/engine/utils.py", 1120, "wait_for_engine_startup"),
        ], "RuntimeError: Engine core initialization failed. See root cause above. "
           "Failed core proc(s): {'EngineCore_DP0': 1}")
    return 1


def engine_dead(state: State) -> None:
    """The injected engine death: the messages real vLLM logs, then exit status 0.

    vLLM 0.28.0's API server does not fail on an engine death: its launcher sets uvicorn's
    should_exit (unless VLLM_KEEP_ALIVE_ON_ENGINE_DEATH), so the process ends cleanly with status
    0, as seen on the real CPU build. A unit with Restart=on-failure stays down after it.
    """
    log("ERROR", "core.py:1074", "EngineCore encountered a fatal error.", proc="EngineCore")
    traceback_lines([
        ("/opt/vllm/venv/lib/python3/site-packages/vllm/v1/engine/core.py", 1065, "run_engine_core"),
        ("/opt/vllm/venv/lib/python3/site-packages/vllm/v1/engine/core.py", 1098, "run_busy_loop"),
    ], "RuntimeError: CUDA error: an illegal memory access was encountered "
       "(injected by the vLLM test double: GPUHOST_DOUBLE_DIE_AFTER_REQUESTS)", proc="EngineCore")
    log("ERROR", "async_llm.py:708", "AsyncLLM output_handler failed.")
    traceback_lines([
        ("/opt/vllm/venv/lib/python3/site-packages/vllm/v1/engine/async_llm.py", 664, "output_handler"),
    ], f"vllm.v1.engine.exceptions.EngineDeadError: {ENGINE_DEAD_MESSAGE}")
    log("ERROR", "api_server.py:1955", f"EngineDeadError: {ENGINE_DEAD_MESSAGE}")
    raw_log("INFO:     Shutting down")
    os._exit(0)


# ---------------------------------------------------------------- requests

def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


class RequestError(Exception):
    def __init__(self, status: int, body: dict):
        super().__init__(body["error"]["message"])
        self.status = status
        self.body = body


def count_text_tokens(text: str) -> int:
    """The double's tokenizer: words or bytes/4, whichever is more."""
    return max(len(text.split()), -(-len(text.encode("utf-8")) // 4), 1)


def prompt_length(prompt, max_input: int) -> int:
    """Token count of one prompt; a text prompt counts at most max_input + 1, as vLLM's
    tokenizer truncates to one past the limit before the length check."""
    if isinstance(prompt, str):
        return min(count_text_tokens(prompt), max_input + 1)
    if isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    raise RequestError(400, error_body("prompt must be a string, an array of strings or an "
                                       "array of token ids", "BadRequestError", 400, "prompt"))


def check_length(state: State, tokens: int, max_tokens: int) -> None:
    """vLLM 0.28.0's TokenizeParams._token_len_check, message and all."""
    max_input = state.max_model_len - max_tokens
    if tokens > max_input:
        qualifier = "at least " if tokens == max_input + 1 else ""
        total = tokens + max_tokens
        message = (
            f"This model's maximum context length is {state.max_model_len} tokens. However, you "
            f"requested {max_tokens} output tokens and your prompt contains {qualifier}{tokens} "
            f"input tokens, for a total of {qualifier}{total} tokens. Please reduce the length of "
            f"the input prompt or the number of requested output tokens. "
            f"(parameter=input_tokens, value={tokens})")
        raise RequestError(400, error_body(message, "BadRequestError", 400, "input_tokens"))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    state: State  # set on the class by serve()

    def setup(self):
        super().setup()
        # uvicorn (vLLM's API server) sets TCP_NODELAY on every connection: a small SSE event goes out at once
        # instead of waiting for the peer's delayed ACK (40 ms on Linux) behind the one before it.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format, *args):  # noqa: A002 - BaseHTTPRequestHandler's signature
        return

    def _access(self, status: int) -> None:
        phrase = HTTPStatus(status).phrase
        raw_log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - '
                f'"{self.command} {self.path} {self.request_version}" {status} {phrase}')

    def _send(self, status: int, body, content_type: str = "application/json") -> None:
        data = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)
        self._access(status)

    def _authorised(self) -> bool:
        keys = self.state.args.api_key
        path = self.path.split("?", 1)[0]
        if not keys or not path.startswith(("/v1", "/v2", "/inference", "/cohere")):
            return True
        scheme, _sep, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and token in keys:
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def do_GET(self):  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if not self._authorised():
            return
        if path == "/health":
            self._send(200, b"", "application/json")
        elif path == "/version":
            self._send(200, {"version": VERSION})
        elif path == "/v1/models":
            self._send(200, self._models())
        elif path == "/metrics":
            self._send(200, metrics_text(self.state).encode(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/load":
            self._send(200, {"server_load": self.state.server_load})
        else:
            self._send(404, {"detail": "Not Found"})

    def _models(self) -> dict:
        st = self.state
        data = []
        for name in st.args.names:
            data.append({
                "id": name, "object": "model", "created": st.created, "owned_by": "vllm",
                "root": st.args.model, "parent": None, "max_model_len": st.max_model_len,
                "permission": [{
                    "id": f"modelperm-{uuid.uuid4().hex[:16]}", "object": "model_permission",
                    "created": st.created, "allow_create_engine": False, "allow_sampling": True,
                    "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                    "allow_fine_tuning": False, "organization": "*", "group": None,
                    "is_blocking": False}],
            })
        return {"object": "list", "data": data}

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorised():
            return
        path = self.path.split("?", 1)[0]
        if path == "/_double/faults":
            self._faults(raw)
            return
        routes = {"/v1/completions": self._completions, "/v1/chat/completions": self._agent(agents.chat),
                  "/v1/responses": self._agent(agents.responses), "/v1/messages": self._agent(agents.messages),
                  "/v1/messages/count_tokens": self._agent(agents.count_tokens)}
        if path not in routes:
            self._send(404, {"detail": "Not Found"})
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("body is not an object")
        except ValueError as exc:
            self._send(400, error_body(f"Invalid JSON: {exc}", "BadRequestError", 400))
            return
        self._agent_body_model = body.get("model")
        st = self.state
        if st.load_tracking:
            with st.lock:
                st.server_load += 1
        try:
            routes[path](body)
        except RequestError as exc:
            if path.startswith("/v1/messages"):  # vLLM's Anthropic routes translate the error (api_router.py)
                err = exc.body["error"]
                self._send(exc.status, {"type": "error", "error": {"type": err["type"], "message": err["message"]}})
            else:
                self._send(exc.status, exc.body)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            if st.load_tracking:
                with st.lock:
                    st.server_load -= 1

    def _faults(self, raw: bytes) -> None:
        """POST /_double/faults {name: bool}: switch a fault of the running server (module docstring)."""
        try:
            body = json.loads(raw or b"{}")
            unknown = sorted(set(body) - set(self.state.faults))
            if unknown or not all(isinstance(v, bool) for v in body.values()):
                raise ValueError("known faults (booleans): %s; got %s" % (sorted(self.state.faults), body))
        except (ValueError, AttributeError, TypeError) as exc:
            self._send(400, error_body(str(exc), "BadRequestError", 400))
            return
        with self.state.lock:
            self.state.faults.update(body)
            faults = dict(self.state.faults)
        log("WARNING", "double", f"faults now {faults}")
        self._send(200, faults)

    def _completions(self, body: dict) -> None:
        st = self.state
        model = body.get("model")
        if model is not None and model not in st.args.names:
            raise RequestError(404, error_body(f"The model `{model}` does not exist.",
                                               "NotFoundError", 404, "model"))
        max_tokens = body.get("max_tokens", 16)
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise RequestError(400, error_body(f"max_tokens must be at least 1, got {max_tokens}.",
                                               "BadRequestError", 400, "max_tokens"))
        prompt = body.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # the double serves the first prompt of a batch
        if prompt is None:
            raise RequestError(400, error_body("Either prompt or prompt_embeds must be provided "
                                               "and non-empty.", "BadRequestError", 400))
        tokens = prompt_length(prompt, st.max_model_len - (max_tokens or 0))
        check_length(st, tokens, max_tokens or 0)
        if max_tokens is None:
            max_tokens = st.max_model_len - tokens
        request_id = f"cmpl-{uuid.uuid4().hex[:16]}"
        seq = st.engine.submit(Sequence(request_id, tokens, max_tokens, seed=json.dumps(prompt)[:4096]))
        with st.lock:
            st.prompt_tokens_total += tokens
        model_name = st.args.names[0]
        created = int(time.time())
        try:
            if body.get("stream"):
                self._stream(seq, body, model_name, created)
            else:
                self._whole(seq, model_name, created)
        finally:
            st.engine.cancel(seq)
        self._completed()

    # ---- the agent surfaces (agents.py): the helpers they share

    def _agent(self, route):
        def run(body):
            route(self, body)
            if route is not agents.count_tokens:
                self._completed()
        return run

    def _fail(self, status: int, message: str, param: str | None = None) -> None:
        kind = {400: "BadRequestError", 404: "NotFoundError"}.get(status, "BadRequestError")
        raise RequestError(status, error_body(message, kind, status, param))

    def _agent_submit(self, prompt: str, max_tokens, tool) -> Sequence:
        """Check the model and the length like vLLM, count the prompt against the prefix cache, submit it."""
        st = self.state
        model = self._agent_body_model
        if model is not None and model not in st.args.names:
            raise RequestError(404, error_body(f"The model `{model}` does not exist.", "NotFoundError", 404, "model"))
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            self._fail(400, f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens")
        tokens = min(count_text_tokens(prompt), st.max_model_len - (max_tokens or 0) + 1)
        check_length(st, tokens, max_tokens or 0)
        if max_tokens is None:
            max_tokens = st.max_model_len - tokens
        if tool is not None:
            max_tokens = min(max_tokens, 8)  # a forced call's arguments: a few constrained tokens
        cached = st.prefix_lookup(prompt)
        seq = st.engine.submit(Sequence(f"chatcmpl-{uuid.uuid4().hex[:16]}", tokens, max_tokens, seed=prompt[-4096:]))
        with st.lock:
            st.prompt_tokens_total += tokens
        self._agent_turn = agents.Turn(tokens, cached)
        return seq

    def _engine_error_log(self, request_id: str) -> None:
        """The log lines of a request the engine terminated with "error" (vLLM 0.28.0's scheduler and serving)."""
        log("ERROR", "scheduler.py:1913", f"Unexpected: grammar rejected tokens [0] for request {request_id}. "
            "Terminating request.", proc="EngineCore")
        log("ERROR", "serving.py:175", f"Request {request_id} failed with an internal error during generation")

    def _engine_error(self) -> None:
        """A whole (not streamed) answer to a request the engine finished with "error": HTTP 500."""
        with self.state.lock:
            self.state.errors += 1
        raise RequestError(500, error_body(agents.ENGINE_ERROR["message"], agents.ENGINE_ERROR["type"], 500))

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)

    def _sse(self, obj: dict, event: str | None = None) -> None:
        head = f"event: {event}\n" if event else ""
        self._chunk(f"{head}data: {json.dumps(obj, separators=(',', ':'))}\n\n")

    def _sse_end(self, done: bool, error: bool = False) -> None:
        if done:
            self._chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        with self.state.lock:
            if error:
                self.state.errors += 1
            else:
                self.state.success += 1

    def _events(self, seq: Sequence):
        while True:
            kind, payload, finish = seq.out.get()
            if kind == "end":
                return
            yield payload, finish

    def _stream(self, seq: Sequence, body: dict, model_name: str, created: int) -> None:
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self._access(200)
        first = True
        for tokens, finish in self._events(seq):
            if first:
                self.state.observe_ttft(seq.first_token_at - seq.arrival)
                first = False
            chunk = {"id": seq.request_id, "object": "text_completion", "created": created,
                     "model": model_name,
                     "choices": [{"index": 0, "text": "".join(t for _tid, t in tokens), "logprobs": None,
                                  "finish_reason": finish, "stop_reason": None,
                                  "prompt_token_ids": None, "token_ids": None}]}
            self._chunk(f"data: {json.dumps(chunk, separators=(',', ':'))}\n\n")
        if include_usage:
            usage = {"id": seq.request_id, "object": "text_completion", "created": created,
                     "model": model_name, "choices": [],
                     "usage": {"prompt_tokens": seq.prompt_tokens,
                               "total_tokens": seq.prompt_tokens + seq.generated,
                               "completion_tokens": seq.generated},
                     "system_fingerprint": FINGERPRINT}
            self._chunk(f"data: {json.dumps(usage, separators=(',', ':'))}\n\n")
        self._chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        self.state.success += 1

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _whole(self, seq: Sequence, model_name: str, created: int) -> None:
        text, finish = [], None
        for tokens, fin in self._events(seq):
            text.extend(t for _tid, t in tokens)
            finish = fin or finish
        self.state.observe_ttft(seq.first_token_at - seq.arrival)
        self._send(200, {
            "id": seq.request_id, "object": "text_completion", "created": created,
            "model": model_name,
            "choices": [{"index": 0, "text": "".join(text), "logprobs": None,
                         "finish_reason": finish, "stop_reason": None,
                         "prompt_logprobs": None}],
            "service_tier": None, "system_fingerprint": FINGERPRINT,
            "usage": {"prompt_tokens": seq.prompt_tokens,
                      "total_tokens": seq.prompt_tokens + seq.generated,
                      "completion_tokens": seq.generated, "prompt_tokens_details": None},
            "kv_transfer_params": None})
        self.state.success += 1

    def _completed(self) -> None:
        st = self.state
        with st.lock:
            st.completed += 1
            die = st.die_after and st.completed >= st.die_after
        if die:
            engine_dead(st)


# ---------------------------------------------------------------- /metrics

def _fmt(value: float) -> str:
    return repr(float(value))


def cache_config_labels(state: State) -> dict[str, str]:
    """Labels of vllm:cache_config_info: CacheConfig.__dict__ as strings, plus engine
    (the label set of tests/fixtures/vllm-0.28.0/metrics.txt)."""
    a = state.args
    return {
        "_block_size_resolved": "True",
        "block_size": str(a.block_size),
        "cache_dtype": "auto",
        "enable_prefix_caching": str(a.enable_prefix_caching),
        "engine": "0",
        "gpu_memory_utilization": str(a.gpu_memory_utilization),
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_max_concurrency": str(state.max_concurrency),
        "kv_cache_memory_bytes": str(a.kv_cache_memory_bytes),
        "kv_cache_size_tokens": str(state.kv_tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "auto",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(state.num_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "use_replayssm": "False",
        "user_specified_block_size": str(state.block_size_given),
        "user_specified_mamba_block_size": "False",
    }


def _labels(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def metrics_text(state: State) -> str:
    base = {"engine": "0", "model_name": state.args.names[0]}
    running, waiting = state.engine.counts()
    stats = state.engine.stats
    out = []

    def metric(name, kind, doc, samples):
        out.append(f"# HELP {name} {doc}")
        out.append(f"# TYPE {name} {kind}")
        for suffix, labels, value in samples:
            out.append(f"{name}{suffix}{_labels(labels)} {_fmt(value)}")
        if kind in ("counter", "histogram"):  # prometheus_client's *_created companion
            stem = name[: -len("_total")] if name.endswith("_total") else name
            created = {tuple(sorted((k, v) for k, v in lab.items() if k != "le")) for _suffix, lab, _value in samples}
            out.append(f"# HELP {stem}_created {doc}")
            out.append(f"# TYPE {stem}_created gauge")
            for labels in sorted(created):
                out.append(f"{stem}_created{_labels(dict(labels))} {state.created_at:.16g}")

    metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
           [("", base, running)])
    metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
           [("", base, waiting)])
    metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
           [("", base, state.engine.usage())])
    metric("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           [("", base, state.prompt_tokens_total)])
    metric("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
           [("", base, stats["generation_tokens"])])
    metric("vllm:request_success_total", "counter", "Count of successfully processed requests.",
           [("", dict(base, finished_reason=r), {"length": state.success, "error": state.errors}.get(r, 0))
            for r in ("stop", "length", "abort", "error", "repetition")])
    with state.lock:
        counts, total, n = list(state.ttft_counts), state.ttft_sum, state.ttft_n
    samples, cumulative = [], 0
    for bound, count in zip(TTFT_BUCKETS + (math.inf,), counts):
        cumulative += count
        le = "+Inf" if bound == math.inf else repr(float(bound))
        samples.append(("_bucket", dict(base, le=le), cumulative))
    samples += [("_count", base, n), ("_sum", base, total)]
    metric("vllm:time_to_first_token_seconds", "histogram",
           "Histogram of time to first token in seconds.", samples)
    with state.lock:
        queries, hits = state.prefix_queries, state.prefix_hits
    metric("vllm:prefix_cache_queries_total", "counter",
           "Prefix cache queries, in terms of number of queried tokens.", [("", base, queries)])
    metric("vllm:prefix_cache_hits_total", "counter",
           "Prefix cache hits, in terms of number of cached tokens.", [("", base, hits)])
    metric("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
           [("", cache_config_labels(state), 1)])
    # The double's own (not in vLLM): the simulated engine time, for tests that compare schedules
    # without timing them on a loaded host.
    metric("gpuhost_double:engine_busy_seconds_total", "counter",
           "Sum of the simulated engine step times (test double only).", [("", base, stats["busy_s"])])
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- periodic stats, main

def stats_logger(state: State, interval: float = 10.0) -> None:
    last_prompt, last_gen, last = 0, 0, time.monotonic()
    while True:
        time.sleep(interval)
        now = time.monotonic()
        prompt, gen = state.prompt_tokens_total, state.engine.stats["generation_tokens"]
        running, waiting = state.engine.counts()
        if prompt != last_prompt or gen != last_gen or running or waiting:
            span = max(now - last, 1e-6)
            log("INFO", "loggers.py:310",
                f"Engine 000: Avg prompt throughput: {(prompt - last_prompt) / span:.1f} tokens/s, "
                f"Avg generation throughput: {(gen - last_gen) / span:.1f} tokens/s, "
                f"Running: {running} reqs, Waiting: {waiting} reqs, "
                f"GPU KV cache usage: {100 * state.engine.usage():.1f}%, Prefix cache hit rate: 0.0%")
        last_prompt, last_gen, last = prompt, gen, now


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        """A client that hangs up (keep-alive closed, probe cancelled) is not an error."""
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


def serve(state: State) -> None:
    args = state.args
    host = args.host if args.host is not None else "0.0.0.0"
    Handler.state = state
    httpd = Server((host, args.port), Handler)
    log("INFO", "api_server.py:657", f"Starting vLLM server on http://{host}:{args.port}")
    log("INFO", "launcher.py:51", "Available routes are:")
    for route, methods in (("/version", "GET"), ("/health", "GET"), ("/metrics", "GET"), ("/load", "GET"),
                           ("/v1/models", "GET"), ("/v1/completions", "POST"), ("/v1/chat/completions", "POST"),
                           ("/v1/responses", "POST"), ("/v1/messages", "POST"), ("/v1/messages/count_tokens", "POST")):
        log("INFO", "launcher.py:60", f"Route: {route}, Methods: {methods}")
    raw_log(f"INFO:     Started server process [{_PID}]")
    raw_log("INFO:     Waiting for application startup.")
    raw_log("INFO:     Application startup complete.")
    threading.Thread(target=stats_logger, args=(state,), daemon=True).start()
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        raw_log("INFO:     Shutting down")
        httpd.server_close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    environ = dict(os.environ)
    try:
        args = cfg.server_args(argv, environ)
    except cfg.UsageError as exc:
        cfg.usage_exit(str(exc))
    except (OSError, ValueError) as exc:
        if isinstance(exc, OSError):
            log("ERROR", "argparse_utils.py:566",
                "Unable to read the config file at %s. Check path correctness" % getattr(exc, "filename", ""))
        traceback_lines([("<frozen runpy>", 198, "_run_module_as_main")],
                        f"{type(exc).__name__}: {exc}")
        return 1
    state = State(args, environ)
    try:
        startup(state)
    except StartupError as exc:
        return startup_failure(exc)
    except Exception:  # noqa: BLE001 - a bug in the double must still look like a failed start
        for line in traceback.format_exc().splitlines():
            raw_log(line)
        return 1
    serve(state)
    return 0
