#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
from __future__ import annotations

DOCUMENTATION = r"""
---
module: vllm_verify_wait
short_description: Wait until a vLLM unit serves, failing fast when it dies; or read its state
version_added: "1.3.0"
description:
  - Waits until the vLLM server of a systemd unit serves, which means all three, in this order - C(GET /health)
    answers 200; C(GET /v1/models) lists O(model); one short completion (C(POST /v1/completions), 4 tokens) is
    answered with a choice. The completion is sampled as clients sample it - O(temperature), O(top_p) and, unless
    O(seed) is set, no seed - because on vLLM's CPU build only an unseeded sampled request goes through the sampler
    that torch inductor compiles on first use (the path that needs a C++ compiler on the box).
  - Every O(interval) seconds it reads the unit (C(systemctl show) - ActiveState, SubState, NRestarts, InvocationID,
    Result) and fails at once when the unit is not installed, failed, inactive, waiting to restart, or has restarted
    (NRestarts above O(nrestarts)). A server that is up but answers the completion with an error O(completion_tries)
    times in a row is not serving; the failure carries the server's message. When C(/health) turns 503 after it
    answered 200, the engine died, and so it does when a journal line of this start matches O(death_pattern).
  - On failure RV(journal_tail) holds the last O(journal_lines) journal lines of the unit's current start
    (C(journalctl -u UNIT _SYSTEMD_INVOCATION_ID=...)).
  - With O(wait=false) it only reads - the state of O(unit) and of O(units), and with O(base_url) the HTTP status of
    C(/health) (plus the journal tail of the unit's start when that is not 200).
  - The API key never travels as a module argument, on a command line or in an environment - the module reads
    C(VLLM_API_KEY) from O(api_key_file) on the host itself, with systemd's rules for an C(EnvironmentFile=) (the
    collection's one reader, C(plugins/module_utils/systemd_env.py)), so it uses the key the server got.
  - HTTP goes through the collection's client (C(plugins/module_utils/vllm_http.py)), the engine-death pattern is the
    collection's one (C(plugins/module_utils/vllm_engine.py)).
author:
  - gpuhost.inference maintainers (@gpuhost)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
options:
  unit:
    description: The vLLM server's systemd unit.
    type: str
    required: true
  wait:
    description:
      - V(true) - wait until the server serves (or fail). V(false) - only read the state of the units and C(/health).
    type: bool
    default: true
  base_url:
    description:
      - The server, C(http://HOST:PORT) (or https). Required with O(wait=true); with O(wait=false) C(/health) is read
        only when it is set.
    type: str
  model:
    description: The served model name that C(/v1/models) must list and the completion asks for. Required with O(wait=true).
    type: str
  api_key_file:
    description:
      - The env file ON THE HOST that holds C(VLLM_API_KEY) (the root-only secrets file the server's unit reads), read
        as systemd reads it. A missing file or line means no key. Empty for none.
    type: path
  units:
    description: Further units whose state O(wait=false) reads (for example the power-cap unit).
    type: list
    elements: str
    default: []
  timeout:
    description: Seconds to wait for the server before failing.
    type: float
    default: 900
  interval:
    description: Seconds between two polls.
    type: float
    default: 2
  nrestarts:
    description: The unit's NRestarts before it was (re)started; a higher count fails the wait. V(-1) - as found now.
    type: int
    default: -1
  journal_lines:
    description: How many journal lines of the unit's start come back on failure.
    type: int
    default: 40
  temperature:
    description: The readiness completion's temperature.
    type: float
    default: 0.7
  top_p:
    description: The readiness completion's top_p.
    type: float
    default: 0.95
  seed:
    description: A seed for the readiness completion; by default none is sent, as clients send it.
    type: int
  completion_timeout:
    description: Seconds one readiness completion may take.
    type: float
    default: 120
  completion_tries:
    description: Failed completions in a row (with C(/health) 200 and the model listed) after which the server does not serve.
    type: int
    default: 3
  death_pattern:
    description:
      - A regular expression of the journal lines that mean the engine died. By default the collection's one pattern of
        vLLM 0.28.0's lines (C(EngineDeadError), C(EngineCore encountered a fatal error),
        C(Engine core initialization failed)); set it only to test another.
    type: str
attributes:
  check_mode:
    support: full
    details: It only reads (C(systemctl show), C(journalctl), HTTP requests to the server), in check mode as well.
  diff_mode:
    support: none
  platform:
    platforms: posix
notes:
  - Needs C(systemctl); C(journalctl) for the journal tail (without it RV(journal_tail) is empty).
  - Run it with C(become) where the journal and O(api_key_file) are root's.
seealso:
  - module: gpuhost.inference.vllm_probe
  - name: systemd.exec(5), EnvironmentFile=
    description: How the key file is read.
    link: https://www.freedesktop.org/software/systemd/man/latest/systemd.exec.html#EnvironmentFile=
"""

