# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The vllm_router role in Python: the workers the router sends to (from the inventory's GPU group or an
explicit list), the checks of the role's own variables, and the router's flags as the launcher reads them.

The docs of each filter are in the YAML file of the same name beside this one; the unit tests are
tests/unit/plugins/filter/test_vllm_router.py with the cases of tests/unit/data/vllm_router_cases.yaml.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.filter.gpuhost_checks import url_host as _url_host
from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as _inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import show as _show
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import (
    as_int as _int,
    check as _typed,
    host_var_getter,
    is_loopback as _is_loopback,
    variables as _variables,
)

# Below it a port needs CAP_NET_BIND_SERVICE, which the router's unit never grants.
_PRIVILEGED_PORTS = 1024
_WILDCARDS = ("", "0.0.0.0", "::", "[::]")
# A host name or an IP literal (IPv6 with or without brackets): nothing that would split a flag or a URL.
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._:-]+)$")
_URL = re.compile(r"^https?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)(:[0-9]{1,5})?(/[A-Za-z0-9._~/-]*)?$")
_VERSION = re.compile(r"^(0|[1-9][0-9]*)([.](0|[1-9][0-9]*)){2,3}([.]post(0|[1-9][0-9]*))?$")
_DISTRIBUTION = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
# A URL path on the workers (the health check endpoint).
_URL_PATH = re.compile(r"^/[A-Za-z0-9._/-]*$")
_FLAG = re.compile(r"^[a-z][a-z0-9_-]*$")

# The flags the role sets from its own variables (vllm_router_extra_args may not set them), and the secret.
OWNED_FLAGS = {
    "host": "vllm_router_host", "port": "vllm_router_port", "worker-urls": "vllm_router_worker_urls (or the worker group)",
    "policy": "vllm_router_policy", "api-key": "vllm_router_api_key or vllm_router_api_key_file (the root-only secrets file)",
    "prometheus-host": "vllm_router_prometheus_host", "prometheus-port": "vllm_router_prometheus_port",
    "log-level": "vllm_router_log_level", "request-timeout-secs": "vllm_router_request_timeout_secs",
    "health-check-endpoint": "vllm_router_health_check_endpoint",
    "health-check-interval-secs": "vllm_router_health_check_interval_secs",
    "health-check-timeout-secs": "vllm_router_health_check_timeout_secs",
    "health-failure-threshold": "vllm_router_health_failure_threshold",
    "health-success-threshold": "vllm_router_health_success_threshold",
    "cb-failure-threshold": "vllm_router_cb_failure_threshold", "cb-success-threshold": "vllm_router_cb_success_threshold",
    "cb-timeout-duration-secs": "vllm_router_cb_timeout_duration_secs",
    "cb-window-duration-secs": "vllm_router_cb_window_duration_secs",
    "retry-max-retries": "vllm_router_retry_max_retries", "retry-initial-backoff-ms": "vllm_router_retry_initial_backoff_ms",
    "retry-max-backoff-ms": "vllm_router_retry_max_backoff_ms",
    "worker-startup-timeout-secs": "vllm_router_worker_startup_timeout_secs",
    "worker-startup-check-interval": "vllm_router_worker_startup_check_interval_secs",
}

# Modes and outputs this role does not run the router in (it routes to static workers and logs to the journal).
NOT_HERE = {
    "mini-lb": "the Python debugging balancer", "vllm-pd-disaggregation": "prefill/decode disaggregation",
    "prefill": "prefill/decode disaggregation", "decode": "prefill/decode disaggregation",
    "service-discovery": "Kubernetes service discovery", "selector": "Kubernetes service discovery",
    "prefill-selector": "Kubernetes service discovery", "decode-selector": "Kubernetes service discovery",
    "service-discovery-port": "Kubernetes service discovery", "service-discovery-namespace": "Kubernetes service discovery",
    "vllm-discovery-address": "ZMQ service discovery", "log-dir": "log files (the unit's log is the journal)",
}

