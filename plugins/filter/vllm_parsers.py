# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Tool-call and reasoning parsers of a served model (vllm_service_tool_call_parser, vllm_service_reasoning_parser).

The docs of each filter are in the YAML file of the same name beside this one; the unit tests are
tests/unit/plugins/filter/test_vllm_parsers.py with the cases of tests/unit/data/vllm_parsers_cases.yaml.

vLLM answers a chat request with tools and tool_choice auto (what coding agents send) with HTTP 400
unless it was started with enable_auto_tool_choice and a tool_call_parser, and splits a model's thinking
from its answer only with a reasoning_parser. Which parser fits depends on the model family: the table
is the role's files/vllm-<release>-parsers.yml (the names the target release registers, and its `version`)
merged with files/vllm-parser-families.yml (the families in order, the first matching row wins).
"""
from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import type_name as _type_name

# The kinds of parser: the variable that picks it, the list of the parsers file, the vLLM setting, the row key.
KINDS = {
    "tool_call_parser": ("vllm_service_tool_call_parser", "tool_call_parsers", "tool-call"),
    "reasoning_parser": ("vllm_service_reasoning_parser", "reasoning_parsers", "reasoning"),
}
AUTO = "auto"
NONE = "none"
# Where transformers and vLLM find a model's own chat template besides tokenizer_config.json's `chat_template`.
TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


def registered(parsers, kind):
    """The names vLLM registers for a kind ('tool_call_parser' or 'reasoning_parser'), from the parsers file."""
    names = (parsers or {}).get(KINDS[kind][1]) if isinstance(parsers, Mapping) else None
    return [str(name) for name in names or []]


def _off(value):
    return value is None or (isinstance(value, str) and value.strip().lower() in (NONE, ""))


def _identity(model_info):
    """The lowercased model identity the `names` regexes search: the model string and config.json's _name_or_path."""
    config = model_info.get("config") if isinstance(model_info.get("config"), Mapping) else {}
    parts = [str(model_info.get("model") or ""), str(config.get("_name_or_path") or "")]
    return " ".join(p for p in parts if p).lower()


def _row_matches(row, identity, config):
    match = row.get("match") or {}
    for pattern in match.get("names") or []:
        if re.search(str(pattern), identity):
            return True
    model_type = config.get("model_type")
    if model_type is not None and str(model_type) in [str(t) for t in match.get("model_types") or []]:
        return True
    architectures = config.get("architectures")
    if isinstance(architectures, list):
        wanted = [str(a) for a in match.get("architectures") or []]
        if any(str(a) in wanted for a in architectures):
            return True
    return False


def vllm_parser_family(model_info, parsers):
    """The first row of the parsers file's `families` that matches the model (None when none does)."""
    if not isinstance(model_info, Mapping):
        model_info = {"model": model_info}
    config = model_info.get("config") if isinstance(model_info.get("config"), Mapping) else {}
    identity = _identity(model_info)
    for row in (parsers or {}).get("families") or []:
        if isinstance(row, Mapping) and _row_matches(row, identity, config):
            return row
    return None