EXAMPLES = r"""
- name: Read the unit's restart count before starting it
  gpuhost.inference.vllm_verify_wait:
    unit: vllm.service
    wait: false
  register: __vllm_verify_unit_before

- name: Restart the unit
  ansible.builtin.systemd_service:
    name: vllm.service
    state: restarted
  become: true

- name: Wait until it serves, failing fast when the unit dies
  gpuhost.inference.vllm_verify_wait:
    unit: vllm.service
    base_url: http://127.0.0.1:8000
    model: Qwen/Qwen3-0.6B
    api_key_file: /etc/vllm/secrets.env
    nrestarts: "{{ __vllm_verify_unit_before.units['vllm.service'].NRestarts }}"
    timeout: 1800
  become: true
  register: __vllm_verify_start_raw

- name: Read the unit and the power-cap unit after the load, and /health
  gpuhost.inference.vllm_verify_wait:
    unit: vllm.service
    units: [nvidia-power-cap.service]
    base_url: http://127.0.0.1:8000
    wait: false
  become: true
  register: __vllm_verify_units_after
"""

RETURN = r"""
ok:
  description: Whether the server serves (O(wait=true)).
  returned: with O(wait=true)
  type: bool
  sample: true
reason:
  description: Why it does not serve (the failure's message too); what was seen before is added after C(before that:).
  returned: with O(wait=true), on failure
  type: str
  sample: "the unit failed (Result=exit-code, exit status 2)"
engine_dead:
  description: Whether the engine died (C(/health) 503 after 200, or a journal line matching O(death_pattern)).
  returned: with O(wait=true), on failure
  type: bool
  sample: false
elapsed_s:
  description: Seconds the wait took.
  returned: with O(wait=true)
  type: float
  sample: 41.8
since_start_s:
  description: Seconds from the unit's start (ActiveEnterTimestampMonotonic) to the answered completion.
  returned: with O(wait=true), when it serves
  type: float
  sample: 43.02
polls:
  description: How many times the unit was read.
  returned: with O(wait=true)
  type: int
  sample: 21
invocation_id:
  description: systemd's InvocationID of the start waited for (the journal of this start is C(_SYSTEMD_INVOCATION_ID=) it).
  returned: with O(wait=true)
  type: str
  sample: 6c1c1b0e2c8d4a58a0b7c1a1f2d3e4f5
nrestarts:
  description: The unit's NRestarts at the end.
  returned: with O(wait=true)
  type: int
  sample: 0
active_state:
  description: The unit's ActiveState at the end.
  returned: with O(wait=true)
  type: str
  sample: active
sub_state:
  description: The unit's SubState at the end.
  returned: with O(wait=true), on failure
  type: str
  sample: auto-restart
models:
  description: The model names C(/v1/models) listed.
  returned: with O(wait=true), when it serves
  type: list
  elements: str
  sample: [Qwen/Qwen3-0.6B]
first_completion:
  description: The readiness completion - C(status), C(seconds), C(temperature), C(top_p), C(seed), C(completion_tokens).
  returned: with O(wait=true), when it serves
  type: dict
  sample: {status: 200, seconds: 0.412, temperature: 0.7, top_p: 0.95, seed: null, completion_tokens: 4}
journal_tail:
  description:
    - The last O(journal_lines) journal lines of the unit's current start (of the unit when that start has none).
    - With O(wait=false) only when C(/health) did not answer 200.
  returned: on failure (O(wait=true)); with O(wait=false) when /health is not 200
  type: list
  elements: str
  sample: ["(EngineCore pid=12) ERROR EngineCore encountered a fatal error."]
units:
  description: The state of O(unit) and O(units) (C(systemctl show) - property -> value, NRestarts an int), by unit name.
  returned: with O(wait=false)
  type: dict
  sample: {vllm.service: {ActiveState: active, SubState: running, NRestarts: 0, InvocationID: 6c1c1b0e, Result: success,
           ExecMainStatus: "0", LoadState: loaded, ActiveEnterTimestampMonotonic: "1834527339"}}
health:
  description: The HTTP status of C(/health) (0 - no answer).
  returned: with O(wait=false) and O(base_url)
  type: int
  sample: 200
health_detail:
  description: The server's message (or why there was no answer) when C(/health) did not answer 200.
  returned: with O(wait=false) and O(base_url), when /health is not 200
  type: str
  sample: "no server at http://127.0.0.1:8000 (connection refused)"
"""

import json
import re
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.inference.plugins.module_utils.systemd_env import EnvFileError, read_env_file
from ansible_collections.gpuhost.inference.plugins.module_utils.systemd_unit import (
    journal_argv,
    parse_show,
    parse_version,
    show_argv,
    version_argv,
)
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_engine import engine_deaths
from ansible_collections.gpuhost.inference.plugins.module_utils.vllm_http import ClientError, Endpoint, error_message, plain_request