# {variable: minimum}: the whole numbers of the role (the argument specs type them; these are the ranges).
MINIMUMS = {
    "vllm_router_health_check_interval_secs": 1, "vllm_router_health_check_timeout_secs": 1,
    "vllm_router_health_failure_threshold": 1, "vllm_router_health_success_threshold": 1,
    "vllm_router_cb_failure_threshold": 1, "vllm_router_cb_success_threshold": 1,
    "vllm_router_cb_timeout_duration_secs": 1, "vllm_router_cb_window_duration_secs": 1,
    "vllm_router_retry_max_retries": 1, "vllm_router_retry_initial_backoff_ms": 1, "vllm_router_retry_max_backoff_ms": 1,
    "vllm_router_request_timeout_secs": 1, "vllm_router_worker_startup_timeout_secs": 1,
    "vllm_router_worker_startup_check_interval_secs": 1, "vllm_router_restart_sec": 0, "vllm_router_wait_timeout": 1,
    "vllm_router_session_ttl_secs": 1, "vllm_router_keep_venvs": 1,
}
MAXIMUMS = {"vllm_router_session_ttl_secs": 31536000}


def _text(value):
    return "" if value is None else str(value).strip()


def _port_errors(name, value):
    error = _inv.port_error(name, value, _PRIVILEGED_PORTS, "the router runs as an unprivileged user without "
                            "CAP_NET_BIND_SERVICE; put a reverse proxy in front for 80/443")
    return [error] if error else []


def _host_errors(name, value):
    text = _text(value)
    if not isinstance(value, str) or not _HOST.match(text):
        return ["%s must be an IP address or a host name (no spaces, no scheme, no port), got %s" % (name, _show(value))]
    return []


def _is_wildcard(host):
    return _text(host) in _WILDCARDS


def _same_listener(host_a, host_b):
    """True when two binds can collide on one port: the same address, or either a wildcard."""
    a, b = _text(host_a).strip("[]"), _text(host_b).strip("[]")
    return a == b or _is_wildcard(a) or _is_wildcard(b) or (_is_loopback(a) and _is_loopback(b))


def _url_errors(name, urls):
    if isinstance(urls, str) or not isinstance(urls, list):
        return ["%s must be a list of worker URLs like http://10.0.0.11:8000, got %s" % (name, _show(urls))]
    errors = []
    for index, url in enumerate(urls):
        if not isinstance(url, str) or not _URL.match(url) or url.endswith("/"):
            errors.append("%s[%d] must be a worker URL like http://10.0.0.11:8000 (http or https, a host, an optional "
                          "port, no trailing slash, no spaces), got %s" % (name, index, _show(url)))
            continue
        port = re.search(r":([0-9]+)(/|$)", url.split("://", 1)[1])
        error = _inv.port_error("the port of %s" % url, port.group(1)) if port else None
        if error:
            errors.append("%s[%d]: %s" % (name, index, error))
    duplicates = sorted({u for u in urls if isinstance(u, str) and urls.count(u) > 1})
    if duplicates:
        errors.append("%s lists %s more than once: each worker once" % (name, ", ".join(duplicates)))
    return errors


def _extra_args_errors(extra, flags):
    if not isinstance(extra, Mapping):
        return ["vllm_router_extra_args must be a mapping of vllm-router flag -> value (e.g. {max-concurrent-requests: 256}), "
                "got %s" % _show(extra)]
    known = {f[2:] for f in flags if isinstance(f, str) and f.startswith("--")}
    errors = []
    for key, value in extra.items():
        flag = str(key).lstrip("-").replace("_", "-")
        if not _FLAG.match(flag) or flag not in known:
            close = sorted(k for k in known if flag and (flag in k or k in flag))[:3]
            errors.append("vllm_router_extra_args: %s is not a flag of vllm-router 0.1.17 (roles/vllm_router/files/"
                          "vllm-router-0.1.17-flags.txt)%s" % (_show(key), "; did you mean %s?" % ", ".join(close) if close else ""))
            continue
        if flag in OWNED_FLAGS:
            errors.append("vllm_router_extra_args: %s is set by the role: use %s" % (flag, OWNED_FLAGS[flag]))
            continue
        if flag in NOT_HERE:
            errors.append("vllm_router_extra_args: %s is not supported by this role (%s); it runs the router in front of "
                          "static vLLM workers" % (flag, NOT_HERE[flag]))
            continue
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, (Mapping, list)) or (item is None and not isinstance(value, bool)):
                errors.append("vllm_router_extra_args: %s must be a single value, a list of values or true/false, got %s"
                              % (flag, _show(item)))
            elif _inv.line_end(str(item)):
                errors.append("vllm_router_extra_args: %s must be a single-line value, got %s" % (flag, _show(str(item))))
    return errors


