# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for vllm_service: check serving profiles against vLLM's flags, merge them into --config dicts.

The docs of each filter are in the YAML file of the same name beside this one.
"""
from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as _inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import (
    SECRET_ENV,
    SECRET_SETTINGS,
    secret_hint as _secret_hint,
    type_name as _type_name,
)

PROFILE_KEYS = ("description", "environment", "settings")
PROFILE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
HUMAN_INT_RE = re.compile(r"^\d+(\.\d+)?[kKmMgGtT]$")
# Integers > 0. vLLM also takes human-readable sizes (8k, 256M) for some (arg_utils.py).
POSITIVE_INTS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "data_parallel_size",
    "kv_cache_memory_bytes",
    "api_server_count",
)
HUMAN_READABLE_INTS = ("max_num_batched_tokens", "kv_cache_memory_bytes", "max_model_len")
FRACTIONS = ("gpu_memory_utilization",)
MAPPINGS = ("speculative_config",)
NON_EMPTY_STRINGS = ("model", "host")
CHOICES = {"dtype": ("auto", "half", "float16", "bfloat16", "float", "float32")}
# Keys that must never be written to a (world-readable) profile file: the secrets (module_utils gpuhost_values,
# one list for every check) and the config file itself.
FORBIDDEN = dict({key: _secret_hint(where) for key, where in SECRET_SETTINGS.items()},
                 config="the profile file is itself the --config file")
# The settings naming a parser, and the list of the role's parsers file (files/vllm-<release>-parsers.yml) they are in.
PARSER_LISTS = {"tool_call_parser": "tool_call_parsers", "reasoning_parser": "reasoning_parsers"}
FORBIDDEN_ENV = {key: _secret_hint(where) for key, where in SECRET_ENV.items()}


def _norm(key):
    return str(key).replace("-", "_")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _flag_names(flags):
    """'--max-num-seqs' lines (a list, or the whole file as text) -> {'max_num_seqs', ...}."""
    if isinstance(flags, str):
        flags = flags.split()
    names = set()
    for flag in flags or []:
        flag = str(flag).strip()
        # The reference file has comment lines: `lookup('file') | split` also yields their words.
        if flag.startswith("--") and len(flag) > 2:
            names.add(_norm(flag[2:]))
    return names


def _merge(parts):
    """Merge dicts (or a list of dicts) in order; keys normalized to underscores; None unsets a key."""
    if parts is None:
        return {}
    if isinstance(parts, Mapping):
        parts = [parts]
    merged = {}
    for part in parts:
        for key, value in (part or {}).items():
            key = _norm(key)
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
    return merged


def _check_value(where, key, value):
    """Type errors of one (normalized) key."""
    if value is None:
        return []
    if key in POSITIVE_INTS:
        if key == "max_model_len" and (value == -1 or value == "auto"):
            return []
        if _is_int(value) and value > 0:
            return []
        if key in HUMAN_READABLE_INTS and isinstance(value, str) and HUMAN_INT_RE.match(value.strip()):
            return []
        extra = " or a size like 8k / 256M" if key in HUMAN_READABLE_INTS else ""
        extra += " or 'auto'" if key == "max_model_len" else ""
        return ["%s: %s must be an integer > 0%s, got %r (%s)" % (where, key, extra, value, _type_name(value))]
    if key == "port":
        error = _inv.port_error("port", value, strict=True)
        return ["%s: %s (%s)" % (where, error, _type_name(value))] if error else []
    if key in FRACTIONS:
        if _is_number(value) and 0 < value <= 1:
            return []
        return ["%s: %s must be a number in (0, 1], got %r (%s)" % (where, key, value, _type_name(value))]
    if key in MAPPINGS:
        if isinstance(value, Mapping):
            return []
        return [
            "%s: %s must be a mapping, e.g. {method: mtp, num_speculative_tokens: 1}, got %r (%s)"
            % (where, key, value, _type_name(value))
        ]
    if key in NON_EMPTY_STRINGS:
        if isinstance(value, str) and value.strip():
            return []
        return ["%s: %s must be a non-empty string, got %r" % (where, key, value)]
    if key in CHOICES:
        if value in CHOICES[key]:
            return []
        return ["%s: %s must be one of %s, got %r" % (where, key, ", ".join(CHOICES[key]), value)]
    if not isinstance(value, (str, int, float, bool, list, Mapping)):
        return ["%s: %s has a value of type %s that cannot be written as a vLLM flag" % (where, key, _type_name(value))]
    return []


def _check_description(where, name, description):
    """A description is one line: it is written as a comment at the top of the profile's YAML file."""
    text = description.strip()  # the line break a folded YAML scalar (>) ends with is fine
    found = _inv.line_end(text)
    if found is None:
        pos = next((i for i, c in enumerate(text) if unicodedata.category(c) == "Cc" and c != "\t"), None)
        if pos is None:
            return []
        found = (pos, "the control character U+%04X" % ord(text[pos]))
    pos, what = found
    return [
        "%s: description (vllm_service_profiles / vllm_service_extra_profiles) must be a single line without "
        "control characters (it is written as a comment at the top of %s.yaml), got %s at character %d"
        % (where, name, what, pos)
    ]


