#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_probe
short_description: Measure a running vLLM server - decode speed per concurrency, context limit, power
version_added: "1.0.0"
description:
  - Streams C(POST /v1/completions) at temperature 0 with C(ignore_eos) and
    C(stream_options.include_usage) to a running vLLM (or any OpenAI-compatible) server, one
    concurrency level after the other, and returns per level the time to first token, the per-request
    decode speed, the aggregate tokens per second (all with mean/p50/p90/p95/p99), and the errors by
    HTTP status.
  - Then, for each level of O(sampled_concurrency), the same load sampled as clients sample
    (O(temperature) above 0, O(top_p), request number N sent with seed O(seed) + N so that a run is
    repeatable), returned under RV(sampled).
  - Output tokens are counted from the stream's final C(usage) chunk, not from the number of chunks
    (with speculative decoding one chunk carries several tokens).
  - Every prompt starts with a unique prefix (a run id, the level and the request number), so the
    prefix cache does not flatter the figures.
  - With O(context_probe=true), sends a prompt of token ids exactly filling the context window with
    O(max_tokens) (it must be answered, HTTP 200, with a complete stream of exactly O(max_tokens)
    tokens) and one of a single token more (it must be refused with HTTP 400 naming the context length
    probed); the server's message and the numbers it names are returned.
  - When O(nvidia_smi_path) resolves on the target, samples the power of the GPUs of O(gpu_indices)
    (all when empty) during each level, C(power.draw.instant) where nvidia-smi has it (asked once;
    C(power.draw), a 1 s average, when it says the field is not a valid one or gives no value), and
    returns watts per GPU, joules per output token and tokens per second per watt over the load window.
  - Says where the watts come from (RV(power_source)) - the real nvidia-smi is an ELF executable;
    anything else at the resolved path (the lab's Python mock, a wrapper script) is reported as
    V(test double), whose watts are simulated, not measured.
  - With O(soak_seconds) above 0, keeps the highest level of O(concurrency) busy for that long and
    returns the requests, errors by status and the count of 5xx answers.
  - Sends with aiohttp (the client of C(vllm bench serve); vLLM depends on it, so every vLLM venv has it). Run
    it with the vLLM venv's python (C(ansible_python_interpreter)). Never changes anything (C(changed) is
    always V(false)); in check mode it sends nothing and returns C(skipped=true).
  - A request that fails at the transport before any byte of an answer (connection refused or reset, a kept-alive
    connection closed without an answer) is sent again as the OpenAI and Anthropic SDKs do (at most 2 retries,
    0.5 s then 1 s less up to 25 % jitter) and counted in RV(retries_total); only what fails after the retries,
    an error status, an error event or a stream cut short is an error.
requirements:
  - aiohttp (a dependency of vLLM)