def _bind_errors(v):
    host = v.get("vllm_router_host")
    if not isinstance(host, str) or not _HOST.match(_text(host)) or _is_loopback(host):
        return []  # not an address (refused as such), or loopback
    errors = []
    for name in ("vllm_router_allow_remote_admin", "vllm_router_allow_open_api"):
        error = _typed(name, v.get(name, False))[1]
        if error:
            return [error]
    if not _typed("vllm_router_allow_remote_admin", v.get("vllm_router_allow_remote_admin", False))[0]:
        errors.append("vllm_router_host %s listens beyond this box, where vllm-router 0.1.17 serves its worker management "
                      "(/add_worker, /remove_worker, /list_workers) with no authentication on the same port: anyone who "
                      "reaches it can add a worker that then receives the prompts and the clients' API keys. Bind a loopback "
                      "address (127.0.0.1) and put a reverse proxy in front that passes only /v1 and /health, or set "
                      "vllm_router_allow_remote_admin: true to mean it (a network only your clients reach)" % _show(host))
    if not v.get("workers_have_key") and not _typed("vllm_router_allow_open_api", v.get("vllm_router_allow_open_api", False))[0]:
        errors.append("vllm_router_host %s listens beyond this box and the workers have no API key: the router passes each "
                      "client's Authorization header through and the boxes check it, so anyone who reaches the router gets an "
                      "open /v1. Set vllm_service_api_key (or vllm_service_api_key_file) for the worker group, or "
                      "vllm_router_api_key when the workers are listed in vllm_router_worker_urls, bind a loopback address, "
                      "or set vllm_router_allow_open_api: true to mean it" % _show(host))
    return errors


