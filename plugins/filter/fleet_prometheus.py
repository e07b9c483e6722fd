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

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import show as _show
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_int as _int
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
                                 % type(groups).__name__)
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
            port = _int(get(port_var, defaults.get(port_var)), None)
            if port is None or not 1 <= port <= 65535:
                errors.append("%s %s: %s must be a port 1-65535, got %s" % (job, name, port_var, _show(get(port_var, None))))
                continue
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
        if var in values:
            port = _int(values[var], None)
            if port is None or isinstance(values[var], bool) or not 1 <= port <= 65535:
                errors.append("%s must be a port 1-65535, got %s" % (var, _show(values[var])))
    return errors


class FilterModule:
    """The fleet Prometheus's targets and binds."""

    def filters(self):
        return {"fleet_prometheus_targets": fleet_prometheus_targets,
                "fleet_prometheus_bind_errors": fleet_prometheus_bind_errors}
