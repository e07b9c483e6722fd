# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The decisions of playbooks/sweep.yml, in Python: the check of its settings, the power limits
to give back when the inventory leaves the caps alone, and the model's weight bytes (for the roofline).

The docs of each filter are in the YAML file of the same name beside this one; the unit tests are
tests/unit/plugins/filter/test_sweep.py with the cases of tests/unit/data/sweep_cases.yaml.
"""
from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_int as _int

_WHOLE = re.compile(r"^[0-9]+$")
_DECIMAL = re.compile(r"^[0-9]+(\.[0-9]+)?$")


def _float(value, default=0.0):
    """As Jinja's ``float`` filter."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def _not_a_list(value):
    """As ``value is string or value is mapping or value is not iterable``."""
    return isinstance(value, (str, Mapping)) or not isinstance(value, Iterable)


def sweep_setting_errors(settings, rendered, gpus, nvidia_smi="nvidia-smi", gpus_msg="no GPU", profile_dir="/etc/vllm/profiles"):
    """Error strings for the sweep's settings (empty when all is well).

    settings: {profiles, power_limits_w, model_weight_bytes, gpu_bandwidth_gb_s, fail_fast, restore_verify}.
    rendered: the profile names rendered on the host. gpus: nvidia_gpu_info's gpus before the sweep
    (gpus_msg: its msg when it gave none). nvidia_smi, profile_dir: as the messages name them.
    """
    errors = []
    gpus = list(gpus or [])
    profiles = settings["profiles"]
    if _not_a_list(profiles):
        errors.append("sweep_profiles must be a list of profile names, got %s" % (profiles,))
    else:
        for p in profiles:
            if not isinstance(p, str) or len(p) == 0:
                errors.append("sweep_profiles: %s is not a profile name" % (p,))
            elif p not in rendered:
                errors.append("sweep_profiles: profile %s is not rendered on the host (no %s/%s.yaml; run site.yml with it in "
                              "vllm_service_profiles or vllm_service_extra_profiles); allowed: %s"
                              % (p, profile_dir, p, ", ".join(sorted(rendered, key=str.lower)) or "none"))
    limits = settings["power_limits_w"]
    if _not_a_list(limits):
        errors.append("sweep_power_limits_w must be a list of watts, got %s" % (limits,))
    else:
        limits = list(limits)
        if limits and not gpus:
            errors.append("sweep_power_limits_w needs the GPUs, but %s did not answer: %s" % (nvidia_smi, gpus_msg))
        for w in limits:
            if not _WHOLE.match(str(w)) or _int(w) <= 0:
                errors.append("sweep_power_limits_w: %s is not a positive whole number of watts" % (w,))
                continue
            for g in gpus:
                low, high = g.get("min_power_limit_w"), g.get("max_power_limit_w")
                if low is None or high is None:
                    errors.append("sweep_power_limits_w: GPU %s (%s) reports no power limit range" % (g["index"], g["name"]))
                elif _int(w) < low or _int(w) > high:
                    errors.append("sweep_power_limits_w: %s W is outside GPU %s (%s)'s range %s-%s W"
                                  % (w, g["index"], g["name"], "%g" % low, "%g" % high))
    weight = settings["model_weight_bytes"]
    if weight is not None and (not _WHOLE.match(str(weight)) or _int(weight) <= 0):
        errors.append("sweep_model_weight_bytes: %s is not a positive number of bytes" % (weight,))
    bandwidth = settings["gpu_bandwidth_gb_s"]
    if bandwidth is not None and (not _DECIMAL.match(str(bandwidth)) or _float(bandwidth) <= 0):
        errors.append("sweep_gpu_bandwidth_gb_s: %s is not a positive number of GB/s" % (bandwidth,))
    for key in ("fail_fast", "restore_verify"):
        if not isinstance(settings[key], bool):
            errors.append("sweep_%s must be true or false, got %s" % (key, settings[key]))
    return errors


def sweep_original_limits(gpus):
    """{index: power.limit in whole W} of the GPUs that report one (what comes back when the inventory leaves the caps alone)."""
    return {g["index"]: int(round(g["power_limit_w"], 0)) for g in gpus or [] if g.get("power_limit_w") is not None}


def sweep_weight(files, links=None, weight_bytes=None, model="(unset)"):
    """The model's weight bytes and where the figure comes from: {bytes, source}.

    weight_bytes (sweep_model_weight_bytes) wins; else the sizes of the *.safetensors files when
    there are any, else of the *.bin files, of ``find``'s files (regular ones) and ``stat``'s results
    of the linked ones (``item`` the path). model names the directory in the source.
    """
    sizes = {}
    for f in files or []:
        if f.get("isreg"):
            sizes[f["path"]] = f["size"]
    for r in links or []:
        stat = r.get("stat")
        if stat is not None and stat.get("exists") and stat.get("isreg"):
            sizes[r["item"]] = stat["size"]
    safetensors = [(k, v) for k, v in sizes.items() if re.search(r"\.safetensors$", k)]
    chosen = safetensors if safetensors else list(sizes.items())
    if weight_bytes is not None:
        return {"bytes": _int(weight_bytes), "source": "variable sweep_model_weight_bytes"}
    if chosen:
        return {"bytes": sum(v for _k, v in chosen),
                "source": "%d %s file(s) in %s" % (len(chosen), "*.safetensors" if safetensors else "*.bin", model)}
    return {"bytes": None, "source": "vllm_service_model %s is not a local directory with *.safetensors/*.bin files; "
                                     "set sweep_model_weight_bytes" % (model,)}


class FilterModule:
    """playbooks/sweep.yml filters."""

    def filters(self):
        return {
            "sweep_setting_errors": sweep_setting_errors,
            "sweep_original_limits": sweep_original_limits,
            "sweep_weight": sweep_weight,
        }
