"""benchmarks/router_client.py's `bench` (the router's added latency) against two vLLM server TEST DOUBLES
(tests/doubles/sse_server.py): one as the box, one as the router in front of it.

The figures it prints are the benchmark's business (run on the lab's router box, docs/router.md); here: that it sends
what it says (streamed completions, the key, every request counted once), reads the doubles' streams into TTFT and
tokens/s, compares the two sides level by level, and says so by its exit status when requests fail.
"""
from __future__ import annotations

import json
import os

from ansible_collections.gpuhost.inference.tests.doubles.sse_server import SseServerDouble
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, load_script

RC = load_script("router_client", os.path.join(ROOT, "benchmarks", "router_client.py"))
KEY = "lab-router-key"


def _bench(direct, router, tmp_path):
    out = tmp_path / "bench.json"
    rc = RC.main(["bench", "--direct", direct.url, "--router", router.url, "--key", KEY, "--model", "tiny-double",
                  "--concurrency", "1", "3", "--requests", "6", "--max-tokens", "8", "--out", str(out)])
    return rc, json.loads(out.read_text(encoding="utf-8"))


def test_bench_compares_the_router_with_the_box_at_each_concurrency(tmp_path, capsys):
    with SseServerDouble(api_key=KEY, chunk_delay_s=0.002) as direct, \
            SseServerDouble(api_key=KEY, chunk_delay_s=0.002, first_delay_s=0.03) as router:
        rc, rows = _bench(direct, router, tmp_path)
        # a warm-up of max(c, 4) on the box, then the level on each side
        assert len(direct.completions()) == (4 + 6) + (4 + 6)
        assert len(router.completions()) == 6 + 6
        bodies = [r["body"] for r in router.completions()]
    assert rc == 0
    assert [r["concurrency"] for r in rows] == [1, 3]
    for row in rows:
        for side in ("direct", "router"):
            assert row[side]["requests"] == 6 and row[side]["failed"] == 0, row
            assert row[side]["tokens_per_s"] > 0, row
        # the router double holds every first token 30 ms: a floor of the router side's TTFT (no upper bound on either
        # side is asserted: the machine's load sets those)
        assert row["router"]["ttft_p50_ms"] >= 30 and row["router"]["ttft_p95_ms"] >= 30, row
        assert row["added_ttft_p50_ms"] == round(row["router"]["ttft_p50_ms"] - row["direct"]["ttft_p50_ms"], 2)
        assert row["added_ttft_p95_ms"] == round(row["router"]["ttft_p95_ms"] - row["direct"]["ttft_p95_ms"], 2)
        assert row["throughput_ratio"] == round(row["router"]["tokens_per_s"] / row["direct"]["tokens_per_s"], 3)
    assert all(b["stream"] and b["max_tokens"] == 8 and b["model"] == "tiny-double" for b in bodies)
    table = capsys.readouterr().out
    assert "| 1 |" in table and "| 3 |" in table and "| 0 / 0 |" in table


def test_bench_fails_when_requests_fail_and_counts_them(tmp_path):
    # the router side refuses two requests (HTTP 503), the box answers all
    with SseServerDouble(api_key=KEY) as direct, SseServerDouble(api_key=KEY, statuses=[503, 503]) as router:
        rc, rows = _bench(direct, router, tmp_path)
    assert rc == 1
    assert rows[0]["router"]["failed"] == 2 and rows[0]["direct"]["failed"] == 0, rows
    assert rows[1]["router"]["failed"] == 0


def test_a_wrong_key_is_a_failed_request_not_a_crash(tmp_path):
    with SseServerDouble(api_key=KEY) as direct, SseServerDouble(api_key="another-key") as router:
        rc, rows = _bench(direct, router, tmp_path)
    assert rc == 1
    assert all(row["router"]["failed"] == 6 and row["router"]["ttft_p50_ms"] is None for row in rows), rows
    assert all(row["added_ttft_p50_ms"] is None for row in rows)
