# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The probe's load: prompts and payloads, a concurrency level, a soak, the context probe, and
vLLM's over-the-limit message.

Never imports AnsibleModule (see vllm_http, the client it sends with):

    ep = Endpoint("http://127.0.0.1:8000", api_key=None)
    level, results = run_level(ep, "my-model", concurrency=4, rounds=1, max_tokens=256, prompt_words=64)
    level["aggregate_tps"], level["ttft_s"]["p50"], level["decode_tps"]["p90"]
"""
from __future__ import annotations

import functools
import itertools
import re
import time
import uuid

from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_http import run_streams
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_stats import aggregate, round_or_none

__all__ = [
    "completion_payload",
    "context_probe",
    "context_prompt",
    "make_prompt",
    "parse_context_error",
    "run_level",
    "run_soak",
]

# The context probe's prompt: token ids 11..30 repeated (small ids exist in every vocabulary).
CONTEXT_TOKEN_IDS = tuple(range(11, 31))

# Words of the decode probe's prompts (after the unique prefix).
_WORDS = (
    "the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "while", "seven",
    "engineers", "measure", "tokens", "per", "second", "on", "every", "card", "in", "rack",
    "and", "write", "down", "what", "they", "saw", "before", "lunch", "time",
)

_NUM = r"(\d[\d,]*)"
_RE_LIMIT = re.compile(r"maximum context length is " + _NUM + r" tokens", re.I)
_RE_TOTAL = re.compile(r"for a total of (?:at least )?" + _NUM + r" tokens", re.I)
_RE_REQUESTED = re.compile(r"you requested (?:at least )?" + _NUM + r" tokens", re.I)
_RE_OUTPUT = re.compile(r"requested (?:at least )?" + _NUM + r" output tokens", re.I)
_RE_INPUT = re.compile(
    r"(?:prompt contains|request has|messages resulted in) (?:at least )?" + _NUM + r" (?:input )?tokens", re.I,
)


def _num(text):
    return int(text.replace(",", ""))


# -- prompts and payloads -----------------------------------------------------------------------
def make_prompt(words, prefix):
    """``prefix`` followed by ``words`` words (the prefix makes every prompt, and its cache key, unique)."""
    body = " ".join(_WORDS[i % len(_WORDS)] for i in range(max(0, int(words))))
    return "%s %s" % (prefix, body)


def completion_payload(model, prompt, max_tokens, temperature=0, top_p=None, seed=None):
    """A streamed completion of exactly ``max_tokens`` tokens (``ignore_eos``), usage in the stream.

    Greedy by default (temperature 0); ``top_p`` and ``seed`` are sent only when given.
    """
    payload = {
        "model": model,
        "prompt": prompt,
        "max_tokens": int(max_tokens),
        "temperature": temperature,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if top_p is not None:
        payload["top_p"] = top_p
    if seed is not None:
        payload["seed"] = int(seed)
    return payload


def context_prompt(length):
    """A list of ``length`` token ids: 11..30 repeated."""
    ids = CONTEXT_TOKEN_IDS
    return [ids[i % len(ids)] for i in range(int(length))]


# -- runs ---------------------------------------------------------------------------------------
def run_level(endpoint, model, concurrency, rounds=1, max_tokens=256, prompt_words=64,
              request_timeout=300.0, deadline=None, sampler=None, run_id=None, sampling=None):
    """One concurrency level: ``concurrency`` streams, each sending ``rounds`` requests back to back.

    All ``concurrency * rounds`` payloads are prepared first and the streams start together, so
    exactly ``concurrency`` requests are in flight until the first stream ends.
    ``sampler`` (optional): an object with start()/stop() run around the level (power).
    ``sampling`` (optional): {temperature, top_p, seed} for a sampled level; request number n
    (0-based, r * concurrency + stream) is sent with seed + n, so a run is repeatable. Without it
    the requests are greedy (temperature 0).
    Returns (figures dict, list of RequestResult); the figures of a sampled level carry
    ``temperature``, ``top_p`` and ``seed`` (the first request's).
    """
    concurrency = int(concurrency)
    rounds = int(rounds)
    run_id = run_id or uuid.uuid4().hex[:12]
    sources = []
    for w in range(concurrency):
        payloads = []
        for r in range(rounds):
            n = r * concurrency + w
            if sampling is None:
                prefix = "[probe %s c%d-%d]" % (run_id, concurrency, n)
                payload = completion_payload(model, make_prompt(prompt_words, prefix), max_tokens)
            else:
                prefix = "[probe %s s%d-%d]" % (run_id, concurrency, n)
                payload = completion_payload(
                    model, make_prompt(prompt_words, prefix), max_tokens, temperature=float(sampling["temperature"]),
                    top_p=float(sampling["top_p"]), seed=int(sampling["seed"]) + n,
                )
            payloads.append(payload)
        sources.append(functools.partial(next, iter(payloads), None))
    results, wall = run_streams(endpoint, sources, request_timeout, deadline, sampler)
    figures = {"concurrency": concurrency}
    if sampling is not None:
        figures.update({"temperature": float(sampling["temperature"]), "top_p": float(sampling["top_p"]),
                        "seed": int(sampling["seed"])})
    figures.update(aggregate(results, wall))
    return figures, results


def run_soak(endpoint, model, concurrency, seconds, max_tokens=256, prompt_words=64,
             request_timeout=300.0, deadline=None, sampler=None, run_id=None):
    """Keep ``concurrency`` streams busy for ``seconds``: requests, errors by status, 5xx count."""
    run_id = run_id or uuid.uuid4().hex[:12]
    stop_at = [None]
    counter = itertools.count()

    def source_for(index):
        def source():
            now = time.perf_counter()
            if stop_at[0] is None:
                stop_at[0] = now + float(seconds)
            if now >= stop_at[0] or (deadline is not None and now >= deadline):
                return None
            prefix = "[soak %s w%d-%d]" % (run_id, index, next(counter))
            return completion_payload(model, make_prompt(prompt_words, prefix), max_tokens)
        return source

    results, wall = run_streams(endpoint, [source_for(i) for i in range(int(concurrency))],
                                request_timeout, deadline, sampler)
    figures = {"seconds": float(seconds), "concurrency": int(concurrency)}
    figures.update(aggregate(results, wall))
    figures["errors_5xx"] = sum(c for k, c in figures["errors"].items() if k.isdigit() and 500 <= int(k) < 600)
    return figures, results


# -- context probe ------------------------------------------------------------------------------
def parse_context_error(message):
    """vLLM's over-the-limit message -> {limit, requested, prompt_tokens, output_tokens} (None if absent).

    Knows 0.28.0's "maximum context length is 2048 tokens. However, you requested 256 output
    tokens and your prompt contains [at least] 2049 input tokens, for a total of [at least] 2305
    tokens." and the older "However, you requested 2305 tokens (2049 in the messages, 256 in the
    completion)."
    """
    text = message or ""
    found = {"limit": None, "requested": None, "prompt_tokens": None, "output_tokens": None}
    m = _RE_LIMIT.search(text)
    if m:
        found["limit"] = _num(m.group(1))
    m = _RE_OUTPUT.search(text)
    if m:
        found["output_tokens"] = _num(m.group(1))
    m = _RE_INPUT.search(text) or re.search(r"\(" + _NUM + r" in the messages", text)
    if m:
        found["prompt_tokens"] = _num(m.group(1))
    m = _RE_TOTAL.search(text) or _RE_REQUESTED.search(text)
    if m:
        found["requested"] = _num(m.group(1))
    elif found["prompt_tokens"] is not None and found["output_tokens"] is not None:
        found["requested"] = found["prompt_tokens"] + found["output_tokens"]
    return found


def context_probe(endpoint, model, max_model_len, max_tokens=256, request_timeout=300.0, deadline=None):
    """A prompt of (limit - max_tokens) token ids must be answered in full; a prompt one token over the limit must
    be refused.

    ``fit.ok``: HTTP 200, the stream complete (``data: [DONE]``, no error event) with exactly
    ``max_tokens`` output tokens: the whole context is served. ``over``: a prompt of limit + 1 token ids (one token
    over the context even without output); ``over.ok``: HTTP 400 whose message names the limit probed (the parsed
    ``limit`` equals max_model_len). Not a prompt that fits but leaves less than max_tokens for the output: vLLM 0.28.0
    refuses that one, 0.32.0 answers it with the output cut to what the context leaves (get_max_tokens); both refuse
    a prompt over the limit. ``ok``: both; ``reason`` says what failed.
    Returns {limit, max_tokens, ok, reason, fit: {...}, over: {...}}.
    """
    limit = int(max_model_len)
    fit_len = limit - int(max_tokens)
    over_len = limit + 1
    fit = endpoint.stream_completion(
        completion_payload(model, context_prompt(fit_len), max_tokens), timeout=request_timeout, deadline=deadline,
    )
    over = endpoint.stream_completion(
        completion_payload(model, context_prompt(over_len), max_tokens), timeout=request_timeout, deadline=deadline,
    )
    parsed = parse_context_error(over.message) if over.status == 400 else parse_context_error("")
    fit_tokens = fit.output_tokens if fit.ok else None
    fit_part = {
        "status": fit.status,
        "ok": fit.ok and fit.status == 200 and fit_tokens == int(max_tokens),
        "complete": fit.ok and fit.status == 200,
        "error": fit.error,
        "message": fit.message,
        "prompt_tokens": fit.prompt_tokens if fit.prompt_tokens is not None else fit_len,
        "sent_tokens": fit_len,
        "output_tokens": fit_tokens,
        "expected_tokens": int(max_tokens),
        "ttft_s": round_or_none(fit.ttft_s),
        "e2e_s": round_or_none(fit.e2e_s),
        "retries": fit.retries,
    }
    over_part = {
        "status": over.status,
        "ok": over.status == 400 and parsed["limit"] == limit,
        "error": over.error,
        "message": over.message,
        "sent_tokens": over_len,
        "limit": parsed["limit"],
        "requested": parsed["requested"],
        "prompt_tokens": parsed["prompt_tokens"],
        "output_tokens": parsed["output_tokens"],
        "retries": over.retries,
    }
    reasons = []
    if fit.status != 200:
        reasons.append("the fitting prompt got %s, not 200%s" % (
            fit.status if fit.status is not None else fit.error, (": " + fit.message) if fit.message else ""))
    elif not fit_part["complete"]:
        reasons.append("the fitting prompt's stream broke (%s: %s)" % (fit.error, fit.message))
    elif fit_tokens != int(max_tokens):
        reasons.append("the fitting prompt got %s output tokens, not %d" % (fit_tokens, int(max_tokens)))
    if over.status != 400:
        reasons.append("one token over got %s, not 400" % (over.status if over.status is not None else over.error))
    elif parsed["limit"] != limit:
        reasons.append("one token over got a 400 naming the limit %s, not %d: %s" % (
            parsed["limit"], limit, (over.message or "")[:300]))
    return {
        "limit": limit,
        "max_tokens": int(max_tokens),
        "ok": fit_part["ok"] and over_part["ok"],
        "reason": "; ".join(reasons) if reasons else None,
        "fit": fit_part,
        "over": over_part,
    }
