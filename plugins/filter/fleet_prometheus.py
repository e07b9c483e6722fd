# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The fleet Prometheus's scrape targets from the inventory (role fleet_prometheus), and the checks of its binds.

    fleet_prometheus_targets(groups, hostvars, monitoring_host, gpu_group, router_group, defaults)
        -> {jobs: {vllm: [...], node: [...], vllm_router: [...]}, errors: [...]}
    fleet_prometheus_bind_errors({name: value, ...}) -> [error strings]

Each target is {targets: ["host:port"], labels: {box, profile}} (routers: {box}), the shape of a Prometheus
static_config. A box is reached as the router reaches it (vllm_router_workers): a loopback bind only from the box
itself, a wildcard bind on loopback from the box itself and on its inventory address (ansible_host) from elsewhere,
any other bind on that address.
"""
from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as _inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import show as _show
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import host_var_getter
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import is_loopback as _is_loopback

_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[0-9A-Fa-f:.]+|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)$")
# What each job reads from a host's variables: (host variable, port variable, the defaults' keys).
JOBS = {
    "vllm": ("vllm_service_host", "vllm_service_port"),
    "node": ("node_metrics_host", "node_metrics_port"),
    "vllm_router": ("vllm_router_prometheus_host", "vllm_router_prometheus_port"),
}


def _is_wildcard(host):
    return str(host).strip().strip("[]") in ("", "0.0.0.0", "::")


def _url_host(host):
    text = str(host).strip().strip("[]")
    try:
        if ipaddress.ip_address(text).version == 6:
            return "[%s]" % text
    except ValueError:
        pass
    return text


def _address(name, host, monitoring_host, inventory_address):
    """Where Prometheus on monitoring_host reaches a bind `host` of box `name` (None: it cannot)."""
    host = str(host).strip()
    same = name == monitoring_host
    if _is_loopback(host):
        return host if same else None
    if _is_wildcard(host):
        if same:
            return "::1" if host.strip("[]") == "::" else "127.0.0.1"
        return str(inventory_address)
    return host


def fleet_prometheus_targets(groups, hostvars, monitoring_host, gpu_group="gpu_servers", router_group="vllm_routers",
                             defaults=None):
    """The static targets of the jobs vllm, node and vllm_router: {jobs: {job: [static_config]}, errors: [str]}.

    groups/hostvars: Ansible's; monitoring_host: the Prometheus host's inventory_hostname; defaults: {variable: default}
    for the binds (vllm_service_host, vllm_service_port, node_metrics_host, node_metrics_port,
    vllm_router_prometheus_host, vllm_router_prometheus_port, vllm_service_profile).
    """
    if not isinstance(groups, Mapping):
        raise AnsibleFilterError("fleet_prometheus_targets: groups must be a mapping (Ansible's groups), got %s"
                                 % _inv.type_name(groups))
    hostvars = hostvars if hostvars is not None else {}
    defaults = dict(defaults or {})
    jobs = {"vllm": [], "node": [], "vllm_router": []}
    errors = []
    members = {"vllm": list(groups.get(gpu_group) or []), "node": list(groups.get(gpu_group) or []),
               "vllm_router": list(groups.get(router_group) or [])}
    for job, names in members.items():
        host_var, port_var = JOBS[job]
        for name in names:
            get = host_var_getter(hostvars, name)
            host = get(host_var, defaults.get(host_var, "127.0.0.1"))
            port = get(port_var, defaults.get(port_var))
            error = _inv.port_error(port_var, port)
            if error:
                errors.append("%s %s: %s" % (job, name, error))
                continue
            port = int(port)
            address = _address(name, host, monitoring_host, get("ansible_host", name))
            if address is None:
                errors.append(
                    "%s %s: %s %s listens on loopback only, so Prometheus on %s cannot scrape it: bind it to an address "
                    "%s reaches (in the host_vars or group_vars of %s), or put Prometheus on %s itself"
                    % (job, name, host_var, _show(str(host)), monitoring_host, monitoring_host, name, name))
                continue
            if not _HOST.match(str(address)):
                errors.append("%s %s: %s is not an address Prometheus can use (ansible_host or %s)"
                              % (job, name, _show(address), host_var))
                continue
            labels = {"box": str(name)}
            if job != "vllm_router":
                labels["profile"] = str(get("vllm_service_profile", defaults.get("vllm_service_profile", "default")))
            jobs[job].append({"targets": ["%s:%d" % (_url_host(address), port)], "labels": labels})
    return {"jobs": jobs, "errors": errors}


def fleet_prometheus_bind_errors(values):
    """Errors of the Prometheus and Alertmanager binds: beyond loopback only with fleet_prometheus_allow_remote."""
    if not isinstance(values, Mapping):
        raise AnsibleFilterError("fleet_prometheus_bind_errors: the input must be a mapping {variable: value}")
    errors = []
    allow = values.get("fleet_prometheus_allow_remote") is True
    for var in ("fleet_prometheus_host", "fleet_prometheus_alertmanager_host"):
        if var not in values:
            continue
        host = values[var]
        if not isinstance(host, str) or not _HOST.match(host.strip() or "-"):
            errors.append("%s must be an IP literal or a host name, got %s" % (var, _show(host)))
            continue
        if not _is_loopback(host) and not allow:
            errors.append("%s %s listens beyond this host: Prometheus's API and UI (and Alertmanager's) have no "
                          "authentication. Bind a loopback address (127.0.0.1, ::1) and reach it through ssh or a proxy "
                          "with authentication, or set fleet_prometheus_allow_remote: true to mean it" % (var, _show(host)))
    for var in ("fleet_prometheus_port", "fleet_prometheus_alertmanager_port"):
        error = _inv.port_error(var, values[var]) if var in values else None
        if error:
            errors.append(error)
    return errors


# Prometheus's label name (model.LabelNameRE; names starting with __ are reserved for internal use).
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# The job names of the scrape configs the role writes itself (templates/prometheus.yml.j2).
OWN_JOBS = ("prometheus", "vllm", "node", "vllm_router")


def _url_errors(where, url):
    """Prometheus's remote_write url: an absolute http(s) URL with a host (config.URL / url.Parse)."""
    import urllib.parse  # pylint: disable=import-outside-toplevel

    if not isinstance(url, str) or not url.strip() or any(c.isspace() for c in url):
        return ["%s: url must be an http(s):// URL without spaces, got %s" % (where, _show(url))]
    parts = urllib.parse.urlsplit(url)
    try:
        parts.port  # pylint: disable=pointless-statement  # raises on a bad port
    except ValueError:
        return ["%s: url %s has a bad port" % (where, _show(url))]
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return ["%s: url must be an http(s):// URL with a host, got %s" % (where, _show(url))]
    return []