def _vllm(parsers=None, version=None):
    """'vLLM <release>' for the messages: the release checked against (the parsers file's `version`), else 'vLLM'."""
    version = version or (parsers.get("version") if isinstance(parsers, Mapping) else None)
    return "vLLM %s" % version if version else "vLLM"


def _check_parser_names(where, key, value, parsers):
    """tool_call_parser / reasoning_parser: a name the target vLLM registers (parsers: the parsed parsers file)."""
    if value is None or parsers is None or key not in PARSER_LISTS:
        return []
    names = [str(n) for n in (parsers.get(PARSER_LISTS[key]) if isinstance(parsers, Mapping) else None) or []]
    if isinstance(value, str) and value in names:
        return []
    close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
    hint = " (did you mean '%s'?)" % close[0] if close else ""
    return [
        "%s: %s %r is not a %s parser %s registers%s; registered: %s (null removes it)"
        % (where, key, value, key.split("_parser")[0].replace("_", "-"), _vllm(parsers), hint, ", ".join(names))
    ]


def _check_settings(where, settings, flag_names, parsers=None, version=None):
    errors = []
    if settings is None:
        return errors
    if not isinstance(settings, Mapping):
        return ["%s: settings must be a mapping of vLLM flag -> value, got %s" % (where, _type_name(settings))]
    seen = {}
    for key, value in settings.items():
        if not isinstance(key, str) or not key:
            errors.append("%s: setting %r is not a flag name" % (where, key))
            continue
        name = _norm(key)
        if name in seen:
            errors.append("%s: '%s' and '%s' are the same vLLM flag; keep one" % (where, seen[name], key))
            continue
        seen[name] = key
        if name in FORBIDDEN:
            errors.append("%s: key '%s' is not allowed here: %s" % (where, key, FORBIDDEN[name]))
            continue
        if name not in flag_names:
            close = difflib.get_close_matches(name, sorted(flag_names), n=1, cutoff=0.6)
            hint = " (did you mean '%s'?)" % close[0] if close else ""
            errors.append("%s: unknown key '%s': not a flag of %s%s" % (where, key, _vllm(parsers, version), hint))
            continue
        errors.extend(_check_value(where, name, value))
        errors.extend(_check_parser_names(where, name, value, parsers))
    return errors


def _check_environment(where, environment):
    errors = []
    if environment is None:
        return errors
    if not isinstance(environment, Mapping):
        return ["%s: environment must be a mapping of VARIABLE -> value, got %s" % (where, _type_name(environment))]
    for key, value in environment.items():
        if not isinstance(key, str) or not ENV_NAME_RE.fullmatch(key):
            errors.append("%s: environment variable name %r must match [A-Za-z_][A-Za-z0-9_]*" % (where, key))
            continue
        if key in FORBIDDEN_ENV:
            errors.append("%s: environment variable %s is not allowed here: %s" % (where, key, FORBIDDEN_ENV[key]))
            continue
        if not isinstance(value, (str, int, float, bool)):
            errors.append("%s: environment %s must be a string or a number, got %s" % (where, key, _type_name(value)))
        elif "\n" in str(value) or "\x00" in str(value):
            errors.append("%s: environment %s must be a single line" % (where, key))
    return errors