def vllm_router_var_errors(values):
    """Error strings for the role's variables ({name: value} plus workers_have_key, api_key_file_exists, flags;
    empty when all is well). Missing optional names are not checked."""
    values = _variables(values, "vllm_router_var_errors")
    v = values
    errors = []
    for name in ("vllm_router_host", "vllm_router_prometheus_host"):
        if name in v:
            errors.extend(_host_errors(name, v[name]))
    for name in ("vllm_router_port", "vllm_router_prometheus_port"):
        if name in v:
            errors.extend(_port_errors(name, v[name]))
    if (all(n in v for n in ("vllm_router_host", "vllm_router_port", "vllm_router_prometheus_host", "vllm_router_prometheus_port"))
            and _int(v["vllm_router_port"], None) == _int(v["vllm_router_prometheus_port"], -1)
            and _same_listener(v["vllm_router_host"], v["vllm_router_prometheus_host"])):
        errors.append("vllm_router_port and vllm_router_prometheus_port are both %s on the same address: the API and the "
                      "metrics need a port each" % v["vllm_router_port"])
    if "vllm_router_version" in v:
        version = v["vllm_router_version"]
        if not isinstance(version, str) or not _VERSION.match(version):
            errors.append("vllm_router_version must be a PEP 440 release like \"0.1.17\" (N.N.N or N.N.N.N, optionally .postN; "
                          "quote it in YAML, no ranges), got %s" % _show(version))
    if "vllm_router_package" in v:
        package = v["vllm_router_package"]
        if not isinstance(package, str) or not _DISTRIBUTION.match(package):
            errors.append("vllm_router_package must be a distribution name (letters, digits, '.', '_', '-'), got %s" % _show(package))
    for name in sorted(MINIMUMS):
        if name not in v:
            continue
        number = _int(v[name], None)
        if number is None or isinstance(v[name], bool) or number < MINIMUMS[name] or number > MAXIMUMS.get(name, number):
            bound = "from %d to %d" % (MINIMUMS[name], MAXIMUMS[name]) if name in MAXIMUMS else ">= %d" % MINIMUMS[name]
            errors.append("%s must be a whole number %s, got %s" % (name, bound, _show(v[name])))
    if ("vllm_router_retry_initial_backoff_ms" in v and "vllm_router_retry_max_backoff_ms" in v
            and _int(v["vllm_router_retry_max_backoff_ms"], 0) < _int(v["vllm_router_retry_initial_backoff_ms"], 0)):
        errors.append("vllm_router_retry_max_backoff_ms (%s) must be >= vllm_router_retry_initial_backoff_ms (%s)"
                      % (v["vllm_router_retry_max_backoff_ms"], v["vllm_router_retry_initial_backoff_ms"]))
    if "vllm_router_health_check_endpoint" in v:
        endpoint = v["vllm_router_health_check_endpoint"]
        if not isinstance(endpoint, str) or not _URL_PATH.match(endpoint):
            errors.append("vllm_router_health_check_endpoint must be a path on the workers like /health (vLLM answers 200 "
                          "there once its engine is up), got %s" % _show(endpoint))
    for name in ("vllm_router_wheelhouse", "vllm_router_index_url"):
        value = v.get(name, "")
        if name not in v or value == "":
            continue
        if name == "vllm_router_wheelhouse" and not (_inv.is_plain_path(value) and len(value) > 1):
            errors.append("vllm_router_wheelhouse must be '' (use the package index) or %s ON THE TARGET, got %s"
                          % (_inv.PATH_FORM, _show(value)))
        if name == "vllm_router_index_url" and not (isinstance(value, str) and re.match(r"^(https?|file)://\S+$", value)):
            errors.append("vllm_router_index_url must be '' or an http(s):// or file:// URL, got %s" % _show(value))
    if "vllm_router_user" in v and v["vllm_router_user"] == "root":
        errors.append("vllm_router_user must not be root (the router is a web server: it runs as the unprivileged account "
                      "the role creates), got \"root\"")
    if "vllm_router_worker_urls" in v:
        errors.extend(_url_errors("vllm_router_worker_urls", v["vllm_router_worker_urls"]))
    if "vllm_router_extra_args" in v:
        errors.extend(_extra_args_errors(v["vllm_router_extra_args"], v.get("flags") or []))
    key, key_file = _text(v.get("vllm_router_api_key")), _text(v.get("vllm_router_api_key_file"))
    if key and key_file:
        errors.append("set only one of vllm_router_api_key and vllm_router_api_key_file")
    elif key_file and not v.get("api_key_file_exists"):
        errors.append("vllm_router_api_key_file: no such file on the controller: %s" % key_file)
    errors.extend(_bind_errors(v))
    return errors


def _worker(hostvars, name, default_host, default_port):
    """The worker's bind (vllm_service_host, vllm_service_port) and inventory address (ansible_host)."""
    get = host_var_getter(hostvars, name)
    return {"name": name, "host": get("vllm_service_host", default_host), "port": get("vllm_service_port", default_port),
            "address": get("ansible_host", name), "api_key": _text(get("vllm_service_api_key", "")),
            "api_key_file": _text(get("vllm_service_api_key_file", ""))}


