# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters shared by the roles: check the values that are written into unit files and launchers.

The docs of each filter are in the YAML file of the same name beside this one.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import show as _show
from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as _inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import (
    SECRET_ENV,
    check as _check,
    is_secret as _is_secret,
    marked_options as _marked_options,
    secret_hint as _secret_hint,
    type_name as _type_name,
    variables as _variables,
)

# As useradd/groupadd take them (NAME_REGEX of adduser.conf, shadow's default).
USER_RE = re.compile(r"^[a-z_][a-z0-9_-]*\$?$")
USER_MAX = 32

# A [Service] directive name.
DIRECTIVE_RE = re.compile(r"^[A-Z][A-Za-z]+$")

KINDS = ("path", "unit", "user", "directives")

# Keys whose values line_errors leaves to a check of their own: a profile's description (filter vllm_profile_errors:
# one line, the final line break of a folded YAML scalar allowed, every control character refused).
LINE_OWN_CHECK = ("description",)
# Variables whose values a message must not show (the value is a secret).
SECRET_NAME_RE = re.compile(r"(api_key|token|password|secret)", re.I)


def _path_errors(name, value):
    """The one path rule (module_utils/gpuhost_invariants.py): its form; for a path the role owns (typed `path` in its
    argument spec), never a system directory or file, nor an ancestor of one."""
    if not _inv.is_plain_path(value):
        return ["%s must be %s, got %s" % (name, _inv.PATH_FORM, _show(value))]
    if name in _marked_options("owned_path"):
        return _inv.owned_path_errors({name: value})
    return []


def _unit_errors(name, value, types):
    if _inv.is_unit(value, types):
        if not _inv.is_unit(value, types, template=False):
            return ["%s must name a unit systemd can start: %s is a template (name@.type), give an instance "
                    "(name@instance.type) or a plain name" % (name, _show(value))]
        return []
    if tuple(types) == _inv.UNIT_TYPES:
        ending = "ending in a unit type (.service, .target, .mount, .socket, .timer, ...)"
    else:
        ending = "ending in %s" % ", ".join("." + t for t in types)
    form = "a systemd unit name (letters, digits and : _ . - with an optional @instance, at most %d characters) %s" \
           % (_inv.UNIT_MAX, ending)
    return ["%s must be %s, got %s" % (name, form, _show(value))]


def _user_errors(name, value):
    if USER_RE.fullmatch(value) and len(value) <= USER_MAX:
        return []
    return ["%s must be a user or group name as useradd takes it (^[a-z_][a-z0-9_-]*[$]?$, at most %d characters), got %s"
            % (name, USER_MAX, _show(value))]


def _directive_errors(name, value):
    if not isinstance(value, Mapping):
        return ["%s must be a mapping of [Service] directive -> value (or a list of values), got %s"
                % (name, _type_name(value))]
    errors = []
    for key, setting in value.items():
        if not isinstance(key, str) or not DIRECTIVE_RE.fullmatch(key):
            errors.append("%s: %s is not a systemd directive name (^[A-Z][A-Za-z]+$)" % (name, _show(key)))
            continue
        for item in setting if isinstance(setting, list) else [setting]:
            if isinstance(item, (Mapping, list)) or item is None:
                errors.append("%s: %s must be a single-line value or a list of them, got %s" % (name, key, _type_name(item)))
            elif _inv.line_end(str(item)):
                errors.append("%s: %s must be a single-line value (no line break or NUL), got %s" % (name, key, _show(str(item))))
            elif key == "Environment":
                errors.extend(_secret_environment_errors(name, str(item)))
    return errors


def _secret_environment_errors(name, item):
    """Environment=VAR=value ... naming a secret: the unit file is world-readable."""
    errors = []
    for word in item.replace('"', " ").replace("'", " ").split():
        var = word.split("=", 1)[0]
        if var in SECRET_ENV:
            errors.append("%s: Environment sets %s: %s" % (name, var, _secret_hint(SECRET_ENV[var])))
    return errors


