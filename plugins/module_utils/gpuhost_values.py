# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The collection's one typing path for role variables, and how its checks name a value's type.

typed() takes a value as an operator gives it (``-e key=value`` makes every value a string) to the type the
owner role's meta/argument_specs.yml gives it, with Ansible's own argument spec validator: the same forms
``validate_argument_spec`` and a role's implicit argument check accept ('2', '0.5', 'yes', '0,1' for a list
of ints, a scalar for a one-item list). Every role and play uses it through the filters ``typed`` and
``typed_errors`` (plugins/filter/gpuhost_checks.py), never restating a type.

Also the secret environment variables and settings, refused everywhere but the root-only secrets file.
Runs on the controller only (filters); never imports AnsibleModule.
"""
from __future__ import annotations

import functools
import ipaddress
import os
from collections.abc import Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import plain, redacted, show, type_name

ROLES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "roles")

# The types typed() converts to. str/path/raw values are left as given: a path is a path on the target
# (Ansible's `path` type would expand ~ on the controller), a raw value has its own check.
CONVERTED = ("int", "float", "bool", "list", "dict", "str")

# The forms each type is taken from (the messages name them).
FORMS = {
    "int": "an int (a whole number: 42 or '42')",
    "float": "a float (a number: 0.5 or '0.5')",
    "bool": "a bool (true/false, yes/no, on/off, 1/0, as a YAML boolean or a string)",
    "dict": "a dict (a YAML/JSON mapping: in a vars file, or -e as JSON: -e '{\"NAME\": {...}}'; -e NAME=... gives a string)",
    "str": "a str",
}

# Secrets: the environment variables and vLLM settings that hold a token or key. They belong in the root-only
# secrets file (vllm_service_config_dir/secrets.env, 0600) that vllm_service writes from these variables.
SECRET_ENV = {
    "VLLM_API_KEY": "vllm_service_api_key or vllm_service_api_key_file",
    "HF_TOKEN": "vllm_service_hf_token or vllm_service_hf_token_file",
    "HUGGING_FACE_HUB_TOKEN": "vllm_service_hf_token or vllm_service_hf_token_file",
    "HUGGINGFACE_HUB_TOKEN": "vllm_service_hf_token or vllm_service_hf_token_file",
    "HF_API_TOKEN": "vllm_service_hf_token or vllm_service_hf_token_file",
}
SECRET_SETTINGS = {
    "api_key": "vllm_service_api_key or vllm_service_api_key_file",
    "hf_token": "vllm_service_hf_token or vllm_service_hf_token_file",
}


def secret_hint(where_it_belongs):
    """The end of a message refusing a secret outside the secrets file."""
    return ("a secret must not be written there (profile files, .env files and unit files are world-readable, "
            "settings end up on vLLM's command line): set %s, written to the root-only secrets file "
            "(vllm_service_config_dir/secrets.env, mode 0600)" % where_it_belongs)


def variables(values, who=None):
    """``values`` when it is a mapping {variable name: value} (what every checking filter takes), else a TypeError
    naming the filter ``who`` and the type it got."""
    if not isinstance(values, Mapping):
        raise TypeError("%sthe input must be a mapping {variable name: value}, got %s"
                        % ("%s: " % who if who else "", type_name(values)))
    return values


def as_int(value, default=0):
    """As Jinja's ``int`` filter: '42.23' -> 42, anything else that is not a number -> default."""
    try:
        if isinstance(value, str):
            return int(value, 10)
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default