def fleet_prometheus_config_errors(values):
    """Errors of the operator's inputs to prometheus.yml and alertmanager.yml, as Prometheus and amtool read them:
    external label names, remote_write URLs, scrape job names (unique, not the role's own), and Alertmanager's route
    and receivers."""
    if not isinstance(values, Mapping):
        raise AnsibleFilterError("fleet_prometheus_config_errors: the input must be a mapping {variable: value}")
    errors = []
    labels = values.get("fleet_prometheus_external_labels") or {}
    if not isinstance(labels, Mapping):
        errors.append("fleet_prometheus_external_labels must be a mapping {label name: value}")
        labels = {}
    for name, value in labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            errors.append("fleet_prometheus_external_labels: %s is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, "
                          "not starting with __)" % _show(name))
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            errors.append("fleet_prometheus_external_labels: the value of %s must be a string" % _show(name))
    remote = values.get("fleet_prometheus_remote_write") or []
    for index, target in enumerate(remote if isinstance(remote, list) else []):
        where = "fleet_prometheus_remote_write[%d]" % index
        if not isinstance(target, Mapping):
            errors.append("%s must be a mapping with a url" % where)
        elif "url" in target:
            errors.extend(_url_errors(where, target["url"]))
    seen = {}
    extra = values.get("fleet_prometheus_extra_scrape_configs") or []
    for index, config in enumerate(extra if isinstance(extra, list) else []):
        if not isinstance(config, Mapping) or "job_name" not in config:
            continue
        job = config["job_name"]
        where = "fleet_prometheus_extra_scrape_configs[%d]" % index
        if job in OWN_JOBS:
            errors.append("%s: job_name %s is one of the role's own jobs (%s): Prometheus refuses two scrape configs of "
                          "one name" % (where, _show(job), ", ".join(OWN_JOBS)))
        elif job in seen:
            errors.append("%s: job_name %s is also fleet_prometheus_extra_scrape_configs[%d]'s: Prometheus refuses two "
                          "scrape configs of one name" % (where, _show(job), seen[job]))
        seen.setdefault(job, index)
    errors.extend(_alertmanager_errors(values.get("fleet_prometheus_alertmanager_config")))
    return errors