def unit_value_errors(values, kind, allow_empty=False, types=None):
    """Return the error strings of the values (empty when all is well).

    values: {variable name: value}; a list value is checked item by item (named var[0], var[1] ...).
    kind: path, unit, user or directives. allow_empty: '' is fine (an empty list always is).
    types: for kind=unit, the unit types allowed (default: every type).
    """
    if kind not in KINDS:
        raise ValueError("unit_value_errors: kind must be one of %s, got %r" % (", ".join(KINDS), kind))
    values = _variables(values, "unit_value_errors")
    if types is None:
        types = _inv.UNIT_TYPES
    elif isinstance(types, str):
        types = (types,)
    types = tuple(types)
    unknown = [t for t in types if t not in _inv.UNIT_TYPES]
    if unknown or not types:
        raise ValueError("unit_value_errors: types must be a non-empty list of %s, got %r" % (", ".join(_inv.UNIT_TYPES), types))

    errors = []
    for name in values:
        value = values[name]
        if kind == "directives":
            errors.extend(_directive_errors(name, value))
            continue
        if isinstance(value, list):
            items = [("%s[%d]" % (name, i), item) for i, item in enumerate(value)]
        else:
            items = [(name, value)]
        for label, item in items:
            if not isinstance(item, str):
                errors.append("%s must be a string, got %s (%s)" % (label, _show(item), _type_name(item)))
            elif item == "":
                if not allow_empty:
                    errors.append("%s must be set (it is empty)" % label)
            elif kind == "path":
                errors.extend(_path_errors(label, item))
            elif kind == "unit":
                errors.extend(_unit_errors(label, item, types))
            else:
                errors.extend(_user_errors(label, item))
    return errors


def _line_walk(label, value, secret, errors):
    if isinstance(value, str):
        where = _inv.line_end(value)
        if where is not None:
            shown = "a %d-character value" % len(value) if secret else _show(value)
            errors.append("%s must be a single line (no line break or NUL: it is written into a file, a unit or a "
                          "command line), got %s with %s at character %d" % (label, shown, where[1], where[0]))
    elif isinstance(value, Mapping):
        for key, item in value.items():
            if isinstance(key, str) and key in LINE_OWN_CHECK:
                continue
            _line_walk("%s (a key)" % label, key, secret, errors)  # a key is written too (a flag, a directive)
            _line_walk("%s.%s" % (label, key), item, secret or bool(SECRET_NAME_RE.search(str(key))), errors)
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            _line_walk("%s[%d]" % (label, index), item, secret, errors)


def line_errors(values):
    """Error strings for every string in the values ({variable: value}, walked through mappings and lists, their keys
    too) that holds a line break or NUL, naming the variable and where in it (var.key[0].key); empty when all is well."""
    values = _variables(values, "line_errors")
    errors = []
    for name in sorted(values, key=str):
        secret = bool(SECRET_NAME_RE.search(str(name))) or _is_secret(str(name))
        _line_walk(str(name), values[name], secret, errors)
    return errors


def typed(value, name):
    """The value of role variable `name` as its argument spec types it ('2' -> 2, '0,1' -> [0, 1],
    'yes' -> true, a scalar -> a one-item list); as given when it cannot be converted (typed_errors says why)."""
    return _check(name, value)[0]


def typed_errors(values):
    """Error strings for the values ({role variable: value}) that their argument specs cannot type."""
    values = _variables(values, "typed_errors")
    errors = []
    for name in sorted(values, key=str):
        error = _check(str(name), values[name])[1]
        if error:
            errors.append(error)
    return errors


def _owned(values):
    """The owned-path variables among the values ({variable: value}): those their argument specs type `path`."""
    values = _variables(values)
    marked = _marked_options("owned_path")
    return {str(name): values[name] for name in values if str(name) in marked and values[name] is not None}, marked


