"""Command line and --config YAML handling of the vLLM test double, as vLLM 0.28.0 does it.

vLLM's FlexibleArgumentParser turns each YAML key into `--key value` (True -> `--key`,
False -> `--no-key` where that exists, lists -> `--key a b`, dicts -> `--key '<json>'`),
puts those BEFORE the rest of the command line (so the command line wins), and accepts
`--flag_name` and `--flag-name` alike. Flags vLLM 0.28.0 does not know are refused with
argparse's message and exit status 2. The flag names are those of `vllm serve --help=all`
(serve_flags.txt beside this file).
"""
from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

import yaml

PROG = "api_server.py"
_FLAGS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "serve_flags.txt")


class UsageError(Exception):
    """A command line argparse would refuse (exit status 2)."""


def known_flags() -> set[str]:
    with open(_FLAGS_FILE, encoding="utf-8") as handle:
        return {line.strip() for line in handle if line.startswith("--")}


def load_config_file(path: str) -> list[str]:
    """The argv vLLM 0.28.0 derives from a --config YAML file."""
    extension = path.split(".")[-1]
    if extension not in ("yaml", "yml"):
        raise ValueError(f"Config file must be of a yaml/yml type. {extension} supplied")
    with open(path, encoding="utf-8") as handle:
        config = yaml.safe_load(handle) or {}
    out: list[str] = []
    for key, value in config.items():
        if isinstance(value, bool):
            if value:
                out.append("--" + key)
            elif "--" + key.replace("_", "-") in known_flags():
                out.append("--no-" + key)  # vLLM drops a False it has no --no- form for
        elif isinstance(value, list):
            if value:
                out.append("--" + key)
                out.extend(str(item) for item in value)
        elif isinstance(value, dict):
            out.append("--" + key)
            out.append(json.dumps(value))
        elif value is None:
            continue
        else:
            out.append("--" + key)
            out.append(str(value))
    return out


def expand_config(argv: list[str]) -> list[str]:
    if "--config" not in argv:
        return argv
    if argv.count("--config") > 1:
        raise UsageError("More than one config file specified!")
    index = argv.index("--config")
    if index == len(argv) - 1:
        raise ValueError("No config file specified! Please check your command-line arguments.")
    return load_config_file(argv[index + 1]) + argv[:index] + argv[index + 2:]


def _normalise(arg: str) -> str:
    """`--max_num_seqs=8` -> `--max-num-seqs=8` (only the name part)."""
    if not arg.startswith("--"):
        return arg
    name, sep, value = arg.partition("=")
    return re.sub(r"_", "-", name) + sep + value


def parse_argv(argv: list[str]) -> dict[str, Any]:
    """Parse into {dest_name: value}: a flag alone is True, `--no-x` is False, one value
    is a string, several values (nargs) a list of strings."""
    argv = [_normalise(a) for a in expand_config(list(argv))]
    flags = known_flags()
    parsed: dict[str, Any] = {}
    unknown: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("--"):
            unknown.append(arg)
            continue
        name, has_eq, inline = arg.partition("=")
        negated = False
        if name not in flags and name.startswith("--no-") and "--" + name[5:] in flags:
            name, negated = "--" + name[5:], True
        if name not in flags:
            unknown.append(arg)
            while i < len(argv) and not argv[i].startswith("--"):
                unknown.append(argv[i])
                i += 1
            continue
        dest = name[2:].replace("-", "_")
        if negated:
            parsed[dest] = False
            continue
        if has_eq:
            parsed[dest] = inline
            continue
        values = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        if not values:
            parsed[dest] = True
        elif len(values) == 1:
            parsed[dest] = values[0]
        else:
            parsed[dest] = values
    if unknown:
        raise UsageError("unrecognized arguments: " + " ".join(unknown))
    return parsed


def _int(value: Any, name: str) -> int:
    try:
        return int(str(value).replace("_", ""))
    except ValueError:
        raise UsageError(f"argument --{name.replace('_', '-')}: invalid int value: '{value}'") from None