def _alertmanager_errors(config):
    """Alertmanager's config as amtool check-config reads it: a route with a receiver that receivers defines."""
    if config is None or (isinstance(config, Mapping) and not config):
        return []  # the role writes its own default
    where = "fleet_prometheus_alertmanager_config"
    if not isinstance(config, Mapping):
        return ["%s must be a mapping (Alertmanager's alertmanager.yml)" % where]
    route = config.get("route")
    if not isinstance(route, Mapping):
        return ["%s: route must be a mapping with a receiver (amtool check-config: 'no routes provided' / a route that "
                "is not a mapping), got %s" % (where, _show(route))]
    receivers = config.get("receivers")
    if not isinstance(receivers, list) or not all(isinstance(r, Mapping) and r.get("name") for r in receivers):
        return ["%s: receivers must be a list of mappings, each with a name" % where]
    names = [r["name"] for r in receivers]
    if not route.get("receiver"):
        return ["%s: route.receiver must be set (amtool: 'root route must specify a default receiver')" % where]
    if route["receiver"] not in names:
        return ["%s: route.receiver %s is not a receiver (%s)" % (where, _show(route["receiver"]), ", ".join(map(str, names)))]
    if len(set(names)) != len(names):
        return ["%s: two receivers have the same name" % where]
    return []


# ---------------------------------------------------------------------------------------------------------------
# The files the role would write, checked by their own programs in play 1 (tasks/preflight.yml)

# Keys whose values Prometheus and Alertmanager keep secret (their config.Secret / SecretURL fields): never quoted in a
# message, even when the program's own message quotes them (amtool's `parse "<webhook url>": ...` does).
_SECRET_KEY = re.compile(r"(password|secret|token|credentials|(^|_)key)$")
# ... and in Alertmanager's receivers, their URLs (webhook, chat and paging URLs carry their tokens).
_SECRET_URL_KEY = re.compile(r"(^|_)url$")
# Keys whose values are regular expressions (Prometheus's relabel configs, Alertmanager's matchers).
_REGEX_KEYS = ("regex", "match_re", "matchers", "source_matchers", "target_matchers")
# What ansible.builtin.command says when it cannot start the program (ansible-core 2.19: "Error executing command.",
# the OSError only in its traceback; older: the OSError; lookup controller_command sets failed_to_start), and what an
# older program says of a flag it lacks.
_MISSING = ("Error executing command", "No such file or directory", "Permission denied")
_TOO_OLD = ("unknown long flag", "unknown flag", "expected command but got")


def _walk(path, value, key=""):
    """(path, key, value) of every mapping key and scalar of an input, depth first."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            sub = "%s.%s" % (path, k)
            yield sub, str(k), None
            yield from _walk(sub, v, str(k))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            yield from _walk("%s[%d]" % (path, index), item, key)
    elif isinstance(value, (str, int, float)) and not isinstance(value, bool):
        yield path, key, str(value)


def _compiles(text):
    try:
        re.compile(text)
    except re.error:
        return False
    return True


def _inputs_named(message, values):
    """The input paths the program's message points at: a quoted value, an unknown field, a regex that does not compile."""
    leaves = [leaf for name, value in values.items() for leaf in _walk(name, value)]
    found = []
    unknown = re.findall(r"field (\S+) not found in type", message)
    for path, key, value in leaves:
        if value is None:
            hit = key in unknown
        elif "error parsing regexp" in message and key in _REGEX_KEYS:
            hit = not _compiles(value)
        else:
            hit = value != "" and (any(q % value in message for q in ('"%s"', "`%s`", "'%s'"))
                                   or (len(value) >= 6 and value in message))
        if hit and path not in found:
            found.append(path)
    if not found and "error parsing regexp" in message:
        found = [path for path, key, value in leaves if value is not None and key in _REGEX_KEYS]
    return found


def _secrets(values):
    """The secret strings of the inputs (by key), longest first."""
    out = {value for name, top in values.items() for _path, key, value in _walk(name, top)
           if value and (_SECRET_KEY.search(key)
                         or (name == "fleet_prometheus_alertmanager_config" and _SECRET_URL_KEY.search(key)))}
    return sorted(out, key=len, reverse=True)