def _resolve(value, kind, row):
    """auto -> the row's parser (None when no row matched or the row says none); none -> None; a name -> itself."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        if row is None or _off(row.get(kind)):
            return None
        return str(row.get(kind))
    if _off(value):
        return None
    return str(value).strip()


def _is_auto(value):
    return isinstance(value, str) and value.strip().lower() == AUTO


def vllm_parser_choice(model_info, parsers, tool_call_parser=AUTO, reasoning_parser=AUTO, chat_template=""):
    """What the served model gets: {family, tool_call_parser, reasoning_parser, source, settings}.

    model_info: {model: hub id or path, config: parsed config.json or {}, has_chat_template: true/false/None};
    parsers: the target release's files/vllm-<release>-parsers.yml with vllm-parser-families.yml; tool_call_parser / reasoning_parser: auto, none or a
    name; chat_template: an absolute path on the host or ''. settings are the vLLM settings to merge into
    every profile (enable_auto_tool_choice + tool_call_parser, reasoning_parser, chat_template).
    """
    if not isinstance(model_info, Mapping):
        model_info = {"model": model_info}
    row = vllm_parser_family(model_info, parsers)
    tool = _resolve(tool_call_parser, "tool_call_parser", row)
    reasoning = _resolve(reasoning_parser, "reasoning_parser", row)
    if _is_auto(tool_call_parser) or _is_auto(reasoning_parser):
        source = "auto: %s" % row["family"] if row is not None else "auto: no row matched"
    elif tool is not None or reasoning is not None:
        source = "explicit"
    else:
        source = NONE
    settings = {}
    if tool is not None:
        settings.update({"enable_auto_tool_choice": True, "tool_call_parser": tool})
    if reasoning is not None:
        settings["reasoning_parser"] = reasoning
    if isinstance(chat_template, str) and chat_template.strip():
        settings["chat_template"] = chat_template.strip()
    return {
        "family": str(row["family"]) if row is not None else None,
        "tool_call_parser": tool,
        "reasoning_parser": reasoning,
        "source": source,
        "settings": settings,
    }


def _vllm(parsers):
    version = parsers.get("version") if isinstance(parsers, Mapping) else None
    return "vLLM %s" % version if version else "vLLM"


def _name_errors(kind, value, parsers):
    variable, _key, what = KINDS[kind]
    names = registered(parsers, kind)
    if isinstance(value, str) and (value.strip().lower() in (AUTO, NONE) or value.strip() in names):
        return []
    close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6) if isinstance(value, str) else []
    hint = " (did you mean '%s'?)" % close[0] if close else ""
    return [
        "%s must be auto, none or a %s parser %s registers, got %r (%s)%s; allowed: %s"
        % (variable, what, _vllm(parsers), value, _type_name(value), hint, ", ".join([AUTO, NONE] + names))
    ]


def vllm_parser_errors(model_info, parsers, tool_call_parser, reasoning_parser, chat_template=""):
    """Error strings for the parser variables and the model's chat template (empty when all is well)."""
    errors = []
    if not isinstance(model_info, Mapping):
        model_info = {"model": model_info}
    for kind in KINDS:
        if not registered(parsers, kind):
            errors.append("the list of %s's %s parsers (files/vllm-<release>-parsers.yml: %s) is empty: cannot check %s"
                          % (_vllm(parsers), KINDS[kind][2], KINDS[kind][1], KINDS[kind][0]))
    if errors:
        return errors
    errors.extend(_name_errors("tool_call_parser", tool_call_parser, parsers))
    errors.extend(_name_errors("reasoning_parser", reasoning_parser, parsers))
    if chat_template is None:
        chat_template = ""
    if not isinstance(chat_template, str):
        errors.append("vllm_service_chat_template must be a string (an absolute path on the host, or '' for the model's own), got %s"
                      % _type_name(chat_template))
        chat_template = ""
    elif chat_template.strip() and not chat_template.strip().startswith("/"):
        errors.append("vllm_service_chat_template must be an absolute path of a Jinja chat template on the host "
                      "(or '' for the model's own), got %r" % chat_template)
    if errors or model_info.get("has_chat_template") is not False or chat_template.strip():
        return errors
    choice = vllm_parser_choice(model_info, parsers, tool_call_parser, reasoning_parser, chat_template)
    served = ["tool calls (%s)" % choice["tool_call_parser"]] if choice["tool_call_parser"] else []
    served += ["reasoning (%s)" % choice["reasoning_parser"]] if choice["reasoning_parser"] else []
    if served:
        errors.append(
            "vllm_service_chat_template is empty but the model dir %s has no chat template (no `chat_template` in its "
            "tokenizer_config.json and no chat_template.jinja): %s (%s) work through /v1/chat/completions, which needs "
            "one. Set vllm_service_chat_template to a Jinja chat template file on the host, or "
            "vllm_service_tool_call_parser: none and vllm_service_reasoning_parser: none to serve completions only"
            % (model_info.get("model"), " and ".join(served), choice["source"])
        )
    return errors


def _json(text):
    if isinstance(text, Mapping):
        return text
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, Mapping) else None


def vllm_parser_model_info(model, files=None, texts=None):
    """model_info for vllm_parser_choice / vllm_parser_errors from what preflight found in a local model dir.

    files: the names of the files found in the model dir (None: the dir is not on the host, or the model is
    a hub id); texts: {name: text} of the files read (config.json, tokenizer_config.json). A file found but
    not read (or not JSON) leaves has_chat_template unknown (None) rather than false.
    """
    texts = texts if isinstance(texts, Mapping) else {}
    if files is None:
        return {"model": model, "config": {}, "has_chat_template": None}
    found = set(str(f) for f in files)
    config = _json(texts.get("config.json")) or {}
    if found.intersection(TEMPLATE_FILES):
        has_template = True
    elif "tokenizer_config.json" in found:
        tokenizer_config = _json(texts.get("tokenizer_config.json"))
        has_template = None if tokenizer_config is None else bool(tokenizer_config.get("chat_template"))
    else:
        has_template = False
    return {"model": model, "config": dict(config), "has_chat_template": has_template}


class FilterModule:
    """vllm_service parser filters."""

    def filters(self):
        return {
            "vllm_parser_choice": vllm_parser_choice,
            "vllm_parser_errors": vllm_parser_errors,
            "vllm_parser_model_info": vllm_parser_model_info,
        }