def _float(value: Any, name: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise UsageError(f"argument --{name.replace('_', '-')}: invalid float value: '{value}'") from None


def _json(value: Any, name: str) -> dict | None:
    if value in (None, "", "None", "null"):
        return None
    if isinstance(value, dict):
        return value
    try:
        loaded = json.loads(value)
    except ValueError:
        raise UsageError(f"argument --{name.replace('_', '-')}: Value {value} cannot be converted to dict.") from None
    return loaded


@dataclass
class ServerArgs:
    """The options the double acts on (every other known flag is accepted and ignored)."""

    model: str = "Qwen/Qwen3-0.6B"
    served_model_name: list[str] = field(default_factory=list)
    host: str | None = None
    port: int = 8000
    api_key: list[str] = field(default_factory=list)
    max_model_len: int | None = None
    max_num_seqs: int = 256
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.92
    kv_cache_memory_bytes: int | None = None
    block_size: int = 16
    speculative_config: dict | None = None
    enable_prefix_caching: bool = True
    enable_server_load_tracking: bool = False
    raw: dict[str, Any] = field(default_factory=dict)

    def non_default(self) -> dict[str, Any]:
        """The options given, typed as vLLM logs them ("non-default args: {...}")."""
        out: dict[str, Any] = {}
        for key, value in self.raw.items():
            if isinstance(value, str):
                for kind in (int, float):
                    try:
                        value = kind(value)
                        break
                    except ValueError:
                        continue
            out[key] = value
        if "speculative_config" in out:
            out["speculative_config"] = self.speculative_config
        return out

    @property
    def names(self) -> list[str]:
        return self.served_model_name or [self.model]


def _size(value: Any, name: str) -> int:
    """vLLM accepts human sizes for --kv-cache-memory-bytes (e.g. 1G, 256M)."""
    text = str(value).strip()
    match = re.fullmatch(r"(?i)(\d+(?:\.\d+)?)\s*([kmgt]i?)?b?", text)
    if not match:
        raise UsageError(f"argument --{name.replace('_', '-')}: invalid human_readable_int value: '{value}'")
    number = float(match.group(1))
    unit = (match.group(2) or "").lower()
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12,
             "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40}[unit]
    return int(number * scale)


def server_args(argv: list[str], environ: dict[str, str] | None = None) -> ServerArgs:
    environ = os.environ if environ is None else environ
    raw = parse_argv(argv)
    args = ServerArgs(raw=raw)
    if "model" in raw:
        args.model = str(raw["model"])
    if "served_model_name" in raw:
        value = raw["served_model_name"]
        args.served_model_name = value if isinstance(value, list) else [str(value)]
    if raw.get("host") not in (None, True):
        args.host = str(raw["host"])
    for name in ("port", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                 "tensor_parallel_size", "block_size"):
        if name in raw:
            setattr(args, name, _int(raw[name], name))
    if "gpu_memory_utilization" in raw:
        args.gpu_memory_utilization = _float(raw["gpu_memory_utilization"], "gpu_memory_utilization")
    if "kv_cache_memory_bytes" in raw:
        args.kv_cache_memory_bytes = _size(raw["kv_cache_memory_bytes"], "kv_cache_memory_bytes")
    if "speculative_config" in raw:
        args.speculative_config = _json(raw["speculative_config"], "speculative_config")
    if "enable_prefix_caching" in raw:
        args.enable_prefix_caching = bool(raw["enable_prefix_caching"])
    if "enable_server_load_tracking" in raw:
        args.enable_server_load_tracking = bool(raw["enable_server_load_tracking"])
    key = raw.get("api_key")
    if key not in (None, True):
        args.api_key = key if isinstance(key, list) else [str(key)]
    elif environ.get("VLLM_API_KEY"):
        args.api_key = [environ["VLLM_API_KEY"]]
    return args


def usage_exit(message: str) -> None:
    sys.stderr.write(f"usage: {PROG} [-h] [options]\n{PROG}: error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(2)
