"""The simulated engine of the vLLM test double: a continuous-batching decode model.

At most `max_num_seqs` sequences run at once (the others wait, as in vLLM's scheduler), and a
sequence is only admitted while the KV pool has room for its prompt plus its output. One
engine step emits one token to every running sequence (with a speculative config, 1 + the
accepted draft tokens); a step takes STEP_MS * (1 + BATCH_GROWTH * (running - 1)) plus the
prefill of the sequences admitted in it, so aggregate throughput rises with concurrency while
each stream slows a little (the write-up: max-num-seqs 2 -> 8 gives +55% at 4 requests).
Speeds are set by environment variables (see Speeds.from_env).
"""
from __future__ import annotations

import hashlib
import os
import queue
import random
import threading
import time
from dataclasses import dataclass, field

VOCAB = ("the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with",
         "be", "by", "on", "not", "he", "this", "are", "or", "his", "from", "at", "which",
         "but", "have", "an", "had", "they", "you", "were", "their", "one", "all", "we")


def _env_float(environ, name: str, default: float) -> float:
    try:
        return float(environ.get(name, default))
    except ValueError:
        return default


@dataclass
class Speeds:
    step_ms: float = 4.0            # one decode step of a single sequence
    batch_growth: float = 0.17      # extra step time per extra running sequence (fraction)
    prefill_ms_per_1k: float = 2.0  # prefill cost per 1,000 prompt tokens
    spec_accept: float = 0.7        # acceptance rate of each draft token (speculative)
    spec_step_factor: float = 1.15  # a speculative step is this much slower

    @classmethod
    def from_env(cls, environ=None) -> "Speeds":
        environ = os.environ if environ is None else environ
        return cls(
            step_ms=_env_float(environ, "GPUHOST_DOUBLE_STEP_MS", cls.step_ms),
            batch_growth=_env_float(environ, "GPUHOST_DOUBLE_BATCH_GROWTH", cls.batch_growth),
            prefill_ms_per_1k=_env_float(environ, "GPUHOST_DOUBLE_PREFILL_MS_PER_1K", cls.prefill_ms_per_1k),
            spec_accept=_env_float(environ, "GPUHOST_DOUBLE_SPEC_ACCEPT", cls.spec_accept),
            spec_step_factor=_env_float(environ, "GPUHOST_DOUBLE_SPEC_STEP_FACTOR", cls.spec_step_factor),
        )


@dataclass
class Sequence:
    request_id: str
    prompt_tokens: int
    max_tokens: int
    seed: str
    arrival: float = field(default_factory=time.monotonic)
    out: "queue.Queue" = field(default_factory=queue.Queue)
    generated: int = 0
    cancelled: bool = False
    first_token_at: float | None = None
    scheduled_at: float | None = None
    prefilled: bool = False

    def token_text(self, index: int) -> tuple[int, str]:
        digest = hashlib.blake2b(f"{self.seed}:{index}".encode(), digest_size=4).digest()
        number = int.from_bytes(digest, "big")
        return number % 4096, " " + VOCAB[number % len(VOCAB)]


class Engine:
    def __init__(self, max_num_seqs: int, kv_pool_tokens: int, block_size: int,
                 speculative_tokens: int = 0, speeds: Speeds | None = None):
        self.max_num_seqs = max(1, max_num_seqs)
        self.kv_pool_blocks = max(1, kv_pool_tokens // block_size)
        self.block_size = block_size
        self.speculative_tokens = speculative_tokens
        self.speeds = speeds or Speeds()
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []
        self.used_blocks = 0
        self.cond = threading.Condition()
        self.stats = {"prompt_tokens": 0, "generation_tokens": 0, "steps": 0, "busy_s": 0.0}
        self._rng = random.Random(0)
        self._thread = threading.Thread(target=self._loop, name="EngineCore", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _blocks(self, seq: Sequence) -> int:
        return -(-(seq.prompt_tokens + seq.max_tokens) // self.block_size)

    def submit(self, seq: Sequence) -> Sequence:
        with self.cond:
            self.waiting.append(seq)
            self.cond.notify()
        return seq

    def cancel(self, seq: Sequence) -> None:
        with self.cond:
            seq.cancelled = True

    def usage(self) -> float:
        with self.cond:
            return self.used_blocks / self.kv_pool_blocks

    def counts(self) -> tuple[int, int]:
        with self.cond:
            return len(self.running), len(self.waiting)

    def _admit(self) -> list[Sequence]:
        admitted = []
        self.waiting = [s for s in self.waiting if not s.cancelled]
        while self.waiting and len(self.running) < self.max_num_seqs:
            seq = self.waiting[0]
            need = self._blocks(seq)
            if self.used_blocks + need > self.kv_pool_blocks:
                break  # FCFS: the head waits for room in the KV pool
            self.waiting.pop(0)
            self.used_blocks += need
            seq.scheduled_at = time.monotonic()
            self.running.append(seq)
            admitted.append(seq)
        return admitted

    def _loop(self) -> None:
        speeds = self.speeds
        while True:
            with self.cond:
                for seq in [s for s in self.running if s.cancelled]:
                    self._finish(seq, None)
                admitted = self._admit()
                while not self.running:
                    self.cond.wait()
                    admitted = self._admit()
                batch = list(self.running)
            step_s = speeds.step_ms / 1000.0 * (1.0 + speeds.batch_growth * (len(batch) - 1))
            if self.speculative_tokens:
                step_s *= speeds.spec_step_factor
            prefill = sum(s.prompt_tokens for s in admitted)
            step_s += speeds.prefill_ms_per_1k * prefill / 1_000_000.0
            time.sleep(step_s)
            now = time.monotonic()
            with self.cond:
                self.stats["steps"] += 1
                self.stats["busy_s"] += step_s  # the simulated time, free of the host's scheduling noise
                self.stats["prompt_tokens"] += prefill
                for seq in batch:
                    if seq.cancelled:
                        continue
                    n = 1
                    if seq.prefilled and self.speculative_tokens:
                        for _i in range(self.speculative_tokens):
                            if self._rng.random() < speeds.spec_accept:
                                n += 1
                            else:
                                break
                    seq.prefilled = True
                    n = min(n, seq.max_tokens - seq.generated)
                    tokens = [seq.token_text(seq.generated + k) for k in range(n)]
                    seq.generated += n
                    self.stats["generation_tokens"] += n
                    if seq.first_token_at is None:
                        seq.first_token_at = now
                    done = seq.generated >= seq.max_tokens
                    seq.out.put(("tokens", tokens, "length" if done else None))
                    if done:
                        self._finish(seq, "length")

    def _finish(self, seq: Sequence, reason: str | None) -> None:
        if seq in self.running:
            self.running.remove(seq)
            self.used_blocks -= self._blocks(seq)
        seq.out.put(("end", reason, None))
        self.cond.notify_all()