PROMPT = "vllm_verify readiness: say hello"


class Box:
    """The unit on this host, through the module's run_command."""

    def __init__(self, module):
        self.module = module
        self.systemctl = module.get_bin_path("systemctl", required=True)
        self.journalctl = module.get_bin_path("journalctl")

    def state(self, unit):
        _rc, out, _err = self.module.run_command(show_argv(self.systemctl, unit))
        return parse_show(out)

    def systemd_version(self):
        _rc, out, _err = self.module.run_command(version_argv(self.systemctl))
        return parse_version(out)

    def journal(self, unit, invocation, lines):
        if not self.journalctl:
            return []
        _rc, out, _err = self.module.run_command(journal_argv(self.journalctl, unit, invocation, lines))
        tail = out.splitlines()
        if not tail and invocation:
            return self.journal(unit, "", lines)
        return tail


def api_key(path, box):
    """VLLM_API_KEY as the server's unit gets it from ``path``; '' when the file or the line is absent, or when
    systemd would not read the file (the unit reads it with EnvironmentFile=-, which then skips it)."""
    if not path:
        return ""
    try:
        return read_env_file(path, box.systemd_version()).get("VLLM_API_KEY", "")
    except (OSError, EnvFileError):
        return ""


def http(endpoint, method, path, timeout, payload=None):
    """One request -> (status, body text); status 0 and the reason when there was no answer. The standard-library
    helper (plain_request): this module runs as root with the host's python, not the vLLM venv's (it waits for
    and reads the unit while the venv may be replaced or rolled back)."""
    try:
        status, body = plain_request(endpoint, method, path, payload, timeout=timeout)
    except ClientError as exc:
        return 0, exc.msg
    return status, body.decode("utf-8", "replace")


def error_text(body):
    """The server's error message of an OpenAI-style error body, else the body's first 300 characters."""
    return error_message(body)[:300]


def completion(endpoint, params):
    """One short sampled completion -> (answered, why not, figures)."""
    payload = {"model": params["model"], "prompt": PROMPT, "max_tokens": 4, "temperature": params["temperature"],
               "top_p": params["top_p"], "stream": False}
    if params["seed"] is not None:
        payload["seed"] = params["seed"]
    t0 = time.monotonic()
    status, body = http(endpoint, "POST", "/v1/completions", params["completion_timeout"], payload)
    figures = {"status": status, "seconds": round(time.monotonic() - t0, 3), "temperature": params["temperature"],
               "top_p": params["top_p"], "seed": params["seed"]}
    if status != 200:
        return False, "a %s/%s sampled completion answered %s: %s" % (
            params["temperature"], params["top_p"], status or "no connection", error_text(body)), figures
    try:
        data = json.loads(body)
        choices = data.get("choices") or []
        figures["completion_tokens"] = (data.get("usage") or {}).get("completion_tokens")
    except (ValueError, AttributeError):
        return False, "a completion answered 200 with a body that is not JSON: %s" % body[:200], figures
    if not choices:
        return False, "a completion answered 200 without a choice", figures
    return True, "", figures


def dead_reason(state, baseline):
    """Why the unit is not (or no longer) starting the server; None while it may still come up."""
    active, sub = state.get("ActiveState", ""), state.get("SubState", "")
    if state.get("LoadState") == "not-found":
        return "the unit is not installed"
    if active == "failed":
        return "the unit failed (Result=%s, exit status %s)" % (state.get("Result"), state.get("ExecMainStatus"))
    if sub == "auto-restart":
        return ("the server exited (Result=%s, exit status %s) and systemd is restarting it"
                % (state.get("Result"), state.get("ExecMainStatus")))
    if state["NRestarts"] > baseline:
        return "the unit restarted (NRestarts %d -> %d)" % (baseline, state["NRestarts"])
    if active in ("inactive", "deactivating"):
        return "the unit is %s (Result=%s)" % (active, state.get("Result"))
    return None


def models_of(endpoint):
    """(HTTP status, the names /v1/models lists)."""
    status, body = http(endpoint, "GET", "/v1/models", 5)
    try:
        names = [m.get("id") for m in json.loads(body).get("data", [])] if status == 200 else []
    except (ValueError, AttributeError):
        names = []
    return status, names


def read_only(module, box, params):
    """wait=false: the units' state, /health, and the unit's journal tail when /health is not 200."""
    result = {"changed": False, "units": {}}
    for unit in [params["unit"]] + [u for u in params["units"] if u != params["unit"]]:
        result["units"][unit] = box.state(unit)
    if params["base_url"]:
        endpoint = make_endpoint(module, params["base_url"], "")
        status, body = http(endpoint, "GET", "/health", 10)
        result["health"] = status
        if status != 200:
            first = result["units"][params["unit"]]
            result["health_detail"] = error_text(body) if status else body[:300]
            result["journal_tail"] = box.journal(params["unit"], first.get("InvocationID", ""), params["journal_lines"])
    module.exit_json(**result)