def _gpu_errors(where, config, env, gpu_count):
    """The active profile asks for no more GPUs than the host shows it."""
    sizes = {}
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        value = config.get(key, 1)
        if not _is_int(value) or value < 1:
            return []  # reported as a type error already
        sizes[key] = value
    visible = gpu_count
    errors = []
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None:
        devices = [d.strip() for d in str(cvd).split(",") if d.strip()]
        for dev in devices:
            if dev.isdigit() and int(dev) >= gpu_count:
                errors.append(
                    "%s: CUDA_VISIBLE_DEVICES=%s names GPU %s but the host has %d GPU(s)%s"
                    % (where, cvd, dev, gpu_count, " (indices 0-%d)" % (gpu_count - 1) if gpu_count > 0 else "")
                )
        visible = min(gpu_count, len(devices))
    need = sizes["tensor_parallel_size"] * sizes["pipeline_parallel_size"] * sizes["data_parallel_size"]
    if need > visible:
        shown = "%d GPU(s) on the host" % gpu_count
        if cvd is not None:
            shown += ", %d visible through CUDA_VISIBLE_DEVICES=%s" % (visible, cvd)
        errors.append(
            "%s: tensor_parallel_size %d x pipeline_parallel_size %d x data_parallel_size %d needs %d GPU(s), "
            "but there are %s; pick a profile with a smaller tensor_parallel_size (e.g. single_gpu)"
            % (where, sizes["tensor_parallel_size"], sizes["pipeline_parallel_size"],
               sizes["data_parallel_size"], need, shown)
        )
    return errors


def _tool_choice_errors(where, config):
    """vLLM (0.28.0 and later) exits at start on enable_auto_tool_choice without a tool_call_parser."""
    if config.get("enable_auto_tool_choice") is True and not config.get("tool_call_parser"):
        return [
            "%s: enable_auto_tool_choice is true but no tool_call_parser is set (vLLM exits: "
            "--enable-auto-tool-choice requires --tool-call-parser); to turn tool calling off set both to null" % where
        ]
    return []


def vllm_profile_errors(profiles, flags, active, common=None, environment=None, gpu_count=None, parsers=None,
                        version=None):
    """Return the list of error strings for the serving profiles (empty when all is well).

    profiles: {name: {description, settings, environment}}; flags: the flag list of the target vLLM
    release ('--max-num-seqs' ...); active: the selected profile's name; common: the settings every
    profile starts from; environment: the environment every profile starts from; gpu_count: GPUs
    on the host (None: not checked); parsers: the parsed files/vllm-<release>-parsers.yml (its
    tool_call_parsers and reasoning_parsers lists; None: parser names not checked); version: the target
    release the messages name (default: the parsers file's `version`).
    """
    flag_names = _flag_names(flags)
    errors = []
    if not flag_names:
        errors.append("the list of vLLM flags is empty: cannot check the profiles")
        return errors
    errors.extend(_check_settings("common settings (vllm_service_settings)", common, flag_names, parsers, version))
    errors.extend(_check_environment("common environment (vllm_service_environment)", environment))

    if not isinstance(profiles, Mapping) or not profiles:
        errors.append(
            "vllm_service_profiles must be a non-empty mapping of profile name -> {description, settings, environment}, got %r"
            % (profiles,)
        )
        return errors

    known = sorted(str(name) for name in profiles)
    if not isinstance(active, str) or active not in profiles:
        errors.append(
            "vllm_service_profile %r is not a known profile; known profiles: %s" % (active, ", ".join(known))
        )

    for name in known:
        profile = profiles[name]
        where = "profile '%s'" % name
        if not PROFILE_NAME_RE.fullmatch(name):
            errors.append(
                "%s: the name must match [A-Za-z0-9][A-Za-z0-9_.-]* (it names the files <name>.yaml and <name>.env)" % where
            )
        if profile is None:
            profile = {}
        if not isinstance(profile, Mapping):
            errors.append("%s: must be a mapping with the keys %s, got %s" % (where, ", ".join(PROFILE_KEYS), _type_name(profile)))
            continue
        for key in profile:
            if key not in PROFILE_KEYS:
                close = difflib.get_close_matches(str(key), PROFILE_KEYS, n=1, cutoff=0.6)
                hint = " (did you mean '%s'?)" % close[0] if close else ""
                errors.append("%s: unknown key '%s'%s; allowed: %s" % (where, key, hint, ", ".join(PROFILE_KEYS)))
        description = profile.get("description", "")
        if description is not None and not isinstance(description, str):
            errors.append("%s: description must be a string, got %s" % (where, _type_name(description)))
        elif description:
            errors.extend(_check_description(where, name, description))
        settings = profile.get("settings")
        errors.extend(_check_settings(where, settings, flag_names, parsers, version))
        errors.extend(_check_environment(where, profile.get("environment")))
        if isinstance(settings, Mapping) or settings is None:
            errors.extend(_tool_choice_errors(where, vllm_profile_config(
                common if isinstance(common, Mapping) else None, {"settings": settings or {}})))

    active_profile = profiles.get(active) if isinstance(active, str) else None
    if gpu_count is not None and isinstance(active_profile, Mapping):
        settings = active_profile.get("settings")
        env = active_profile.get("environment")
        config = vllm_profile_config(common if isinstance(common, Mapping) else None,
                                     {"settings": settings if isinstance(settings, Mapping) else {}})
        env = vllm_profile_environment(environment if isinstance(environment, Mapping) else None,
                                       {"environment": env if isinstance(env, Mapping) else {}})
        errors.extend(_gpu_errors("profile '%s' (active)" % active, config, env, int(gpu_count)))
    return errors


