# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The checks of vllm_service's own variables (the values written into unit files are checked by
unit_value_errors, the profiles by vllm_profile_errors).

The docs of the filter are in the YAML file of the same name beside this one; its unit tests are
tests/unit/plugins/filter/test_vllm_service.py with the cases of tests/unit/data/vllm_service_var_errors.yaml.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_int as _int

_SPACE = re.compile(r"\s")


def _length(value):
    return len(value) if value is not None else 0


def vllm_service_var_errors(values):
    """Error strings for vllm_service's variables (empty when all is well).

    values: {variable name: value} with the keys vllm_service_model, _host, _port, _tensor_parallel_size,
    _hf_offline, _restart_sec, _start_limit_interval_sec, _start_limit_burst, _timeout_start_sec,
    _timeout_stop_sec, _api_key, _api_key_file, and api_key_file_exists (whether the file is on the controller).
    """
    if not isinstance(values, Mapping):
        raise TypeError("vllm_service_var_errors: the input must be a mapping {variable name: value}, got %s"
                        % type(values).__name__)
    v = values
    errors = []
    model = v["vllm_service_model"]
    if not isinstance(model, str) or not model.strip():
        errors.append("vllm_service_model must be set: a Hugging Face repo id or an absolute path on the host")
    host = v["vllm_service_host"]
    if not str(host).strip() or _SPACE.search(str(host)):
        errors.append("vllm_service_host must be an address or host name, got " + json.dumps(host))
    port = v["vllm_service_port"]
    if _int(port) < 1 or _int(port) > 65535:
        errors.append("vllm_service_port must be 1-65535, got %s" % (port,))
    tp_size = v["vllm_service_tensor_parallel_size"]
    if _int(tp_size) < 1:
        errors.append("vllm_service_tensor_parallel_size must be an integer >= 1, got %s" % (tp_size,))
    offline = v["vllm_service_hf_offline"]
    if not isinstance(offline, bool) and str(offline).lower() not in ("auto", "true", "false"):
        errors.append("vllm_service_hf_offline must be auto, true or false, got " + json.dumps(offline))
    if _int(v["vllm_service_restart_sec"]) < 0 or _int(v["vllm_service_start_limit_interval_sec"]) < 0:
        errors.append("vllm_service_restart_sec and vllm_service_start_limit_interval_sec must be >= 0")
    if min(_int(v["vllm_service_start_limit_burst"]), _int(v["vllm_service_timeout_start_sec"]),
           _int(v["vllm_service_timeout_stop_sec"])) < 1:
        errors.append("vllm_service_start_limit_burst, vllm_service_timeout_start_sec and vllm_service_timeout_stop_sec must be >= 1")
    key, key_file = v["vllm_service_api_key"], v["vllm_service_api_key_file"]
    if _length(key) > 0 and _length(key_file) > 0:
        errors.append("set only one of vllm_service_api_key and vllm_service_api_key_file")
    elif _length(key_file) > 0 and not v.get("api_key_file_exists"):
        errors.append("vllm_service_api_key_file: no such file on the controller: %s" % (key_file,))
    return errors


class FilterModule:
    """vllm_service filters."""

    def filters(self):
        return {"vllm_service_var_errors": vllm_service_var_errors}