def _workers(names, hostvars, router_host, explicit_urls, group, default_host, default_port):
    """{urls, errors, api_keys: [{host, key}], api_key_files: [{host, path}], no_key: [host]}."""
    if explicit_urls:
        return {"urls": list(explicit_urls), "errors": _url_errors("vllm_router_worker_urls", list(explicit_urls)),
                "api_keys": [], "api_key_files": [], "no_key": []}
    if not names:
        return {"urls": [], "errors": ["no worker to route to: the group %s (vllm_router_worker_group) has no hosts in this "
                                       "inventory and vllm_router_worker_urls is empty" % _show(group)],
                "api_keys": [], "api_key_files": [], "no_key": []}
    urls, errors, keys, key_files, no_key = [], [], [], [], []
    for name in names:
        w = _worker(hostvars, name, default_host, default_port)
        error = _inv.port_error("vllm_service_port", w["port"])
        if error:
            errors.append("worker %s: %s" % (name, error))
            continue
        port = int(w["port"])
        host = _text(w["host"])
        if _is_loopback(host):
            if name != router_host:
                errors.append("worker %s: vllm_service_host %s listens on loopback only, so the router on %s cannot reach it. "
                              "Bind it beyond loopback with an API key (vllm_service_host: 0.0.0.0 or the box's address, and "
                              "vllm_service_api_key or vllm_service_api_key_file, in the group_vars of %s), or list the URLs "
                              "in vllm_router_worker_urls" % (name, _show(host), router_host, group))
                continue
            address = host
        elif _is_wildcard(host):
            # The router on the box itself reaches a wildcard bind on loopback; another box by its inventory address.
            address = ("::1" if host.strip("[]") == "::" else "127.0.0.1") if name == router_host else _text(w["address"])
        else:
            address = host
        if not _HOST.match(address):
            errors.append("worker %s: %s is not an address the router can use (ansible_host or vllm_service_host)"
                          % (name, _show(address)))
            continue
        urls.append("http://%s:%d" % (_url_host(address), port))
        if w["api_key_file"]:
            key_files.append({"host": name, "path": w["api_key_file"]})
        elif w["api_key"]:
            keys.append({"host": name, "key": w["api_key"]})
        else:
            no_key.append(name)
    duplicates = sorted({u for u in urls if urls.count(u) > 1})
    if duplicates:
        errors.append("the workers of %s resolve to the same URL %s: give each box its own ansible_host or "
                      "vllm_service_host/vllm_service_port" % (_show(group), ", ".join(duplicates)))
    return {"urls": urls, "errors": errors, "api_keys": keys, "api_key_files": key_files, "no_key": no_key}


def vllm_router_workers(names, hostvars, router_host, explicit_urls=None, group="gpu_servers",
                        default_host="127.0.0.1", default_port=8000):
    """The workers of the router: {urls, errors, api_keys: [{host, key}], api_key_files: [{host, path}], no_key: [host]}.

    names: the hosts of the worker group (groups[vllm_router_worker_group]); hostvars: Ansible's hostvars (or a
    mapping {host: {var: value}}); router_host: the router's inventory_hostname; explicit_urls: vllm_router_worker_urls
    (when not empty they are the workers, the group is not read); default_host/default_port: vllm_service's defaults.
    """
    if names is None:
        names = []
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise AnsibleFilterError("vllm_router_workers: the input must be a list of host names, got %s" % _inv.type_name(names))
    explicit = explicit_urls if explicit_urls is not None else []
    if isinstance(explicit, str):
        return {"urls": [], "errors": _url_errors("vllm_router_worker_urls", explicit), "api_keys": [], "api_key_files": [], "no_key": []}
    return _workers(list(names), hostvars if hostvars is not None else {}, str(router_host), list(explicit), group,
                    default_host, default_port)


def vllm_router_drain_targets(box, routers, hostvars, groups, default_router_host="127.0.0.1",
                              default_router_port=30000, default_host="127.0.0.1", default_port=8000):
    """The routers that route to `box`, each with its admin URL (asked on the router host itself) and the box's URL
    as that router knows it: [{router, admin_url, worker_url}].

    routers: the hosts of the router group (groups['vllm_routers']); a router routes to `box` when `box` is in its
    vllm_router_worker_group (default gpu_servers) and it has no explicit vllm_router_worker_urls (those are the
    operator's to manage). hostvars/groups: Ansible's; the defaults are vllm_router's and vllm_service's.
    """
    if routers is None:
        routers = []
    if isinstance(routers, str) or not isinstance(routers, (list, tuple)):
        raise AnsibleFilterError("vllm_router_drain_targets: routers must be a list of host names, got %s"
                                 % _inv.type_name(routers))
    hostvars = hostvars if hostvars is not None else {}
    groups = groups if isinstance(groups, Mapping) else {}
    out = []
    for router in routers:
        get = host_var_getter(hostvars, router)
        if get("vllm_router_worker_urls", []):
            continue
        group = _text(get("vllm_router_worker_group", "gpu_servers"))
        if box not in (groups.get(group) or []):
            continue
        workers = _workers([box], hostvars, str(router), [], group, default_host, default_port)
        if workers["errors"] or not workers["urls"]:
            continue
        # Asked on the router host itself: url_host makes a wildcard bind the loopback address of its family.
        host = _text(get("vllm_router_host", default_router_host))
        port = _int(get("vllm_router_port", default_router_port), default_router_port)
        out.append({"router": str(router), "admin_url": "http://%s:%d" % (_url_host(host), port),
                    "worker_url": workers["urls"][0]})
    return out