def vllm_profile_config(common, profile, key_style="underscore"):
    """Common settings + the profile's settings -> the dict rendered as the profile's --config YAML.

    common: a dict or a list of dicts (merged in order); profile: the profile entry
    ({description, settings, environment}). Keys are normalized to underscores (later ones win,
    whichever spelling they use); a value of None removes the key. key_style='dash' returns the
    flag spelling (max-num-seqs): vLLM's --config loader only finds the --no-<flag> form of a
    `false` boolean for dashed keys, so the rendered files use it.
    """
    if key_style not in ("underscore", "dash"):
        raise ValueError("vllm_profile_config: key_style must be 'underscore' or 'dash', got %r" % (key_style,))
    if profile is None:
        profile = {}
    if not isinstance(profile, Mapping):
        raise TypeError("vllm_profile_config: profile must be a mapping {description, settings, environment}")
    parts = [common] if common is None or isinstance(common, Mapping) else list(common)
    merged = _merge([p for p in parts if p] + [profile.get("settings") or {}])
    if key_style == "dash":
        return {key.replace("_", "-"): value for key, value in merged.items()}
    return merged


def vllm_profile_environment(common, profile):
    """Common environment + the profile's environment -> {VAR: 'value'} (values as strings)."""
    env = {}
    for part in (common or {}, (profile or {}).get("environment") or {}):
        for key, value in part.items():
            if value is None:
                env.pop(key, None)
            elif isinstance(value, bool):
                env[key] = "1" if value else "0"
            else:
                env[key] = str(value)
    return env


def _release_key(version):
    match = re.match(r"^(\d+)\.(\d+)\.(\d+)", str(version))
    return tuple(int(p) for p in match.groups()) if match else None


def vllm_release(releases, target, variable="vllm_service_vllm_version"):
    """The shipped release whose flag and parser lists check the target release.

    releases: the list of vllm-versions.yml; target: the release to run (vllm_install_version). The newest listed
    release not newer than the target with the same major.minor wins (0.28.1 -> 0.28.0). Returns {target, release,
    error}: release None and an error naming the variable, the target and the supported releases when none fits.
    """
    listed = sorted((str(r) for r in releases or [] if _release_key(r)), key=_release_key)
    want = _release_key(target)
    fits = [r for r in listed if want and _release_key(r)[:2] == want[:2] and _release_key(r) <= want]
    if fits:
        return {"target": str(target), "release": fits[-1], "error": ""}
    return {
        "target": str(target), "release": None,
        "error": "%s is %r: no flag and parser lists are shipped for vLLM %s, so its profiles cannot be checked before "
                 "the switch; supported: %s (a patch release takes its minor's lists), or add the release with "
                 "scripts/vllm-version-lists.py" % (variable, target, ".".join(str(p) for p in want[:2]) if want else target,
                                                    ", ".join(listed) or "none"),
    }


class FilterModule:
    """vllm_service profile filters."""

    def filters(self):
        return {
            "vllm_profile_errors": vllm_profile_errors,
            "vllm_profile_config": vllm_profile_config,
            "vllm_profile_environment": vllm_profile_environment,
            "vllm_release": vllm_release,
        }