def as_float(value):
    """A float from an int, a float or a numeric string, else None (a bool is not a number, nor is None)."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def owner_role(name, roles):
    """The role owning variable `name`: the longest role name that prefixes it with '_' (None: no role)."""
    owners = [role for role in roles if str(name).startswith(role + "_")]
    return max(owners, key=len) if owners else None


def read_role_yaml(path):
    """A role's YAML file (its argument specs, its defaults) as data, on the controller: with libyaml's parser where
    PyYAML has it, ten times faster than the pure-Python one (each forked worker of a run reads the files anew)."""
    import yaml  # pylint: disable=import-outside-toplevel  # controller side only (the roles' files are read there)
    with open(path, encoding="utf-8") as handle:
        return yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}


@functools.lru_cache(maxsize=None)
def _role_options(role, roles_dir):
    spec = read_role_yaml(os.path.join(roles_dir, role, "meta", "argument_specs.yml"))
    return spec["argument_specs"]["main"].get("options") or {}


def _roles(roles_dir):
    return sorted(entry for entry in os.listdir(roles_dir)
                  if os.path.isdir(os.path.join(roles_dir, entry)) and not entry.startswith("_"))


def marked_options(marker, roles=None, roles_dir=ROLES_DIR):
    """See _marked_options (cached: the specs do not change during a run)."""
    return dict(_marked_options(marker, tuple(roles) if roles is not None else None, roles_dir))


@functools.lru_cache(maxsize=None)
def _marked_options(marker, roles, roles_dir):
    """The variables of the roles (default: every public role) that their argument specs mark, as {name: spec}:
    marker 'owned_path' (``type: path``: a path on the target the role creates, chowns, chmods or removes) or
    'secret' (``no_log: true``: never shown). The one declaration of both invariants (docs/CONTRACTS.md)."""
    if marker not in ("owned_path", "secret"):
        raise ValueError("marked_options: marker must be owned_path or secret, got %r" % (marker,))
    found = {}
    for role in roles if roles is not None else _roles(roles_dir):
        for name, spec in _role_options(str(role), os.path.abspath(roles_dir)).items():
            if marker == "owned_path" and spec.get("type") == "path":
                found[name] = spec
            elif marker == "secret" and spec.get("no_log"):
                found[name] = spec
    return found


def is_secret(name, roles_dir=ROLES_DIR):
    """True for a variable whose argument spec says no_log: its value is never shown."""
    spec = option_spec(name, roles_dir)
    return bool(spec and spec.get("no_log"))


def option_spec(name, roles_dir=ROLES_DIR):
    """The argument spec entry of a role variable (None: not a variable of this collection's roles)."""
    roles = [entry for entry in os.listdir(roles_dir) if os.path.isdir(os.path.join(roles_dir, entry))]
    role = owner_role(name, roles)
    if role is None:
        return None
    return _role_options(role, os.path.abspath(roles_dir)).get(str(name))


def form(spec):
    """The accepted forms of an option, for messages and docs."""
    kind = spec.get("type", "raw")
    if kind == "list":
        elements = spec.get("elements", "str")
        text = ("a list of %s (a YAML/JSON list; a single value is a one-item list, a string is split at commas: "
                "'0,1')" % elements)
    else:
        text = FORMS.get(kind, "a value of type %s" % kind)
    if spec.get("choices"):
        text += ", one of %s" % ", ".join(str(c) for c in spec["choices"])
    if "default" not in spec and not spec.get("required"):
        text += ", or null"
    return text


def check(name, value, spec=None, roles_dir=ROLES_DIR):
    """(the value as its argument spec types it, error string or None).

    spec: the option's argument spec entry (default: read from the owner role's meta/argument_specs.yml).
    A value that cannot be converted comes back as given, with the error. Null is accepted where Ansible's
    validator accepts it: for an option whose spec has no default (or a null one) and is not required.
    """
    if spec is None:
        spec = option_spec(name, roles_dir)
    if spec is None:
        return value, None
    kind = spec.get("type", "raw")
    if kind not in CONVERTED:
        return value, None
    one = {k: v for k, v in spec.items() if k in ("type", "elements", "choices", "default", "required")}
    one.pop("required", None)
    shown = redacted(value) if spec.get("no_log") else "%s (%s)" % (show(value), type_name(value))
    if kind == "list" and value is not None and not isinstance(value, (list, tuple, str, int, float, bool)):
        return value, "%s must be %s, got %s" % (name, form(spec), shown)
    # A dict only as a mapping: the roles read dicts as given (combine, dictsort), and a string from `-e NAME={...}`
    # would fail inside a task instead of here.
    # A str is a scalar: a mapping or a list would be written as its Python text (a key, a path) without a word.
    if kind == "str" and isinstance(value, (Mapping, list, tuple)):
        return value, "%s must be %s, got %s" % (name, form(spec), shown)
    if kind == "dict" and isinstance(value, str):
        return value, "%s must be %s, got %s" % (name, form(spec).replace("NAME", str(name)), shown)
    result = ArgumentSpecValidator({"x": one}).validate({"x": plain(value)})
    if result.error_messages:
        return value, "%s must be %s, got %s" % (name, form(spec).replace("NAME", str(name)), shown)
    return result.validated_parameters["x"], None


def typed(name, value, roles_dir=ROLES_DIR):
    """The value as its argument spec types it (as given when it cannot be converted: the checks refuse it)."""
    return check(name, value, roles_dir=roles_dir)[0]


def is_loopback(host):
    """True when a bind address only listens on the box: localhost, 127.0.0.0/8, ::1."""
    text = str(host).strip().strip("[]") if host is not None else ""
    if text.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(text).is_loopback
    except ValueError:
        return False


def host_var_getter(hostvars, name):
    """get(key, default) over one host's variables: the default when the variable is unset (Ansible's hostvars
    raise KeyError) or null."""
    try:
        hv = hostvars[name]
    except KeyError:
        hv = {}
    if not isinstance(hv, Mapping):
        hv = {}

    def get(key, default):
        try:
            value = hv[key]
        except KeyError:
            return default
        return default if value is None else value

    return get
