# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of vllm_service's weights step: which hub models to put on disk before the unit starts, the
arguments of the fetch script (roles/vllm_service/files/vllm_fetch_weights.py), what its answers mean
(HF_HUB_OFFLINE for ``auto``, the lines of the play's report) and the checks of the step's variables.

The docs of each filter are in the YAML file of the same name beside this one; the unit tests are
tests/unit/plugins/filter/test_vllm_service_weights.py with the cases of
tests/unit/data/vllm_service_weights_cases.yaml.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.filter.vllm_profile import vllm_profile_config
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_int as _int
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import type_name as _type_name
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import variables as _variables

# huggingface_hub's validate_repo_id: "name" or "namespace/name", [A-Za-z0-9_.-], not starting or ending
# with - or ., no -- or .., not ending in .git, 96 characters at most.
_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
REPO_ID_RE = re.compile(r"^(?:%s/)?%s$" % (_PART, _PART))
REPO_ID_MAX = 96
URI_RE = re.compile(r"^[a-z][a-z0-9+.-]*://")
# Written into the unit (Environment="HF_ENDPOINT=..."): no quote, space, % specifier or backslash.
ENDPOINT_RE = re.compile(r"^https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?(?:/[A-Za-z0-9._~/-]*)?$")
# A branch, tag or commit (refs/pr/1 too); passed as one argument and written as a YAML value.
REVISION_RE = re.compile(r"^[A-Za-z0-9._/-]+$")
HUB_FIELDS = (("model", "revision"), ("tokenizer", "tokenizer_revision"))


def model_kind(value):
    """'path' (absolute), 'uri' (scheme://), 'hub' (a repo id), 'other' (anything else), or None (empty)."""
    if not isinstance(value, str) or not value.strip():
        return None
    if value.startswith("/"):
        return "path"
    if URI_RE.match(value):
        return "uri"
    if (REPO_ID_RE.fullmatch(value) and len(value) <= REPO_ID_MAX and "--" not in value and ".." not in value
            and not value.endswith(".git")):
        return "hub"
    return "other"


def _norm(mapping):
    return {str(k).replace("-", "_"): v for k, v in (mapping or {}).items()} if isinstance(mapping, Mapping) else {}


def _sources(name, profile, common):
    """(value, revision, variable, revision variable, what) of every model a profile's server loads."""
    config = vllm_profile_config([common], profile)
    own = _norm((profile or {}).get("settings"))
    out = []
    for field, rev_field in HUB_FIELDS:
        if field not in config:
            continue
        if field in own:
            var = "vllm_service_profiles['%s'].settings.%s" % (name, field)
        else:
            var = "vllm_service_model" if field == "model" else "vllm_service_settings.%s" % field
        if rev_field in own:
            rev_var = "vllm_service_profiles['%s'].settings.%s" % (name, rev_field)
        else:
            rev_var = "vllm_service_model_revision" if rev_field == "revision" else "vllm_service_settings.%s" % rev_field
        out.append((config[field], config.get(rev_field) or "", var, rev_var, field))
    spec = _norm(config.get("speculative_config"))
    if spec.get("model"):
        where = "vllm_service_profiles['%s'].settings.speculative_config" % name if "speculative_config" in own \
            else "vllm_service_settings.speculative_config"
        out.append((spec["model"], spec.get("revision") or "", where + ".model", where + ".revision",
                    "speculative_config.model"))
    return out


def vllm_service_weights_plan(profiles, common, prefetch=True):
    """Which hub models the profiles load, deduplicated: {repos, skipped, fetch, local_only}.

    profiles: {name: {description, settings, environment}} (every profile: switching on the box must find
    its weights too); common: the common settings (model, revision, download_dir, ...).
    repos: [{repo_id, revision ('' = main), variable, revision_variable, used_by: ['profile: field']}];
    skipped: [{value, kind, used_by}] (paths and URIs); fetch: prefetch and repos; local_only: no hub model.
    """
    if not isinstance(profiles, Mapping):
        raise TypeError("vllm_service_weights_plan: profiles must be a mapping {name: profile}, got %s"
                        % _type_name(profiles))
    repos, skipped = {}, {}
    for name in sorted(profiles):
        for value, revision, var, rev_var, field in _sources(name, profiles[name], common or {}):
            kind = model_kind(value)
            used = "%s: %s" % (name, field)
            if kind == "hub":
                key = (value, str(revision))
                entry = repos.setdefault(key, {"repo_id": value, "revision": str(revision), "variable": var,
                                               "revision_variable": rev_var, "used_by": []})
                entry["used_by"].append(used)
            elif kind is not None:
                skipped.setdefault(value, {"value": value, "kind": kind, "used_by": []})["used_by"].append(used)
    out_repos = [repos[k] for k in sorted(repos)]
    return {"repos": out_repos, "skipped": [skipped[k] for k in sorted(skipped)],
            "fetch": bool(prefetch) and bool(out_repos), "local_only": not out_repos}


def vllm_service_fetch_args(repo, mode, cache_dir, endpoint="", hf_home="", secrets_file="", user="", log="",
                            ignore_patterns=None, allow_patterns=None, progress_s=10, env_reader=""):
    """The fetch script's arguments (a list, after the script's path) for one repo of the plan."""
    if mode not in ("fetch", "look", "check"):
        raise ValueError("vllm_service_fetch_args: mode must be fetch, look or check, got %r" % (mode,))
    if not isinstance(repo, Mapping) or not repo.get("repo_id"):
        raise TypeError("vllm_service_fetch_args: repo must be an entry of vllm_service_weights_plan's repos")
    args = ["--mode", mode, "--cache-dir", cache_dir,
            "--variable", repo.get("variable") or "vllm_service_model",
            "--revision-variable", repo.get("revision_variable") or "vllm_service_model_revision"]
    if repo.get("revision"):
        args += ["--revision", str(repo["revision"])]
    for flag, value in (("--endpoint", endpoint), ("--hf-home", hf_home), ("--secrets-file", secrets_file),
                        ("--env-reader", env_reader), ("--user", user), ("--log", log)):
        if value:
            args += [flag, str(value)]
    for pattern in allow_patterns or []:
        args += ["--allow-pattern", str(pattern)]
    for pattern in ignore_patterns or []:
        args += ["--ignore-pattern", str(pattern)]
    if mode == "fetch":
        args += ["--progress-s", str(progress_s)]
    return args + ["--", repo["repo_id"]]   # after --: a value starting with - is never read as an option


def vllm_service_fetch_result(stdout):
    """The fetch script's JSON answer (its last line of stdout); a stand-in naming the problem when there is none."""
    text = stdout if isinstance(stdout, str) else ""
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                answer = json.loads(line)
            except ValueError:
                break
            if isinstance(answer, Mapping):
                return dict(answer)
    return {"ok": False, "changed": False, "present": False,
            "error": "the fetch script gave no answer (stdout: %s)" % (text.strip()[-300:] or "empty")}


def _answers(registered):
    """{(repo_id, revision): answer} from a registered loop result of the script (skipped items left out)."""
    out = {}
    results = registered.get("results", []) if isinstance(registered, Mapping) else []
    for item in results or []:
        if not isinstance(item, Mapping) or item.get("skipped") or "stdout" not in item:
            continue
        repo = item.get("item") or item.get("__vllm_service_repo") or {}
        answer = vllm_service_fetch_result(item.get("stdout"))
        if isinstance(repo, Mapping) and repo.get("repo_id"):
            out[(repo["repo_id"], str(repo.get("revision") or ""))] = answer
    return out


def vllm_service_weights_todo(plan, looks):
    """The plan's repos that the look did not find complete on disk (every repo when there was no look)."""
    found = _answers(looks)
    return [r for r in plan.get("repos", [])
            if not found.get((r["repo_id"], r["revision"]), {}).get("present_before")]


def vllm_service_hf_offline(setting, plan, looks=None):
    """HF_HUB_OFFLINE for the unit: true/false as set; for ``auto`` true when every model of every profile is a
    local path or a hub model that is fetched before the start (vllm_service_prefetch) or already on disk."""
    text = str(setting).strip().lower()
    if isinstance(setting, bool) or text in ("true", "false"):
        return setting if isinstance(setting, bool) else text == "true"
    if text != "auto":
        raise ValueError("vllm_service_hf_offline must be auto, true or false, got %r" % (setting,))
    if any(s.get("kind") != "path" for s in plan.get("skipped", [])):
        return False   # a URI or anything else vLLM resolves itself: leave it online
    if not plan.get("repos"):
        return bool(plan.get("skipped"))
    if plan.get("fetch"):
        return True
    found = _answers(looks or {})
    return all(found.get((r["repo_id"], r["revision"]), {}).get("present_before") for r in plan["repos"])


def _size(num):
    num = float(num or 0)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if num < 1024 or unit == "TiB":
            return ("%d %s" % (num, unit)) if unit == "B" else ("%.1f %s" % (num, unit))
        num /= 1024
    return "%d B" % num   # pragma: no cover


def vllm_service_weights_report(plan, looks=None, fetches=None, check_mode=False):
    """What the weights step did, for the play: {lines, errors, changed}. One line per hub model and one per
    local path; errors are the script's sentences (they name the variable to change)."""
    lines, errors = [], []
    found = _answers(looks or {})
    fetched = _answers(fetches or {})
    changed = False
    kinds = {"path": "local path", "uri": "URI vLLM resolves itself"}
    for skip in plan.get("skipped", []):
        lines.append("%s: a %s, nothing to fetch (%s)" % (
            skip["value"], kinds.get(skip["kind"], "value vLLM resolves itself"), ", ".join(skip["used_by"])))
    for repo in plan.get("repos", []):
        key = (repo["repo_id"], repo["revision"])
        name = "%s@%s" % (repo["repo_id"], repo["revision"] or "main")
        look, fetch = found.get(key), fetched.get(key)
        if look is not None and look.get("error"):
            errors.append(look["error"])
            lines.append("%s: %s" % (name, look["error"]))
        elif fetch is not None:
            if fetch.get("ok"):
                changed = changed or bool(fetch.get("changed"))
                lines.append("%s: fetched %d files (%s) in %.1f s, snapshot %s complete (%d files, %s) under %s; log %s" % (
                    name, len(fetch.get("fetched_files") or []), _size(fetch.get("fetched_bytes")),
                    float(fetch.get("seconds") or 0), str(fetch.get("commit") or "")[:12], _int(fetch.get("files")),
                    _size(fetch.get("bytes")), fetch.get("cache_dir"), fetch.get("log") or "stderr"))
            else:
                errors.append(fetch.get("error") or "fetching %s failed" % name)
                lines.append("%s: FAILED: %s" % (name, errors[-1]))
        elif look is not None and look.get("present_before"):
            lines.append("%s: on disk, nothing fetched (snapshot %s, %d files, %s under %s)" % (
                name, str(look.get("commit") or "")[:12], _int(look.get("files")), _size(look.get("bytes")),
                look.get("cache_dir")))
        elif look is not None and look.get("mode") == "check":
            changed = changed or bool(look.get("would_fetch"))
            lines.append("%s: would fetch %d files (%s): %s" % (
                name, len(look.get("would_fetch") or []), _size(look.get("would_fetch_bytes")),
                ", ".join(look.get("would_fetch") or []) or "nothing"))
        elif not plan.get("fetch"):
            lines.append("%s: not on disk and vllm_service_prefetch is false: vLLM downloads it when it starts" % name)
        elif check_mode:
            lines.append("%s: would be fetched (the venv is not there yet to ask what is missing)" % name)
        else:
            lines.append("%s: not looked at" % name)
    return {"lines": lines, "errors": errors, "changed": changed}


def vllm_service_weights_errors(values):
    """Error strings for the weights step's variables (empty when all is well).

    values: {vllm_service_model, vllm_service_prefetch, vllm_service_prefetch_timeout,
    vllm_service_prefetch_ignore_patterns, vllm_service_prefetch_allow_patterns, vllm_service_model_revision,
    vllm_service_hf_endpoint, vllm_service_hf_token, vllm_service_hf_token_file, hf_token_file_exists}.
    """
    values = _variables(values, "vllm_service_weights_errors")
    v = values
    errors = []
    model = v.get("vllm_service_model")
    if model_kind(model) == "other":
        errors.append("vllm_service_model must be an absolute path on the host or a Hugging Face repo id (org/name: "
                      "letters, digits, - _ . ; no -- or ..; 96 characters at most), got %s" % json.dumps(model))
    if not isinstance(v.get("vllm_service_prefetch"), bool) and \
            str(v.get("vllm_service_prefetch")).lower() not in ("true", "false"):
        errors.append("vllm_service_prefetch must be true or false, got %s" % json.dumps(v.get("vllm_service_prefetch")))
    if _int(v.get("vllm_service_prefetch_timeout"), -1) < 1:
        errors.append("vllm_service_prefetch_timeout must be an integer >= 1 (seconds), got %s"
                      % (v.get("vllm_service_prefetch_timeout"),))
    for name in ("vllm_service_prefetch_ignore_patterns", "vllm_service_prefetch_allow_patterns"):
        patterns = v.get(name)
        if not isinstance(patterns, list) or not all(isinstance(p, str) and p.strip() for p in patterns):
            errors.append("%s must be a list of non-empty glob patterns (strings), got %s"
                          % (name, json.dumps(patterns, default=str)))
    revision = v.get("vllm_service_model_revision")
    if revision and (not isinstance(revision, str) or not REVISION_RE.fullmatch(revision)
                     or ".." in revision.split("/")):
        errors.append("vllm_service_model_revision must be a branch, tag or commit (letters, digits, . _ / -), got %s"
                      % json.dumps(revision))
    endpoint = v.get("vllm_service_hf_endpoint")
    if endpoint and (not isinstance(endpoint, str) or not ENDPOINT_RE.fullmatch(endpoint)):
        errors.append("vllm_service_hf_endpoint must be '' (the hub's default) or an http(s) URL of letters, digits and "
                      ". _ ~ / - (e.g. https://hf-mirror.example:8080), got %s" % json.dumps(endpoint))
    token, token_file = v.get("vllm_service_hf_token") or "", v.get("vllm_service_hf_token_file") or ""
    if token and token_file:
        errors.append("set only one of vllm_service_hf_token and vllm_service_hf_token_file")
    elif token_file and not v.get("hf_token_file_exists"):
        errors.append("vllm_service_hf_token_file: no such file on the controller: %s" % (token_file,))
    return errors


class FilterModule:
    """vllm_service weights filters."""

    def filters(self):
        return {
            "vllm_service_weights_plan": vllm_service_weights_plan,
            "vllm_service_fetch_args": vllm_service_fetch_args,
            "vllm_service_fetch_result": vllm_service_fetch_result,
            "vllm_service_weights_todo": vllm_service_weights_todo,
            "vllm_service_hf_offline": vllm_service_hf_offline,
            "vllm_service_weights_report": vllm_service_weights_report,
            "vllm_service_weights_errors": vllm_service_weights_errors,
        }