def fleet_prometheus_check_errors(result):
    """Errors of one check of a file the role would write: `result` is a result of promtool or amtool on the controller
    (lookup controller_command in tasks/preflight.yml, or a registered loop of ansible.builtin.command), its item
    {check, argv, rendered, dest, values}. The error gives the
    program's message as it refers to `dest` (the path the role writes, not the rendered copy `rendered`), the secrets
    of `values` replaced by their size, and the input paths of `values` ({variable: value}, the operator's inputs to
    that file) the message points at, or all of them when it does not say.

    A program that could not run (not on the controller, too old for the check) is no error of the inputs: see
    fleet_prometheus_check_skipped."""
    if not isinstance(result, Mapping) or not isinstance(result.get("item"), Mapping):
        raise AnsibleFilterError("fleet_prometheus_check_errors: a result of lookup controller_command, with its item")
    item = result["item"]
    values = item.get("values") or {}
    if not isinstance(values, Mapping):
        raise AnsibleFilterError("fleet_prometheus_check_errors: the item's values must be {variable: value}")
    if result.get("skipped") or _check_unusable(result) or result.get("rc") == 0:
        return []
    # promtool writes its failures to stderr, amtool to stdout ("Checking 'file'  FAILED: ...") with a summary on stderr.
    lines = [re.sub(r"^Checking \S+\s+", "", line.strip()) for line in str(result.get("stdout", "")).splitlines()
             if "FAILED" in line]
    lines += [line.strip() for line in str(result.get("stderr", "") or result.get("msg", "")).splitlines()
              if line.strip() and "failed to validate" not in line and line.strip() != "non-zero return code"]
    message = "; ".join(lines) or "exit status %s" % result.get("rc")
    if item.get("rendered"):
        message = message.replace(str(item["rendered"]), str(item.get("dest", "")))
    named = _inputs_named(message, values)
    for secret in _secrets(values):
        message = message.replace(secret, "<%d characters, a secret: not shown>" % len(secret))
    given = [name for name, value in values.items() if value not in (None, "", [], {})]
    if named:
        where = "from %s" % ", ".join(named)
    elif given:
        where = "the message does not say which input: one of %s" % ", ".join(given)
    else:
        where = "none of your inputs is in this file: please report it"
    return ["%s as the role would write it is refused by `%s`: %s (%s)"
            % (item.get("dest"), item.get("check"), message[:1500], where)]


def _check_unusable(result):
    """Why the program gave no verdict: 'missing' (it could not start), 'too old' (it lacks the check), 'stopped'."""
    if result.get("failed_to_start") or (
            result.get("rc") in (2, 126, 127) and not result.get("stdout") and not result.get("stderr")
            and any(m in str(result.get("msg", "")) for m in _MISSING)):
        return "missing"
    if any(m in " ".join(str(result.get(k, "")) for k in ("msg", "stderr")) for m in _TOO_OLD):
        return "too old"
    return "stopped" if result.get("rc") == 124 and "stopped after" in str(result.get("msg", "")) else ""


def fleet_prometheus_check_skipped(result):
    """Why a check could not run on the controller ('' when it ran): its program is absent, too old, or was stopped."""
    if not isinstance(result, Mapping) or not isinstance(result.get("item"), Mapping):
        raise AnsibleFilterError("fleet_prometheus_check_skipped: a result of lookup controller_command, with its item")
    item = result["item"]
    why = {"missing": "is not on the controller (or cannot run there)", "too old": "on the controller is too old for it",
           "stopped": "took too long (%s)" % result.get("msg")}.get(_check_unusable(result))
    program = (item.get("argv") or ["?"])[0]
    return "%s (%s): %s %s" % (item.get("dest"), item.get("check"), _show(program), why) if why else ""


class FilterModule:
    """The fleet Prometheus's targets and binds."""

    def filters(self):
        return {"fleet_prometheus_targets": fleet_prometheus_targets,
                "fleet_prometheus_config_errors": fleet_prometheus_config_errors,
                "fleet_prometheus_bind_errors": fleet_prometheus_bind_errors,
                "fleet_prometheus_check_errors": fleet_prometheus_check_errors,
                "fleet_prometheus_check_skipped": fleet_prometheus_check_skipped}