def make_endpoint(module, base_url, key):
    try:
        return Endpoint(base_url, api_key=key or None)
    except ValueError as exc:
        module.fail_json(msg="base_url: %s" % exc)
    return None   # not reached: fail_json exits


def wait(module, box, params):
    """Poll until the server serves (exit_json) or cannot (fail_json)."""
    model = params["model"]
    endpoint = make_endpoint(module, params["base_url"], api_key(params["api_key_file"], box))
    started = time.monotonic()
    state = box.state(params["unit"])
    baseline = state["NRestarts"] if params["nrestarts"] < 0 else params["nrestarts"]
    invocation = state.get("InvocationID", "")
    polls, last, was_healthy, failed_completions = 0, "", False, 0
    while True:
        polls += 1
        state = box.state(params["unit"])
        invocation = state.get("InvocationID") or invocation
        reason = dead_reason(state, baseline)
        if reason is not None and last:
            reason += "; before that: %s" % last
        engine_dead = False
        if reason is None:
            health, _body = http(endpoint, "GET", "/health", 5)
            if health == 200:
                was_healthy = True
                status, names = models_of(endpoint)
                if model in names:
                    answered, why, figures = completion(endpoint, params)
                    if answered:
                        try:  # systemd's monotonic clock is CLOCK_MONOTONIC, as time.monotonic()
                            since = time.monotonic() - int(state.get("ActiveEnterTimestampMonotonic") or 0) / 1e6
                        except ValueError:
                            since = None
                        module.exit_json(
                            changed=False, ok=True, since_start_s=round(since, 2) if since is not None else None,
                            elapsed_s=round(time.monotonic() - started, 2), polls=polls, invocation_id=invocation,
                            nrestarts=state["NRestarts"], active_state=state.get("ActiveState"), models=names,
                            first_completion=figures)
                    failed_completions += 1
                    last = why
                    if failed_completions >= params["completion_tries"]:
                        reason = "the server is up but does not serve: %s (%d tries)" % (why, failed_completions)
                else:
                    last = "/v1/models answered %s without '%s' (has %s)" % (status, model, names)
            elif health == 503 and was_healthy:
                engine_dead = True
                reason = "engine death: /health answered 503 after it had answered 200" + (
                    " (%s)" % last if last else "")
            else:
                last = "/health answered %s" % (health or "no connection")
        elapsed = time.monotonic() - started
        if reason is None and elapsed >= params["timeout"]:
            reason = "not serving after %.0f s (%s)" % (params["timeout"], last)
        if reason is not None:
            time.sleep(0.5)  # let the journal catch up with a dying process
            tail = box.journal(params["unit"], invocation, params["journal_lines"])
            deaths = engine_deaths(tail, params["death_pattern"])
            if deaths and not engine_dead:
                engine_dead = True
                reason = "engine death (%s): %s" % (deaths[0].strip()[:200], reason)
            module.fail_json(
                msg=reason, changed=False, ok=False, reason=reason, engine_dead=engine_dead,
                elapsed_s=round(elapsed, 2), polls=polls, invocation_id=invocation, nrestarts=state["NRestarts"],
                active_state=state.get("ActiveState"), sub_state=state.get("SubState"), journal_tail=tail)
        time.sleep(params["interval"])


def main():
    module = AnsibleModule(
        argument_spec={
            "unit": {"type": "str", "required": True},
            "wait": {"type": "bool", "default": True},
            "base_url": {"type": "str"},
            "model": {"type": "str"},
            "api_key_file": {"type": "path"},
            "units": {"type": "list", "elements": "str", "default": []},
            "timeout": {"type": "float", "default": 900},
            "interval": {"type": "float", "default": 2},
            "nrestarts": {"type": "int", "default": -1},
            "journal_lines": {"type": "int", "default": 40},
            "temperature": {"type": "float", "default": 0.7},
            "top_p": {"type": "float", "default": 0.95},
            "seed": {"type": "int"},
            "completion_timeout": {"type": "float", "default": 120},
            "completion_tries": {"type": "int", "default": 3},
            "death_pattern": {"type": "str"},
        },
        required_if=[("wait", True, ("base_url", "model"))],
        supports_check_mode=True,
    )
    params = module.params
    if params["death_pattern"] is not None:
        try:
            re.compile(params["death_pattern"])
        except re.error as exc:
            module.fail_json(msg="death_pattern is not a regular expression: %s" % exc)
    box = Box(module)
    if not params["wait"]:
        read_only(module, box, params)
    else:
        wait(module, box, params)


if __name__ == "__main__":
    main()