author:
  - gpuhost.inference maintainers (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - gpuhost.inference.vllm_server
options:
  model:
    description:
      - The served model name to request. When omitted, the first model that C(/v1/models) lists.
      - A name that the server does not list fails the task, naming the ones it does.
    type: str
  concurrency:
    description:
      - The concurrency levels, run in this order. Each must be at least 1.
    type: list
    elements: int
    default: [1, 2, 4, 8]
  rounds:
    description:
      - Requests per stream at each level (each level sends O(rounds) times its concurrency requests;
        a stream sends its next request as soon as the previous one ends).
    type: int
    default: 1
  max_tokens:
    description:
      - Output tokens per request (exactly this many, C(ignore_eos) is set). Also the output length of
        the context probe.
    type: int
    default: 256
  prompt_words:
    description:
      - Words in each decode prompt after its unique prefix.
    type: int
    default: 64
  context_probe:
    description:
      - Run the context probe (needs the context length, from O(max_model_len) or C(/v1/models)).
    type: bool
    default: false
  max_model_len:
    description:
      - The server's context length in tokens. When omitted, the C(max_model_len) that C(/v1/models)
        reports for the model.
    type: int
  request_timeout:
    description:
      - Seconds one request may take, from sending to the end of its stream (also the limit for a
        silent connection). A request over it is counted under the error key C(timeout).
    type: float
    default: 300
  timeout:
    description:
      - Seconds the whole probe may take. When it runs out the task fails with the figures measured so far.
    type: float
    default: 3600
  nvidia_smi_path:
    description:
      - nvidia-smi, as a name looked up on the E(PATH) or a path. When it is not found, no power is
        sampled (C(power_available=false)); when it fails while sampling, the figures are returned
        with C(power_error) set.
    type: str
    default: nvidia-smi
  sample_interval_ms:
    description:
      - Milliseconds between power samples (nvidia-smi C(-lms)).
    type: int
    default: 200
  soak_seconds:
    description:
      - Seconds of sustained load at the highest level of O(concurrency) after the levels. V(0) skips it.
    type: float
    default: 0
  sampled_concurrency:
    description:
      - Concurrency levels run sampled (O(temperature), O(top_p), O(seed)) after the greedy levels,
        with the same O(rounds), O(max_tokens), C(ignore_eos), streaming and unique prompt prefixes.
        Each must be at least 1. Empty runs none.
    type: list
    elements: int
    default: []
    version_added: "1.1.0"
  temperature:
    description:
      - The temperature of the sampled levels, above 0 and at most 2.
    type: float
    default: 0.7
    version_added: "1.1.0"
  top_p:
    description:
      - The top_p of the sampled levels, above 0 and at most 1.
    type: float
    default: 0.95
    version_added: "1.1.0"
  seed:
    description:
      - The seed of the first sampled request of a level; request number N (0-based) is sent with
        O(seed) + N, so the sampled load is the same from run to run.
    type: int
    default: 1234
    version_added: "1.1.0"
  gpu_indices:
    description:
      - The nvidia-smi indices of the GPUs serving the model, whose power is sampled (C(-i)). Empty
        samples every GPU.
    type: list
    elements: int
    default: []
    version_added: "1.1.0"
attributes:
  check_mode:
    support: full
    details: Sends no request at all and returns C(skipped=true).
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - "Error keys are the HTTP status as a string (V(400), V(503)), V(timeout), V(connection),
    V(incomplete) (the stream ended before C(data: [DONE])) and V(stream_error) (an error event in the stream)."
  - Percentiles are those of Python's C(statistics.quantiles) with C(method='inclusive'); with a single
    request every figure is that request's value.
  - A burst stream is a complete one whose text arrived in at most two body reads although it has
    more than two tokens (seen as the tokens piled up, not as they were made); its decode rate is left
    out of C(decode_tps) and counted in C(burst_streams).
  - The power figures use only the samples inside the load window (the level's first request sent to
    its last stream end); per GPU C(energy_j) is the integral over the window of the line through
    those samples (each end held to the window's edge), C(mean_w) that energy over the window;
    C(j_per_token) is the summed energy over the output tokens.
  - Each stream keeps its connection alive between its requests (as C(vllm bench serve)'s client does),
    so TTFT does not include a TCP connect. One asyncio event loop drives all streams, C(http://) and
    C(https://) alike (C(benchmarks/probe_capacity.py) compares it with C(vllm bench serve)).
  - The load of a level starts once nvidia-smi has printed its first sample (at most 3 seconds), so a
    short level is covered by power samples from its start.
seealso:
  - name: vLLM OpenAI-compatible server
    description: The API this module talks to.
    link: https://docs.vllm.ai/en/latest/serving/openai_compatible_server.html
"""

EXAMPLES = r"""
- name: Probe the local vLLM at 1, 2, 4 and 8 streams of 256 tokens, with the context probe
  gpuhost.inference.vllm_probe:
    base_url: http://127.0.0.1:8000
    model: qwen3-32b
    context_probe: true
  register: __vllm_verify_probe

- name: Show the single-stream decode speed and the aggregate at the top level
  ansible.builtin.debug:
    msg: >-
      1 stream: {{ __vllm_verify_probe.levels[0].decode_tps.p50 }} tok/s,
      {{ __vllm_verify_probe.levels[-1].concurrency }} streams:
      {{ __vllm_verify_probe.levels[-1].aggregate_tps }} tok/s

- name: Probe with an API key, two rounds per level, then soak 10 minutes at 16 streams
  gpuhost.inference.vllm_probe:
    base_url: http://127.0.0.1:8000
    api_key: "{{ vllm_service_api_key }}"
    concurrency: [1, 16]
    rounds: 2
    soak_seconds: 600
    timeout: 1800
  register: __vllm_verify_soak

- name: Probe 1 and 4 streams greedy, then 4 streams sampled as a coding agent samples, GPUs 0 and 1 only
  gpuhost.inference.vllm_probe:
    base_url: http://127.0.0.1:8000
    concurrency: [1, 4]
    sampled_concurrency: [4]
    temperature: 0.7
    top_p: 0.95
    seed: 1234
    gpu_indices: [0, 1]
  register: __vllm_verify_probe
"""

RETURN = r"""
skipped:
  description: V(true) in check mode (nothing was sent).
  returned: check mode
  type: bool
base_url:
  description: The server probed.
  returned: always
  type: str
model:
  description: The model requested.
  returned: success
  type: str
  sample: qwen3-32b
max_model_len:
  description: The context length used by the context probe (from O(max_model_len) or C(/v1/models)); null when unknown.
  returned: success
  type: int
  sample: 2048
server_version:
  description: C(version) from the server's C(/version), null when it does not answer it.
  returned: success
  type: str
  sample: 0.28.0
power_available:
  description: Whether power was sampled (nvidia-smi found).
  returned: success
  type: bool
power_error:
  description: The nvidia-smi failure that stopped the power sampling, null when none.
  returned: success
  type: str
power_source:
  description:
    - Where the watts come from. V(nvidia-smi) (an ELF executable), V(test double) (a file that is
      not an ELF executable, such as the lab's Python mock, whose watts are simulated) or V(none) (not found).
  returned: success
  type: str
  sample: nvidia-smi
power_field:
  description: The nvidia-smi field sampled, V(power.draw.instant) or V(power.draw); null without power sampling.
  returned: success
  type: str
  sample: power.draw.instant
power_field_note:
  description: Why C(power.draw) was sampled instead of C(power.draw.instant); null when it was not.
  returned: success
  type: str
gpu_indices:
  description: The GPUs sampled (O(gpu_indices), sorted); empty for all.
  returned: success
  type: list
  elements: int
levels:
  description: One entry per concurrency level, in the order of O(concurrency).
  returned: success
  type: list
  elements: dict
  contains:
    concurrency:
      description: Streams in flight.
      type: int
    requests:
      description: Requests sent (concurrency times rounds).
      type: int
    ok:
      description: Requests answered with a complete stream.
      type: int
    errors:
      description: Failed requests by error key (HTTP status as a string, C(timeout), C(connection), ...).
      type: dict
      sample: {"503": 2}
    retries:
      description: Requests of the level sent again after a transport failure before any answer (not errors).
      type: int
    error_messages:
      description: Up to five distinct messages of the failed requests.
      type: list
      elements: str
    output_tokens:
      description: Output tokens of the successful requests, from C(usage).
      type: int
    usage_missing:
      description: Successful requests whose stream had no C(usage) chunk (their tokens are the number of text chunks).
      type: int
    wall_s:
      description: Seconds from the start of the level to the end of its last request.
      type: float
    aggregate_tps:
      description: C(output_tokens) over C(wall_s).
      type: float
    ttft_s:
      description: Time to the first chunk with text, seconds. Keys C(mean), C(p50), C(p90), C(p95), C(p99), C(min), C(max), C(n).
      type: dict
    decode_tps:
      description:
        - Per request (output tokens - 1) / (last text chunk - first text chunk), same keys as C(ttft_s).
        - Burst streams are left out (see C(burst_streams)).
      type: dict
    burst_streams:
      description: Complete streams whose text arrived in at most two body reads (not in C(decode_tps)).
      type: int
    e2e_s:
      description: Per request seconds from sending to the end of the stream, same keys as C(ttft_s).
      type: dict
    power:
      description:
        - Per GPU index (a string), over the load window, C(mean_w) (time-weighted), C(max_w), C(min_w),
          C(samples) (inside the window), C(duration_s) (the window), C(energy_j) (the integral over the
          window), C(enforced_limit_w) and C(sm_clock_mhz) (mean).
        - A window shorter than O(sample_interval_ms) may hold no reading; its figures are then the line
          between the readings just before and just after it (the load starts after a first reading and the
          sampler runs on until one after the load), with C(samples) 0 and C(between) their times.
        - null without power sampling.
      type: dict
      sample: {"0": {"mean_w": 412.5, "max_w": 598.1, "samples": 27, "energy_j": 2301.4, "enforced_limit_w": 600.0}}
    power_window_s:
      description: Seconds from the level's first request sent to its last stream end; null without power sampling.
      type: float
    power_note:
      description:
        - Why a GPU has no power figure (no reading at all), or that its figures come from the readings around a
          window holding none; else null.
      type: str
    power_w:
      description: Sum over the GPUs of C(mean_w); null without power sampling.
      type: float
    energy_j:
      description: Sum over the GPUs of C(energy_j); null without power sampling.
      type: float
    j_per_token:
      description: C(energy_j) over C(output_tokens); null without power sampling or tokens.
      type: float
    tps_per_w:
      description: C(aggregate_tps) over C(power_w); null without power sampling.
      type: float
sampled:
  description:
    - One entry per level of O(sampled_concurrency), in its order, with the keys of an entry of
      RV(levels) plus C(temperature), C(top_p) and C(seed) (the seed of the level's first request).
  returned: success
  type: list
  elements: dict
  sample:
    - {concurrency: 4, temperature: 0.7, top_p: 0.95, seed: 1234, requests: 4, ok: 4, errors: {}, output_tokens: 1024}
context:
  description: The context probe; null when O(context_probe=false).
  returned: success
  type: dict
  contains:
    limit:
      description: The context length probed.
      type: int
    ok:
      description:
        - "The fitting prompt got 200 and a complete stream (C(data: [DONE]), no error event) of exactly
          O(max_tokens) output tokens, and the one over got a 400 whose message names the context length
          probed."
      type: bool
    reason:
      description: What failed, null when C(ok).
      type: str
    fit:
      description:
        - C(status), C(ok), C(complete) (the stream ended with C([DONE]) and no error), C(prompt_tokens),
          C(sent_tokens), C(output_tokens), C(expected_tokens) (O(max_tokens)), C(ttft_s), C(e2e_s),
          C(error), C(message).
      type: dict
    over:
      description:
        - C(status), C(ok) (a 400 naming the limit probed), C(message) (the server's), C(sent_tokens), and
          the numbers parsed from the message, C(limit) (the context length it names), C(requested) (the
          total it names), C(prompt_tokens), C(output_tokens) (null where the message lacks them).
      type: dict
  sample:
    limit: 2048
    ok: true
    reason: null
    fit: {status: 200, ok: true, complete: true, prompt_tokens: 1792, output_tokens: 256, expected_tokens: 256, ttft_s: 0.085}
    over:
      status: 400
      ok: true
      limit: 2048
      requested: 2049
      message: "This model's maximum context length is 2048 tokens. However, you requested 256 output tokens ..."
soak:
  description:
    - The soak; null when O(soak_seconds=0). The keys of a level (C(requests), C(ok), C(errors),
      C(output_tokens), C(wall_s), C(aggregate_tps), C(ttft_s), C(decode_tps), power keys) plus
      C(seconds) and C(errors_5xx) (answers with a 5xx status).
  returned: success
  type: dict
errors_total:
  description: Failed requests of all levels, greedy and sampled, and the soak (the context probe's expected 400 is not one).
  returned: success
  type: int
retries_total:
  description:
    - Requests sent again after a transport failure before any byte of an answer (the levels, the soak, the context
      probe and the plain requests); each was retried at most twice, as the agents' SDKs retry. Not errors.
  returned: success
  type: int
msg:
  description: A one-line summary.
  returned: always
  type: str
"""

import os
import time
import uuid

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_power_sampler import LevelPower, power_draw_field
from ansible_collections.gpuhost.inference.plugins.module_utils.nvidia_smi import NvidiaSmi, NvidiaSmiError, power_source
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_http import AIOHTTP_IMPORT_ERROR, HAS_AIOHTTP, SERVER_ARGUMENT_SPEC, ClientError, Endpoint
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_load import context_probe, run_level, run_soak
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_stats import load_window


class ProbeTimeout(Exception):
    pass


def _no_power(level):
    for key in ("power", "power_w", "energy_j", "j_per_token", "tps_per_w", "power_window_s", "power_note"):
        level.setdefault(key, None)
    return level


def _resolve_smi(module, path):
    if os.path.sep in path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    return module.get_bin_path(path, opt_dirs=["/usr/bin", "/usr/local/bin"])


def _preflight(module, ep, params):
    """Reach the server, pick the model and its context length; fail with a clear message."""
    try:
        status, models = ep.get_json("/v1/models", timeout=min(30.0, params["request_timeout"]))
    except ClientError as exc:
        module.fail_json(msg=exc.msg, base_url=ep.base_url)
    if status == 401:
        module.fail_json(
            msg="%s refused the request with HTTP 401: the api_key is %s" % (
                ep.url("/v1/models"), "wrong" if params["api_key"] else "missing (the server has --api-key)"),
            base_url=ep.base_url,
        )
    if status != 200 or not isinstance(models, dict) or not isinstance(models.get("data"), list):
        module.fail_json(
            msg="%s answered HTTP %s, not a model list: %s" % (ep.url("/v1/models"), status, str(models)[:500]),
            base_url=ep.base_url,
        )
    served = {m.get("id"): m for m in models["data"] if isinstance(m, dict)}
    model = params["model"]
    if model is None:
        if not served:
            module.fail_json(msg="%s lists no model" % ep.url("/v1/models"), base_url=ep.base_url)
        model = models["data"][0].get("id")
    elif model not in served:
        module.fail_json(
            msg="model %r is not served by %s; it serves: %s" % (model, ep.base_url, ", ".join(sorted(map(str, served)))),
            base_url=ep.base_url,
        )
    max_model_len = params["max_model_len"]
    if max_model_len is None:
        reported = served.get(model, {}).get("max_model_len")
        if isinstance(reported, int):
            max_model_len = reported
    version = None
    try:
        vstatus, vbody = ep.get_json("/version", timeout=10.0)
        if vstatus == 200 and isinstance(vbody, dict):
            version = vbody.get("version")
    except ClientError:
        pass
    return model, max_model_len, version


def _validate(module, p):
    problems = []
    if not p["concurrency"]:
        problems.append("concurrency must list at least one level")
    elif any(c < 1 for c in p["concurrency"]):
        problems.append("concurrency levels must be >= 1, got %s" % p["concurrency"])
    for key in ("rounds", "max_tokens", "sample_interval_ms"):
        if p[key] < 1:
            problems.append("%s must be >= 1, got %s" % (key, p[key]))
    if p["prompt_words"] < 0:
        problems.append("prompt_words must be >= 0, got %s" % p["prompt_words"])
    for key in ("request_timeout", "timeout"):
        if p[key] <= 0:
            problems.append("%s must be > 0, got %s" % (key, p[key]))
    if p["soak_seconds"] < 0:
        problems.append("soak_seconds must be >= 0, got %s" % p["soak_seconds"])
    if any(c < 1 for c in p["sampled_concurrency"]):
        problems.append("sampled_concurrency levels must be >= 1, got %s" % p["sampled_concurrency"])
    if not 0 < p["temperature"] <= 2:
        problems.append("temperature must be > 0 and <= 2 (a sampled level samples), got %s" % p["temperature"])
    if not 0 < p["top_p"] <= 1:
        problems.append("top_p must be > 0 and <= 1, got %s" % p["top_p"])
    if p["seed"] < 0:
        problems.append("seed must be >= 0, got %s" % p["seed"])
    if any(i < 0 for i in p["gpu_indices"]):
        problems.append("gpu_indices must be GPU indices >= 0, got %s" % p["gpu_indices"])
    if p["max_model_len"] is not None and p["max_model_len"] < 2:
        problems.append("max_model_len must be >= 2, got %s" % p["max_model_len"])
    if not p["base_url"].startswith(("http://", "https://")):
        problems.append("base_url must start with http:// or https://, got %r" % p["base_url"])
    if problems:
        module.fail_json(msg="; ".join(problems))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            SERVER_ARGUMENT_SPEC,
            model=dict(type="str"),
            concurrency=dict(type="list", elements="int", default=[1, 2, 4, 8]),
            rounds=dict(type="int", default=1),
            max_tokens=dict(type="int", default=256, no_log=False),
            prompt_words=dict(type="int", default=64),
            context_probe=dict(type="bool", default=False),
            max_model_len=dict(type="int"),
            request_timeout=dict(type="float", default=300.0),
            timeout=dict(type="float", default=3600.0),
            nvidia_smi_path=dict(type="str", default="nvidia-smi"),
            sample_interval_ms=dict(type="int", default=200),
            soak_seconds=dict(type="float", default=0.0),
            sampled_concurrency=dict(type="list", elements="int", default=[]),
            temperature=dict(type="float", default=0.7),
            top_p=dict(type="float", default=0.95),
            seed=dict(type="int", default=1234),
            gpu_indices=dict(type="list", elements="int", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    _validate(module, p)
    base_url = p["base_url"].rstrip("/")
    if module.check_mode:
        module.exit_json(changed=False, skipped=True, base_url=base_url,
                         msg="check mode: no load sent to %s" % base_url)

    if not HAS_AIOHTTP:
        module.fail_json(msg=missing_required_lib("aiohttp", reason="the probe's HTTP client (in every vLLM venv: run "
                                                  "vllm_probe with the venv's python)"), exception=AIOHTTP_IMPORT_ERROR)
    started = time.perf_counter()
    deadline = started + p["timeout"]
    ep = Endpoint(base_url, api_key=p["api_key"], timeout=p["request_timeout"])
    model, max_model_len, version = _preflight(module, ep, p)
    if p["context_probe"]:
        if max_model_len is None:
            module.fail_json(msg="context_probe needs max_model_len: %s does not report it for %s" % (
                ep.url("/v1/models"), model), base_url=base_url)
        if p["max_tokens"] >= max_model_len:
            module.fail_json(msg="context_probe needs max_tokens (%d) < max_model_len (%d)" % (
                p["max_tokens"], max_model_len), base_url=base_url)

    smi_path = _resolve_smi(module, p["nvidia_smi_path"])
    smi = NvidiaSmi(smi_path) if smi_path else None
    gpus = sorted(set(p["gpu_indices"])) or None
    power_error = None
    power_field = power_field_note = None
    if smi is not None:
        try:
            power_field, power_field_note = power_draw_field(smi, gpus)
        except NvidiaSmiError as exc:
            power_error = exc.msg
    run_id = uuid.uuid4().hex[:12]
    sampling = {"temperature": p["temperature"], "top_p": p["top_p"], "seed": p["seed"]}
    result = dict(
        changed=False, base_url=base_url, model=model, max_model_len=max_model_len,
        server_version=version, power_available=smi is not None, power_error=None,
        power_source=power_source(smi_path), power_field=power_field,
        power_field_note=power_field_note, gpu_indices=gpus or [],
        levels=[], sampled=[], context=None, soak=None, errors_total=0, retries_total=0,
    )

    def new_power():
        if smi is None or power_error is not None:
            return None
        return LevelPower(smi, p["sample_interval_ms"], power_field, gpus)

    def power_for(fig, power, results):
        nonlocal power_error
        if power is None:
            return _no_power(fig)
        power.figures(fig, load_window(results))
        if power.error and power_error is None:
            power_error = power.error
        return _no_power(fig)

    def check_deadline(what):
        if time.perf_counter() >= deadline:
            raise ProbeTimeout(what)

    def tally():
        total = sum(sum(lv["errors"].values()) for lv in result["levels"] + result["sampled"])
        if result["soak"]:
            total += sum(result["soak"]["errors"].values())
        result["errors_total"] = total
        # Transport hiccups sent again (vllm_http): the levels', the soak's, the context probe's, the plain requests'.
        retries = sum(lv.get("retries", 0) for lv in result["levels"] + result["sampled"] + [result["soak"] or {}])
        if result["context"]:
            retries += result["context"]["fit"].get("retries", 0) + result["context"]["over"].get("retries", 0)
        result["retries_total"] = retries + ep.retries
        result["power_error"] = power_error

    try:
        # The greedy levels, then the sampled ones (as clients send them): one loop, two destinations.
        plan = [(level, None, "levels", "level %d" % level) for level in p["concurrency"]]
        plan += [(level, sampling, "sampled", "sampled level %d" % level) for level in p["sampled_concurrency"]]
        for level, level_sampling, key, what in plan:
            check_deadline("before " + what)
            power = new_power()
            fig, res = run_level(
                ep, model, level, rounds=p["rounds"], max_tokens=p["max_tokens"],
                prompt_words=p["prompt_words"], request_timeout=p["request_timeout"],
                deadline=deadline, sampler=power, run_id=run_id, sampling=level_sampling,
            )
            result[key].append(power_for(fig, power, res))
            if time.perf_counter() >= deadline:
                raise ProbeTimeout("during " + what)
        if p["context_probe"]:
            check_deadline("before the context probe")
            result["context"] = context_probe(
                ep, model, max_model_len, p["max_tokens"], request_timeout=p["request_timeout"], deadline=deadline,
            )
        if p["soak_seconds"] > 0:
            check_deadline("before the soak")
            top = max(p["concurrency"])
            seconds = min(p["soak_seconds"], max(0.0, deadline - time.perf_counter()))
            power = new_power()
            fig, res = run_soak(
                ep, model, top, seconds, max_tokens=p["max_tokens"], prompt_words=p["prompt_words"],
                request_timeout=p["request_timeout"], deadline=deadline, sampler=power, run_id=run_id,
            )
            fig["seconds_requested"] = p["soak_seconds"]
            result["soak"] = power_for(fig, power, res)
            if seconds < p["soak_seconds"]:
                raise ProbeTimeout("during the soak")
    except ProbeTimeout as exc:
        tally()
        result.pop("changed")
        module.fail_json(msg="the overall timeout of %ss ran out %s (figures so far are returned)" % (
            p["timeout"], exc), **result)

    tally()
    parts = ["%d streams %.1f tok/s" % (lv["concurrency"], lv["aggregate_tps"] or 0.0) for lv in result["levels"]]
    parts += ["%d sampled streams %.1f tok/s" % (lv["concurrency"], lv["aggregate_tps"] or 0.0) for lv in result["sampled"]]
    msg = "%s at %s: %s; %d errors, %d transport retries" % (model, base_url, ", ".join(parts), result["errors_total"],
                                                             result["retries_total"])
    if result["context"] is not None:
        msg += "; context %d: fit %s, over %s" % (
            max_model_len, result["context"]["fit"]["status"], result["context"]["over"]["status"])
    result["msg"] = msg
    module.exit_json(**result)


if __name__ == "__main__":
    main()
