# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The judgements of the nvidia_power role, in Python: the limit of each managed GPU checked
against its range, the unit's commands, the drift from the request, the read back after the
unit ran, and the restore of the default limits.

Each filter takes what the role read (nvidia_gpu_info's ``gpus``) and its variables, and returns
plain data, so the role's tasks only assert and report; the unit tests
(tests/unit/plugins/filter/test_nvidia_power.py with the cases of tests/unit/data/nvidia_power_cases.yaml)
cover every branch. The docs of each filter are in the YAML file of the same name beside this one.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import check as _typed
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import type_name

_WHOLE = re.compile(r"^[0-9]+$")
# nvidia_power_persistence_mode -> what nvidia-smi reports for it (leave: not compared).
PERSISTENCE = {"on": "Enabled", "off": "Disabled"}


def _text(value):
    """The value as Jinja's ``~`` writes it (None -> 'None', True -> 'True')."""
    return str(value)


def _whole(value):
    """Whether the value, written as text, is a whole number (as ``(v | string) is match('^[0-9]+$')``)."""
    return _WHOLE.match(_text(value)) is not None


def _g(value):
    return "%g" % value


def _by_index(gpus):
    """{index: gpu}, the first GPU of an index (as ``selectattr('index', 'equalto', i) | first``)."""
    found = {}
    for gpu in gpus:
        found.setdefault(gpu.get("index"), gpu)
    return found


def _gpus(gpus):
    if gpus is None:
        return []
    if isinstance(gpus, Mapping) or isinstance(gpus, str):
        raise TypeError("the GPUs must be a list of nvidia_gpu_info's gpus, got %s" % type_name(gpus))
    return list(gpus)


def nvidia_power_plan(gpus, managed_gpus, limit_w, gpu_limits_w):
    """Check the requested limits against the GPUs present and their ranges.

    gpus: nvidia_gpu_info's gpus (the order of the plan). managed_gpus: nvidia_power_gpus.
    limit_w: nvidia_power_limit_w. gpu_limits_w: nvidia_power_gpu_limits_w.
    Returns {errors, plan, managed, present}; plan has one row per managed GPU:
    {index, uuid, name, limit_w (None: left alone), variable (the one that set limit_w)}.
    """
    gpus = _gpus(gpus)
    errors = []
    plan = []
    managed = []
    overrides = {}
    present = [gpu["index"] for gpu in gpus]
    present_txt = ", ".join(_text(i) for i in present)
    # The role variable's typing (argument spec): '1' or 1 -> [1], '0,1' -> [0, 1]; never one character at a time.
    # A list's items are judged one by one below.
    if managed_gpus is None:
        managed_gpus = []
    elif not isinstance(managed_gpus, list):
        managed_gpus, error = _typed("nvidia_power_gpus", managed_gpus)
        if error:
            errors.append(error)
            managed_gpus = []
    for i in managed_gpus:
        if not _whole(i) or int(_text(i)) not in present:
            errors.append("nvidia_power_gpus: GPU %s is not present on this host (present GPUs: %s)" % (_text(i), present_txt))
        elif int(_text(i)) not in managed:
            managed.append(int(_text(i)))
    if not managed_gpus:
        managed.extend(present)
    fleet = None
    if limit_w is not None:
        if _whole(limit_w):
            fleet = int(_text(limit_w))
        else:
            errors.append("nvidia_power_limit_w=%s is not a whole number of watts" % _text(limit_w))
    for key, value in (gpu_limits_w or {}).items():
        var = "nvidia_power_gpu_limits_w[%s]" % _text(key)
        if not _whole(key) or int(_text(key)) not in present:
            errors.append("%s: GPU %s is not present on this host (present GPUs: %s)" % (var, _text(key), present_txt))
        elif int(_text(key)) not in managed:
            errors.append("%s: GPU %s is not among nvidia_power_gpus (%s)" % (var, _text(key), ", ".join(_text(m) for m in managed)))
        elif value is None or not _whole(value):
            errors.append("%s=%s is not a whole number of watts" % (var, _text(value)))
        else:
            overrides[int(_text(key))] = int(_text(value))
    for gpu in gpus:
        if gpu["index"] not in managed:
            continue
        if gpu["index"] in overrides:
            limit = overrides[gpu["index"]]
            var = "nvidia_power_gpu_limits_w[%s]" % _text(gpu["index"])
        else:
            limit = fleet
            var = "nvidia_power_limit_w"
        label = "GPU %s (%s)" % (_text(gpu["index"]), _text(gpu.get("name")))
        if limit is not None:
            low, high = gpu.get("min_power_limit_w"), gpu.get("max_power_limit_w")
            if low is None or high is None:
                errors.append("%s=%s: %s reports no power limit range (power management: %s), so it cannot be capped; "
                              "leave it out with nvidia_power_gpus" % (var, limit, label, _text(gpu.get("power_management", "unknown"))))
            elif limit < low or limit > high:
                errors.append("%s=%s is outside %s's range %s-%s W" % (var, limit, label, _g(low), _g(high)))
        plan.append({"index": gpu["index"], "uuid": gpu.get("uuid"), "name": gpu.get("name"), "limit_w": limit, "variable": var})
    return {"errors": errors, "plan": plan, "managed": managed, "present": present}


def nvidia_power_groups(plan):
    """The unit's commands: one {limit_w, gpus} per distinct limit, in the plan's order (GPUs left alone are not in any)."""
    capped = [p for p in plan if p.get("limit_w") is not None]
    groups = []
    for p in capped:
        if any(g["limit_w"] == p["limit_w"] for g in groups):
            continue
        groups.append({"limit_w": p["limit_w"], "gpus": [q["index"] for q in capped if q["limit_w"] == p["limit_w"]]})
    return groups


def nvidia_power_drift(plan, gpus, persistence_mode):
    """What differs now from the plan: 'GPU i: power.limit X W, wanted Y W' and the persistence mode.

    power.limit is what -pl sets; the enforced limit may stay lower (another limiter) and is judged
    by the read back, as re-running the unit cannot change it.
    """
    wanted_pm = PERSISTENCE.get(persistence_mode)
    by_index = _by_index(_gpus(gpus))
    drift = []
    for p in plan:
        gpu = by_index[p["index"]]
        if p.get("limit_w") is not None and gpu.get("power_limit_w") != p["limit_w"]:
            drift.append("GPU %s: power.limit %s W, wanted %s W" % (p["index"], _text(gpu.get("power_limit_w")), p["limit_w"]))
        if wanted_pm is not None and gpu.get("persistence_mode") != wanted_pm:
            drift.append("GPU %s: persistence mode %s, wanted %s" % (p["index"], _text(gpu.get("persistence_mode")), wanted_pm))
    return drift


def nvidia_power_result(plan, gpus_after, persistence_mode, unit_name, unit_state=None, start_error=None, read_error=None):
    """Compare the limits read back after the unit ran with the plan.

    gpus_after: nvidia_gpu_info's gpus after the unit ran. unit_state: the lines of
    ``systemctl show --property=ActiveState,SubState,Result,...`` (KEY=value). start_error: why
    starting the unit failed (None: it did not). read_error: why the read back failed (its msg).
    Returns {unit, active_state, sub_state, result, applied, mismatches, gpus}.
    """
    state = {}
    for line in unit_state or []:
        parts = _text(line).split("=", 1)
        if len(parts) == 2:
            state[parts[0]] = parts[1]
    wanted_pm = PERSISTENCE.get(persistence_mode)
    after = _gpus(gpus_after)
    by_index = _by_index(after)
    mismatches = []
    rows = []
    if start_error is not None:
        mismatches.append("%s failed: %s" % (unit_name, _text(start_error)))
    if not after:
        mismatches.append("cannot read the limits back: %s" % _text("no GPU reported" if read_error is None else read_error))
    for p in plan:
        if p["index"] not in by_index:
            continue
        gpu = by_index[p["index"]]
        label = "GPU %s (%s)" % (p["index"], _text(p.get("name")))
        limit = p.get("limit_w")
        if limit is not None and (gpu.get("power_limit_w") != limit or gpu.get("enforced_power_limit_w") != limit):
            mismatches.append("%s: asked %s W, power.limit %s W, enforced.power.limit %s W"
                              % (label, limit, _text(gpu.get("power_limit_w")), _text(gpu.get("enforced_power_limit_w"))))
        if wanted_pm is not None and gpu.get("persistence_mode") != wanted_pm:
            mismatches.append("%s: asked persistence mode %s, got %s" % (label, wanted_pm, _text(gpu.get("persistence_mode"))))
        rows.append({"index": p["index"], "name": p.get("name"), "uuid": p.get("uuid"), "requested_w": limit,
                     "power_limit_w": gpu.get("power_limit_w"), "enforced_power_limit_w": gpu.get("enforced_power_limit_w"),
                     "persistence_mode": gpu.get("persistence_mode")})
    return {"unit": unit_name, "active_state": state.get("ActiveState"), "sub_state": state.get("SubState"),
            "result": state.get("Result"), "applied": not mismatches, "mismatches": mismatches, "gpus": rows}


def nvidia_power_defaults_record(gpu_info):
    """What gpu-defaults.json records the first time: every GPU's default limit, keyed by UUID."""
    gpus = {}
    for gpu in _gpus(gpu_info.get("gpus")):
        gpus[gpu.get("uuid")] = {"index": gpu.get("index"), "name": gpu.get("name"), "pci_bus_id": gpu.get("pci_bus_id"),
                                 "default_power_limit_w": gpu.get("default_power_limit_w"),
                                 "power_limit_w": gpu.get("power_limit_w"), "persistence_mode": gpu.get("persistence_mode")}
    return {"recorded_by": "gpuhost.inference.nvidia_power", "driver_version": gpu_info.get("driver_version"), "gpus": gpus}


def nvidia_power_restore_plan(gpus, recorded=None):
    """Each GPU's default limit: the one recorded in gpu-defaults.json (its ``gpus``, by UUID), else the
    one the GPU reports; GPUs with neither are left out. Rows: {index, name, default_w, recorded, power_limit_w}."""
    recorded = recorded or {}
    rows = []
    for gpu in _gpus(gpus):
        known = gpu.get("uuid") in recorded
        if gpu.get("default_power_limit_w") is None and not known:
            continue
        default = recorded[gpu["uuid"]]["default_power_limit_w"] if known else gpu.get("default_power_limit_w")
        rows.append({"index": gpu.get("index"), "name": gpu.get("name"), "default_w": default,
                     "recorded": known, "power_limit_w": gpu.get("power_limit_w")})
    return rows


def nvidia_power_restore_left(restore, gpus_after):
    """The GPUs of the restore plan that are not back at their default limit (error strings)."""
    by_index = _by_index(_gpus(gpus_after))
    left = []
    for r in restore:
        gpu = by_index[r["index"]]
        if gpu.get("power_limit_w") != r["default_w"]:
            left.append("GPU %s (%s) at %s W, default %s W"
                        % (r["index"], _text(r.get("name")), _text(gpu.get("power_limit_w")), _text(r["default_w"])))
    return left


def nvidia_power_unit_errors(unit_name, before_units, model_unit_name):
    """The cap unit against the units it runs before and the vLLM unit: systemd can start them all.

    unit_name: nvidia_power_unit_name; before_units: nvidia_power_before_units (typed: a list);
    model_unit_name: vllm_service_unit_name. Returns the error strings (empty when all is well).
    """
    errors = []
    if isinstance(unit_name, str) and unit_name and unit_name == model_unit_name:
        errors.append("nvidia_power_unit_name must differ from the vLLM unit's name (vllm_service_unit_name), got \"%s\" "
                      "for both: the cap's oneshot unit would overwrite the model's unit" % unit_name)
    befores = before_units if isinstance(before_units, list) else [before_units]
    if isinstance(unit_name, str) and unit_name in befores:
        errors.append("nvidia_power_before_units must not name the cap unit itself (nvidia_power_unit_name \"%s\"): "
                      "a unit ordered Before= itself is an ordering cycle systemd breaks by dropping a job" % unit_name)
    return errors


class FilterModule:
    """nvidia_power filters."""

    def filters(self):
        return {
            "nvidia_power_plan": nvidia_power_plan,
            "nvidia_power_unit_errors": nvidia_power_unit_errors,
            "nvidia_power_groups": nvidia_power_groups,
            "nvidia_power_drift": nvidia_power_drift,
            "nvidia_power_result": nvidia_power_result,
            "nvidia_power_defaults_record": nvidia_power_defaults_record,
            "nvidia_power_restore_plan": nvidia_power_restore_plan,
            "nvidia_power_restore_left": nvidia_power_restore_left,
        }
