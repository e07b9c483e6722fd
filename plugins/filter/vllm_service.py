# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks of vllm_service's own variables (the values written into unit files are checked by
unit_value_errors, the profiles by vllm_profile_errors).

The docs of the filter are in the YAML file of the same name beside this one; its unit tests are
tests/unit/plugins/filter/test_vllm_service.py with the cases of tests/unit/data/vllm_service_var_errors.yaml.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as _inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import show as _show
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import (
    as_int as _int,
    check as _typed,
    is_loopback as _is_loopback,
    variables as _variables,
)

_SPACE = re.compile(r"\s")
# Below it a port needs CAP_NET_BIND_SERVICE, which the unit never grants (empty AmbientCapabilities=).
_PRIVILEGED_PORTS = 1024


def _binds(v):
    """[(where, host, port)]: the unit's one bind, from the variables (a setting that sets one is refused)."""
    return [("vllm_service_host/vllm_service_port", v["vllm_service_host"], v["vllm_service_port"])]


# vLLM's flags that set where it listens: only vllm_service_host and vllm_service_port do (the listener table of
# site.yml's play 1, the front door's and the router's checks read those alone).
_LISTEN_SETTINGS = {"host": "vllm_service_host", "port": "vllm_service_port", "uds": "vllm_service_host"}


def _listen_setting_errors(v):
    """A listen address or port set through vllm_service_settings or a profile's settings: refused (a bypass)."""
    sources = [("vllm_service_settings", v.get("vllm_service_settings"))]
    profiles = v.get("profiles")
    if isinstance(profiles, Mapping):
        for name in sorted(profiles, key=str):
            profile = profiles[name]
            if isinstance(profile, Mapping):
                sources.append(("profile '%s' settings" % name, profile.get("settings")))
    errors = []
    for where, part in sources:
        if not isinstance(part, Mapping):
            continue
        for key in sorted(part, key=str):
            name = str(key).replace("-", "_")
            if name in _LISTEN_SETTINGS:
                errors.append("%s: '%s' sets where vLLM listens, which only %s does (the listener table and the "
                              "front door's check read it): set that variable instead" % (where, key, _LISTEN_SETTINGS[name]))
    return errors


def _length(value):
    return len(value) if value is not None else 0


def vllm_service_var_errors(values):
    """Error strings for vllm_service's variables (empty when all is well).

    values: {variable name: value} with the keys vllm_service_model, _host, _port, _tensor_parallel_size,
    _hf_offline, _restart_sec, _start_limit_interval_sec, _start_limit_burst, _timeout_start_sec,
    _timeout_stop_sec, _api_key, _api_key_file, and api_key_file_exists (whether the file is on the controller);
    optional: _served_model_name, _user, _allow_open_api, _settings, _drain_timeout, _router_group and profiles
    (every profile: a host or port in their settings is a bind too).
    """
    values = _variables(values, "vllm_service_var_errors")
    v = values
    errors = []
    model = v["vllm_service_model"]
    if not isinstance(model, str) or not model.strip():
        errors.append("vllm_service_model must be set: a Hugging Face repo id or an absolute path on the host")
    for name in ("vllm_service_model", "vllm_service_served_model_name"):
        text = v.get(name)
        if isinstance(text, str) and _inv.line_end(text):
            errors.append("%s must be a single line (no line break or NUL: it is written into the profile file), got %s"
                          % (name, _show(text)))
    host = v["vllm_service_host"]
    if not str(host).strip() or _SPACE.search(str(host)):
        errors.append("vllm_service_host must be an address or host name, got " + _show(host))
    port = v["vllm_service_port"]
    error = _inv.port_error("vllm_service_port", port)
    if error:
        errors.append(error)
    user = v.get("vllm_service_user")
    if user == "root":
        errors.append("vllm_service_user must not be root (vLLM runs a web server and loads model code: it runs as the "
                      "unprivileged account vllm_install creates), got \"root\"")
    errors.extend(_bind_errors(v))
    errors.extend(_listen_setting_errors(v))
    tp_size = v["vllm_service_tensor_parallel_size"]
    if _int(tp_size) < 1:
        errors.append("vllm_service_tensor_parallel_size must be an integer >= 1, got %s" % (tp_size,))
    offline = v["vllm_service_hf_offline"]
    if not isinstance(offline, bool) and str(offline).lower() not in ("auto", "true", "false"):
        errors.append("vllm_service_hf_offline must be auto, true or false, got " + _show(offline))
    if _int(v["vllm_service_restart_sec"]) < 0 or _int(v["vllm_service_start_limit_interval_sec"]) < 0:
        errors.append("vllm_service_restart_sec and vllm_service_start_limit_interval_sec must be >= 0")
    if min(_int(v["vllm_service_start_limit_burst"]), _int(v["vllm_service_timeout_start_sec"]),
           _int(v["vllm_service_timeout_stop_sec"])) < 1:
        errors.append("vllm_service_start_limit_burst, vllm_service_timeout_start_sec and vllm_service_timeout_stop_sec must be >= 1")
    if "vllm_service_drain_timeout" in v and _int(v["vllm_service_drain_timeout"]) < 0:
        errors.append("vllm_service_drain_timeout must be an integer >= 0 (seconds), got %s" % (v["vllm_service_drain_timeout"],))
    group = v.get("vllm_service_router_group", "vllm_routers")
    if not isinstance(group, str) or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", group):
        errors.append("vllm_service_router_group must be an inventory group name (letters, digits, _), got %s" % (_show(group),))
    errors.extend(_watchdog_range_errors(v))
    key, key_file = v["vllm_service_api_key"], v["vllm_service_api_key_file"]
    if _length(key) > 0 and _length(key_file) > 0:
        errors.append("set only one of vllm_service_api_key and vllm_service_api_key_file")
    elif _length(key_file) > 0 and not v.get("api_key_file_exists"):
        errors.append("vllm_service_api_key_file: no such file on the controller: %s" % (key_file,))
    return errors