def vllm_router_api_key(workers, file_keys=None, router_key=""):
    """The key the router sends to the workers, and whether the workers check one: {key, workers_have_key, errors}.

    workers: vllm_router_workers' answer; file_keys: {path: content} of its api_key_files that could be read (read on
    the controller with the file lookup; a file not in it is left out here, the caller reports it); router_key:
    vllm_router_api_key (or the content of vllm_router_api_key_file). The messages name hosts and variables, never a key.
    """
    if not isinstance(workers, Mapping):
        raise AnsibleFilterError("vllm_router_api_key: the input must be vllm_router_workers' answer, got %s" % _inv.type_name(workers))
    contents = file_keys if file_keys is not None else {}
    if not isinstance(contents, Mapping):
        raise AnsibleFilterError("vllm_router_api_key: file_keys must be a mapping {path: content}, got %s" % _inv.type_name(contents))
    read = [(f["host"], contents[f["path"]]) for f in workers.get("api_key_files") or [] if contents.get(f["path"]) is not None]
    found = [(k["host"], _text(k["key"])) for k in workers.get("api_keys") or []] + [(h, _text(c)) for h, c in read]
    no_key = sorted(set(workers.get("no_key") or []) | {h for h, key in found if not key})
    found = [(host, key) for host, key in found if key]
    errors = []
    distinct = sorted({key for _host, key in found})
    if found and no_key:
        errors.append("some workers have an API key (%s) and others none (%s): the router passes each client's Authorization "
                      "header to whichever box serves the request, so every box needs the same key "
                      "(vllm_service_api_key or vllm_service_api_key_file in the group_vars of the worker group)"
                      % (", ".join(sorted({h for h, _key in found})), ", ".join(no_key)))
    if len(distinct) > 1:
        groups = sorted(", ".join(sorted(h for h, k in found if k == key)) for key in distinct)
        errors.append("the workers have %d different API keys (hosts %s): the router passes each client's Authorization "
                      "header to whichever box serves the request, so every box needs the same key"
                      % (len(distinct), "; ".join(groups)))
    mine = _text(router_key)
    if mine and distinct and mine not in distinct:
        errors.append("vllm_router_api_key (or vllm_router_api_key_file) differs from the workers' vllm_service_api_key: the "
                      "router's own calls to the boxes would be refused (401). Leave it empty to use the workers' key")
    key = mine or (distinct[0] if len(distinct) == 1 else "")
    return {"key": key, "workers_have_key": bool(found) or bool(mine), "errors": errors}


def vllm_router_argv(settings):
    """The router's flags, one line of argv words per flag: {flag: value} -> [['--flag', 'value'], ...].

    A key's underscores become dashes; a list value gives its items as words; true gives the bare flag; false,
    null and an empty list leave the flag out. The order of the mapping is kept.
    """
    if not isinstance(settings, Mapping):
        raise AnsibleFilterError("vllm_router_argv: the input must be a mapping {flag: value}, got %s" % _inv.type_name(settings))
    lines = []
    for key, value in settings.items():
        flag = "--" + str(key).lstrip("-").replace("_", "-")
        if value is None or value is False or (isinstance(value, list) and not value):
            continue
        if value is True:
            lines.append([flag])
        elif isinstance(value, list):
            lines.append([flag] + [str(item) for item in value])
        elif isinstance(value, Mapping):
            raise AnsibleFilterError("vllm_router_argv: %s must be a value or a list of values, got a mapping" % flag)
        else:
            lines.append([flag, str(value)])
    return lines


class FilterModule:
    """vllm_router filters."""

    def filters(self):
        return {
            "vllm_router_var_errors": vllm_router_var_errors,
            "vllm_router_workers": vllm_router_workers,
            "vllm_router_drain_targets": vllm_router_drain_targets,
            "vllm_router_api_key": vllm_router_api_key,
            "vllm_router_argv": vllm_router_argv,
        }