def owned_path_errors(values, owners=None):
    """Error strings for the host's owned paths (the variables of `values` typed `path` in their argument specs): the
    one form, never a system directory, a system file or an ancestor of one (module_utils/gpuhost_invariants.py); with
    owners ({path: [package]} read on the target by the module gpuhost_host_claims), never a path a distribution
    package owns unless the variable is at its role's literal default."""
    owned, marked = _owned(values)
    allow_empty = [name for name in owned if marked[name].get("default") == ""]
    errors = _inv.owned_path_errors(owned, allow_empty=allow_empty)
    # A path already refused (its form, a system directory) is not looked up again.
    refused = {name for name in owned for e in errors if e.startswith((name + "=", name + " "))}
    owned = {name: value for name, value in owned.items() if name not in refused}
    if owners:
        defaults = {name: spec.get("default") for name, spec in marked.items()
                    if isinstance(spec.get("default"), str) and "{" not in spec["default"]}
        errors.extend(_inv.package_path_errors(owned, owners, defaults))
    return errors


def owned_paths(values):
    """The host's owned paths to look up on the target: the plain, non-empty ones, normalised, unique and sorted."""
    owned, _marked = _owned(values)
    return sorted({_inv.normal_path(v) for v in owned.values()
                   if _inv.is_plain_path(v)})


def listener_errors(values, roles, live=None):
    """Error strings for the listeners of the host's roles (the table of module_utils/gpuhost_invariants.py built from
    the values): two on one port and address family, a port held by a process not ours (live: from
    gpuhost_host_claims)."""
    values = _variables(values, "listener_errors")
    plain = {str(k): typed(v, str(k)) for k, v in values.items()}
    return _inv.listener_errors(_inv.listener_table(plain, [str(r) for r in roles]), live or [])


def listener_vars(roles):
    """The variables the listener table of these roles reads (hosts, ports, units, switches): site.yml's play 1 takes
    each from the host's variables, else from its role's defaults."""
    names = []
    for role, _what, host_var, port_var, unit, switch in _inv.LISTENERS:
        if role in [str(r) for r in roles]:
            names.extend(n for n in (host_var, port_var, unit[1:] if unit.startswith("$") else None, switch)
                         if n and n not in names)
    return names


def port_errors(values, low=1):
    """Error strings for the values ({variable: port}) that are not a port from ``low`` to 65535 (the one port rule,
    module_utils/gpuhost_invariants.py port_error)."""
    values = _variables(values, "port_errors")
    return [error for error in (_inv.port_error(str(name), value, int(low)) for name, value in values.items()) if error]


def secret_value_errors(values, form="header"):
    """Error strings for the secrets of values ({label: key or token}) whose characters break the rule of where they
    land (form: header, nginx or client; module_utils/gpuhost_invariants.py SECRET_FORMS); never a value."""
    values = _variables(values, "secret_value_errors")
    try:
        return _inv.secret_value_errors({str(k): v for k, v in values.items()}, str(form))
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def url_host(host, listen_all_as="loopback"):
    """An address or host name as the host part of a URL: an IPv6 literal in brackets; a wildcard bind
    (0.0.0.0, ::, '') as the loopback address of its family (what a client on the box connects to)."""
    text = str(host).strip() if host is not None else ""
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if text in ("", "0.0.0.0"):
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return text
    if address.version == 6:
        return "[::1]" if address.is_unspecified else "[%s]" % address.compressed
    return text


class FilterModule:
    """Checks of values written into unit files and launchers; the variables' typing."""

    def filters(self):
        return {"unit_value_errors": unit_value_errors, "typed": typed, "typed_errors": typed_errors,
                "line_errors": line_errors, "url_host": url_host,
                "owned_path_errors": owned_path_errors, "owned_paths": owned_paths,
                "listener_errors": listener_errors, "listener_vars": listener_vars,
                "port_errors": port_errors, "secret_value_errors": secret_value_errors}