# The watchdog's whole numbers and their least value (docs/watchdog.md): a check period of at least 5 s (the timer),
# thresholds and counts of at least 1, the two canary intervals 0 for off. Checked only when given (a role's defaults
# always are).
_WATCHDOG_MINIMUM = (
    ("vllm_service_watchdog_period", 5, "seconds between two checks"),
    ("vllm_service_watchdog_stall_seconds", 1, "seconds"),
    ("vllm_service_watchdog_timeout", 1, "seconds"),
    ("vllm_service_watchdog_unresponsive_checks", 1, "checks in a row"),
    ("vllm_service_watchdog_canary_interval", 0, "seconds, 0 turns the canary off"),
    ("vllm_service_watchdog_canary_timeout", 1, "seconds"),
    ("vllm_service_watchdog_canary_failures", 1, "failed canaries in a row"),
    ("vllm_service_watchdog_unserved_seconds", 1, "seconds"),
    ("vllm_service_watchdog_tool_canary_interval", 0, "seconds, 0 turns the forced tool call canary off"),
    ("vllm_service_watchdog_tool_canary_retry", 1, "seconds"),
    ("vllm_service_watchdog_tool_canary_failures", 1, "engine errors in a row"),
    ("vllm_service_watchdog_max_restarts", 0, "restarts an hour, 0 only logs the verdicts"),
)


def _watchdog_range_errors(v):
    """A watchdog number below its least value (a 0 that would restart on the first failed canary, a negative
    interval that reads as off)."""
    errors = []
    for name, least, unit in _WATCHDOG_MINIMUM:
        if name in v and _int(v[name]) < least:
            errors.append("%s must be a whole number >= %d (%s), got %s" % (name, least, unit, _show(v[name])))
    return errors


def _bind_errors(v):
    """A port systemd's unprivileged service cannot bind, an API open to the network without a key."""
    errors = []
    has_key = _length(v.get("vllm_service_api_key")) > 0 or _length(v.get("vllm_service_api_key_file")) > 0
    allow_open, error = _typed("vllm_service_allow_open_api", v.get("vllm_service_allow_open_api", False))
    if error:
        return [error]
    for where, host, port in _binds(v):
        if 1 <= _int(port) < _PRIVILEGED_PORTS:
            errors.append("%s: port %s is below %d: the unit runs vLLM as an unprivileged user without "
                          "CAP_NET_BIND_SERVICE, so it cannot bind it; use a port 1024-65535 (and a reverse proxy for 80/443)"
                          % (where, port, _PRIVILEGED_PORTS))
        if host is None or not str(host).strip() or _SPACE.search(str(host)):
            continue  # not an address: refused as such
        if not _is_loopback(host) and not has_key and not allow_open:
            errors.append("%s: host %s listens beyond this box with no API key: anyone who reaches it gets an open /v1. "
                          "Set vllm_service_api_key or vllm_service_api_key_file (the root-only secrets file), bind a "
                          "loopback address (127.0.0.1, ::1), or set vllm_service_allow_open_api: true to mean it"
                          % (where, _show(host)))
    return errors


class FilterModule:
    """vllm_service filters."""

    def filters(self):
        return {"vllm_service_var_errors": vllm_service_var_errors}
