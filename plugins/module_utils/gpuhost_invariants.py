# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The host invariants every role keeps (docs/CONTRACTS.md "Host invariants"), in one place.

- Owned paths: a directory or file a role creates, chowns, chmods or removes (an option of ``type: path`` in its
  meta/argument_specs.yml) is a plain absolute path, never a system directory or an ancestor of one
  (SYSTEM_DIRS), never inside a virtual file system, and (read on the target) never a path a distribution package
  owns unless it is the role's own default (node exporter's textfile directory of its package).
- Listeners: one table per host of every port the roles of the host open (LISTENERS); two of ours never share a
  port and an address family; a port taken by a process that is not ours is refused with its name.
- The forms of what lands in a unit, a file or a command line: a path (PATH_RE), a unit name (UNIT_RE), a single
  line (LINE_ENDS), a port (port_error).
- Secrets: an option with ``no_log: true`` in its argument spec is never shown (its name and length only); a key
  or token's characters follow the one rule of the place it lands (SECRET_FORMS: an env file and a header, a quoted
  nginx string, a client's key at the door).

Standard library only: the filters (controller) and the module gpuhost_host_claims (target) both import it.
"""
from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping

# An absolute path of plain characters (written into units, shell words and nginx/Prometheus files): no spaces or
# quotes, no `%` (a systemd specifier), no `$`, `;`, backslash, glob character or line break; no `..` component.
PATH_RE = re.compile(r"^/[A-Za-z0-9._/-]+$")
PATH_FORM = ("an absolute path of letters, digits and . _ / - (^/[A-Za-z0-9._/-]+$; no spaces, quotes, % specifiers "
             "or .. components)")

# A systemd unit name: systemd's unit name characters (unit_name_is_valid()) but the backslash of its escapes; the first
# one is not '-' or '.', so that the name is never read as an option of systemctl. A template (name@.type) has an
# empty instance.
UNIT_TYPES = ("service", "socket", "device", "mount", "automount", "swap", "target", "path", "timer", "slice", "scope")
UNIT_RE = re.compile(r"^[A-Za-z0-9:_][A-Za-z0-9:_.-]*(@[A-Za-z0-9:_.-]*)?\.(?P<type>[a-z]+)$")
UNIT_MAX = 255

# The characters that end a line somewhere a role's string lands: systemd's unit and env file parsers (\n, \r, NUL),
# YAML (NEL, U+2028, U+2029) and Python's str.splitlines() (\v, \f, \x1c-\x1e), which the roles' own readers use.
# Named in messages (a CR is invisible in a terminal).
LINE_ENDS = {"\n": "LF (\\n)", "\r": "CR (\\r)", "\x00": "NUL (\\0)", "\x0b": "VT (\\v)", "\x0c": "FF (\\f)",
             "\x1c": "U+001C (FILE SEPARATOR)", "\x1d": "U+001D (GROUP SEPARATOR)", "\x1e": "U+001E (RECORD SEPARATOR)",
             "\x85": "NEL (U+0085)", "\u2028": "U+2028 (LINE SEPARATOR)", "\u2029": "U+2029 (PARAGRAPH SEPARATOR)"}
_LINE_END_RE = re.compile("[%s]" % "".join(LINE_ENDS))


# bool before int: a bool is an int to isinstance.
_KINDS = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (Mapping, "dict"), (list, "list"),
          (type(None), "null"))


def type_name(value):
    """The YAML-ish type name of a value (ansible-core 2.19 hands filters tagged subclasses of the builtins,
    so the class name itself would say _AnsibleTaggedStr or _AnsibleLazyTemplateList)."""
    for kind, name in _KINDS:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def is_unit(name, types=UNIT_TYPES, template=True):
    """True for a unit name of the one form (UNIT_RE, at most UNIT_MAX characters) whose type is one of ``types``;
    a template (name@.type) only with ``template``."""
    match = UNIT_RE.fullmatch(name) if isinstance(name, str) else None
    return bool(match and len(name) <= UNIT_MAX and match.group("type") in types and (template or "@." not in name))


def line_end(text):
    """(position, name) of the first character of ``text`` that ends a line (LINE_ENDS), else None."""
    match = _LINE_END_RE.search(text)
    return (match.start(), LINE_ENDS[match.group()]) if match else None


# The system's own directories: the Filesystem Hierarchy Standard 3.0 (chapters 3-6: the root, /usr, /var, /run
# and their required and optional subdirectories) and systemd's file-hierarchy(7) (the same tree as systemd
# names it, with /efi, /etc/systemd's unit dirs, /var/lib/private...), plus the directories of the programs the
# collection configures (nginx, Prometheus, the system's TLS trust store, sudo, PAM, apt). A role may not own one
# of these or an ancestor of one (taking `/var` would re-mode every service's state).
SYSTEM_DIRS = frozenset("""
/ /bin /boot /dev /efi /etc /home /lib /lib32 /lib64 /libx32 /media /mnt /opt /proc /root /run /sbin /srv /sys /tmp
/usr /usr/bin /usr/include /usr/lib /usr/lib32 /usr/lib64 /usr/libexec /usr/local /usr/local/bin /usr/local/etc
/usr/local/games /usr/local/include /usr/local/lib /usr/local/libexec /usr/local/man /usr/local/sbin
/usr/local/share /usr/local/src /usr/sbin /usr/share /usr/share/doc /usr/share/man /usr/src /usr/games
/var /var/account /var/backups /var/cache /var/crash /var/games /var/lib /var/lib/private /var/lib/systemd
/var/local /var/lock /var/log /var/log/private /var/mail /var/opt /var/run /var/spool /var/tmp /var/www
/run/lock /run/log /run/user /run/systemd /run/credentials
/etc/default /etc/opt /etc/sgml /etc/xml /etc/skel /etc/X11 /etc/systemd /etc/systemd/system /etc/systemd/user
/etc/systemd/network /etc/tmpfiles.d /etc/sysctl.d /etc/modules-load.d /etc/udev /etc/ssl /etc/ssl/certs
/etc/ssl/private /etc/pki /etc/ca-certificates /etc/sudoers.d /etc/pam.d /etc/security /etc/apt /etc/cron.d
/etc/profile.d /etc/ld.so.conf.d /etc/logrotate.d /etc/nginx /etc/nginx/conf.d /etc/nginx/sites-enabled
/etc/nginx/sites-available /etc/prometheus /var/lib/prometheus /var/log/nginx /var/lib/nginx
""".split())
# The system's own files a role could overwrite or re-mode through a file variable.
SYSTEM_FILES = frozenset("""
/etc/passwd /etc/group /etc/shadow /etc/gshadow /etc/sudoers /etc/hosts /etc/hostname /etc/fstab /etc/resolv.conf
/etc/os-release /etc/environment /etc/profile /etc/machine-id /etc/ld.so.conf /etc/nsswitch.conf
""".split())
# Virtual file systems: nothing under them is owned by anyone.
VIRTUAL_DIRS = ("/proc", "/sys", "/dev")
WHY_SYSTEM = ("the system's own directories (FHS 3.0, systemd's file-hierarchy(7)) are never taken: the role would "
              "create, chown, chmod or remove it")


def is_plain_path(value):
    """True for a path of the one form: PATH_RE and no `..` component."""
    return isinstance(value, str) and bool(PATH_RE.fullmatch(value)) and ".." not in value.split("/")


def normal_path(path):
    """The path with repeated and trailing slashes dropped ('/etc//' -> '/etc')."""
    return re.sub("/+", "/", path).rstrip("/") or "/"


def system_path_reason(path):
    """Why a role may not own this (normalised, plain) path: None when it may."""
    if path in SYSTEM_DIRS:
        return "%s is a system directory" % path
    if path in SYSTEM_FILES:
        return "%s is a system file" % path
    for virtual in VIRTUAL_DIRS:
        if path.startswith(virtual + "/"):
            return "%s is inside the virtual file system %s" % (path, virtual)
    under = sorted(d for d in SYSTEM_DIRS if d.startswith(path + "/"))
    if under:
        return "%s is an ancestor of the system director%s %s" % (
            path, "y" if len(under) == 1 else "ies", ", ".join(under[:3]) + (", ..." if len(under) > 3 else ""))
    return None


def owned_path_errors(values, allow_empty=()):
    """Error strings for the owned paths ({variable: path}): the form, then the system directories. An empty value
    is refused unless the variable is in allow_empty (it means "none", e.g. no download dir)."""
    errors = []
    for name in sorted(values, key=str):
        value = values[name]
        if not isinstance(value, str):
            errors.append("%s must be %s, got a %s" % (name, PATH_FORM, type_name(value)))
            continue
        if value == "":
            if name not in allow_empty:
                errors.append("%s must be set (it is empty)" % name)
            continue
        if not is_plain_path(value) and value.strip("/"):
            errors.append("%s must be %s, got %s" % (name, PATH_FORM, show(value)))
            continue
        reason = system_path_reason(normal_path(value))
        if reason:
            errors.append("%s=%s: %s; %s" % (name, value, reason, WHY_SYSTEM))
    return errors


def parse_dpkg_search(text):
    """{path: [package, ...]} from `dpkg-query -S PATH...` (lines 'pkg1, pkg2:arch: /path'; diversions skipped)."""
    owners = {}
    for line in text.splitlines():
        if line.startswith(("diversion ", "dpkg-query:")) or ": /" not in line:
            continue
        packages, path = line.rsplit(": /", 1)
        owners.setdefault("/" + path, []).extend(p.strip().split(":")[0] for p in packages.split(",") if p.strip())
    return owners


def package_path_errors(values, owners, defaults=None):
    """Error strings for the owned paths ({variable: path}) that a distribution package owns ({path: [package]}, read
    on the target); a variable left at its role's default (defaults: {variable: default}) is the design's choice."""
    defaults = defaults or {}
    errors = []
    for name in sorted(values, key=str):
        value = values[name]
        if not isinstance(value, str) or not value:
            continue
        path = normal_path(value)
        packages = owners.get(path) or owners.get(value)
        if packages and normal_path(str(defaults.get(name, ""))) != path:
            names = sorted(set(packages))
            shown = ", ".join(names[:3]) + (" and %d more" % (len(names) - 3) if len(names) > 3 else "")
            errors.append("%s=%s: the distribution package%s %s own%s it (read on the target); the role would "
                          "create, chown, chmod or remove it: choose a directory of its own"
                          % (name, value, "s" if len(names) > 1 else "", shown, "" if len(names) > 1 else "s"))
    return errors


# ---------------------------------------------------------------------------------------------------------------
# Listeners

# Every port a role opens: (role, what listens, host variable, port variable, unit variable or unit name, the
# variable that switches it on (None: always when the role runs on the host)).
LISTENERS = (
    ("vllm_service", "vLLM", "vllm_service_host", "vllm_service_port", "$vllm_service_unit_name", None),
    ("vllm_router", "vLLM's router", "vllm_router_host", "vllm_router_port", "$vllm_router_unit_name", None),
    ("vllm_router", "the router's metrics", "vllm_router_prometheus_host", "vllm_router_prometheus_port",
     "$vllm_router_unit_name", None),
    ("front_door", "the front door (nginx)", "front_door_listen_host", "front_door_port", "nginx.service",
     "front_door_enabled"),
    ("node_metrics", "node exporter", "node_metrics_host", "node_metrics_port", "prometheus-node-exporter.service",
     None),
    ("fleet_prometheus", "Prometheus", "fleet_prometheus_host", "fleet_prometheus_port", "prometheus.service", None),
    ("fleet_prometheus", "Alertmanager", "fleet_prometheus_alertmanager_host", "fleet_prometheus_alertmanager_port",
     "prometheus-alertmanager.service", "fleet_prometheus_alertmanager"),
)
FAMILIES = {4: "IPv4", 6: "IPv6"}


def _truthy(value):
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on", "y", "t")
    return bool(value)


def bind_kind(host):
    """(families, address or None): the address families a bind listens on and its literal address (None: every
    address of the family for a wildcard, or a host name whose addresses are not known here)."""
    text = str(host).strip().strip("[]") if host is not None else ""
    if text in ("", "0.0.0.0"):
        return {4}, None
    if text == "::":
        return {4, 6}, None  # Linux's default (net.ipv6.bindv6only=0): [::] takes IPv4 too
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        if text.lower() in ("localhost", "ip6-localhost", "localhost.localdomain"):
            return {4, 6}, "loopback"
        return {4, 6}, None
    return {address.version}, address.compressed


def _overlap(one, other):
    families = one[0] & other[0]
    if not families:
        return set()
    if one[1] is None or other[1] is None or one[1] == other[1]:
        return families
    if "loopback" in (one[1], other[1]):
        literal = other[1] if one[1] == "loopback" else one[1]
        if literal != "loopback" and ipaddress.ip_address(literal).is_loopback:
            return families
    return set()


def listener_table(values, roles):
    """The listeners of a host: [{role, what, host_var, port_var, host, port, unit}] for the roles that run there
    (values: the variables of the host, typed)."""
    table = []
    for role, what, host_var, port_var, unit, switch in LISTENERS:
        if role not in roles or host_var not in values or port_var not in values:
            continue
        if switch is not None and not _truthy(values.get(switch, False)):
            continue
        if unit.startswith("$"):
            unit = values.get(unit[1:]) or ""
        table.append({"role": role, "what": what, "host_var": host_var, "port_var": port_var,
                      "host": values[host_var], "port": values[port_var], "unit": str(unit)})
    return table


def _port(value):
    if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


PORT_MAX = 65535


def port_error(name, value, low=1, why="", strict=False):
    """The one port rule: None for a whole number from ``low`` (1; 1024 for a program without CAP_NET_BIND_SERVICE)
    to 65535 (an int or its text: -e gives strings; a bool is not a port; ``strict``: an int only, as a YAML file
    must give it), else "<name> must be a port <low>-65535 [why], got <value>"."""
    port = _port(value) if not strict or (isinstance(value, int) and not isinstance(value, bool)) else None
    if port is not None and low <= port <= PORT_MAX:
        return None
    return "%s must be a port %d-%d%s, got %s" % (name, low, PORT_MAX, " (%s)" % why if why else "", show(value))


def _label(entry):
    return "%s=%s (%s, %s=%s)" % (entry["port_var"], entry["port"], entry["what"], entry["host_var"], entry["host"])


def listener_errors(table, live=None):
    """Error strings: two listeners of the table on one port and address family; a port of the table held by a
    process that is not the unit the table puts there (live: [{address, family, port, pid, process, unit}] read on the
    host by gpuhost_host_claims). A port held by a unit of the table on its own port is ours (a re-run)."""
    errors = []
    for index, one in enumerate(table):
        for other in table[index + 1:]:
            if _port(one["port"]) is None or _port(one["port"]) != _port(other["port"]):
                continue
            families = _overlap(bind_kind(one["host"]), bind_kind(other["host"]))
            if families:
                errors.append("%s and %s: two of the collection's listeners on port %s (%s): give each its own port"
                              % (_label(one), _label(other), one["port"],
                                 " and ".join(FAMILIES[f] for f in sorted(families))))
    for entry in table:
        port = _port(entry["port"])
        if port is None:
            continue
        if entry["unit"] and not is_unit(entry["unit"], ("service",), template=False):
            continue  # not a unit name the listener can be told by: the role's preflight names the form error
        ours = bind_kind(entry["host"])
        for held in live or []:
            if _port(held.get("port")) != port:
                continue
            taken = ({int(held.get("family", 4))}, None if held.get("wildcard") else held.get("address"))
            if held.get("family") == 6 and held.get("wildcard"):
                taken = ({4, 6}, None)
            if not _overlap(ours, taken):
                continue
            if entry["unit"] and held.get("unit") == entry["unit"]:
                continue
            if any(other is not entry and other["unit"] == held.get("unit") and _port(other["port"]) == port
                   for other in table):
                continue  # the collection's own listener of that port: the two-of-ours error above names both
            errors.append("%s: port %s is already taken on this host by %s (pid %s%s, listening on %s): not one of "
                          "the collection's listeners for that port; stop it or choose another port"
                          % (_label(entry), port, held.get("process") or "an unknown process",
                             held.get("pid") if held.get("pid") is not None else "unknown",
                             ", unit %s" % held["unit"] if held.get("unit") else "",
                             held.get("address")))
            break
    return errors


_TCP_LISTEN = "0A"


def _hex_address(text, family):
    raw = bytes.fromhex(text)
    if family == 4:
        return str(ipaddress.IPv4Address(raw[::-1]))
    # /proc/net/tcp6: four 32-bit words, each in host (little-endian) order
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return ipaddress.IPv6Address(words).compressed


def parse_proc_net_tcp(text, family):
    """[{address, family, port, inode, wildcard}] of the listening sockets in /proc/net/tcp (family 4) or tcp6 (6)."""
    sockets = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != _TCP_LISTEN:
            continue
        address, port = fields[1].split(":")
        text_address = _hex_address(address, family)
        sockets.append({"address": text_address, "family": family, "port": int(port, 16), "inode": fields[9],
                        "wildcard": ipaddress.ip_address(text_address).is_unspecified})
    return sockets


def unit_of_cgroup(text):
    """The systemd unit (a .service) of a process from its /proc/PID/cgroup ('' when none)."""
    for line in text.splitlines():
        for part in reversed(line.rsplit(":", 1)[-1].split("/")):
            if part.endswith(".service"):
                return part
    return ""


# ---------------------------------------------------------------------------------------------------------------
# A secret's characters, by where it lands

# "header": an env file read by systemd (vllm_service's VLLM_API_KEY and HF_TOKEN, vllm_router's key) and an HTTP
#   header: printable ASCII without spaces, quotes or backslashes (systemd's parser would unquote or unescape them).
# "nginx": the same inside a quoted nginx string (the door's header to its upstream), where '$' starts a variable.
# "client": a client's key at the door, an RFC 7235 token68 of 32-512 characters (an nginx map key).
SECRET_FORMS = {
    "header": (re.compile(r"^[\x21\x23-\x26\x28-\x5b\x5d-\x7e]+$"),
               "printable ASCII without spaces, quotes or backslashes"),
    "nginx": (re.compile(r"^[\x21\x23\x25-\x26\x28-\x5b\x5d-\x7e]+$"),
              "printable ASCII without spaces, quotes, backslashes or '$'"),
    "client": (re.compile(r"^[A-Za-z0-9._~+/-]{32,512}=*$"),
               "32-512 characters of A-Z a-z 0-9 . _ ~ + / - (then = padding)"),
}


def secret_value_errors(values, form="header"):
    """["<label> must be <the form>"] for each string of values ({label: secret}) that is not empty and breaks the
    rule of ``form`` (SECRET_FORMS); the label names where it comes from, the message never holds the value. A value
    that is not a string is left to the type check (typed_errors)."""
    if form not in SECRET_FORMS:
        raise ValueError("secret_value_errors: form must be one of %s, got %s" % (", ".join(SECRET_FORMS), show(form)))
    pattern, text = SECRET_FORMS[form]
    return ["%s must be %s" % (label, text) for label, value in values.items()
            if isinstance(value, str) and value and not pattern.fullmatch(value)]


# ---------------------------------------------------------------------------------------------------------------
# How messages show a value, and a secret

def plain(value):
    """Tagged builtins (ansible-core 2.19) and nested containers as plain Python values."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, Mapping):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def show(value):
    """A value as every message of the collection shows it (the one renderer: these checks, gpuhost_values' and the
    filters'): JSON (a string quoted with its escapes visible - \\r, \\u2028 -, a number, a list, a mapping as an
    operator writes them), else its repr. Never for a secret (redacted)."""
    try:
        return json.dumps(plain(value))
    except (TypeError, ValueError):
        return repr(value)


def redacted(value):
    """What a message shows of a secret: its type and size, never the value."""
    if isinstance(value, str):
        return "a %d-character string (a secret: not shown)" % len(value)
    if isinstance(value, Mapping):
        return "a mapping of %d entries (a secret: not shown)" % len(value)
    if isinstance(value, (list, tuple)):
        return "a list of %d items (a secret: not shown)" % len(value)
    if value is None:
        return "null"
    return "a %s (a secret: not shown)" % type_name(value)
