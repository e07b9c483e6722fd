# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The front door's inputs checked as their programs check them, on the controller before anything changes: the
operator's certificate and key as nginx loads them, the revocations, the agents' env var, the lab CA's days.

The docs of each filter are in the YAML file of the same name beside this one.
"""
from __future__ import annotations

import datetime
import ipaddress
import re
from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils import gpuhost_invariants as _inv
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_int

# A name a POSIX shell takes for an environment variable (the agents' configs write ${NAME:?...}).
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The lab CA's certificates: at least a day, at most 825 days (the longest a TLS client still takes, CA/B BR 6.3.2).
CERT_DAYS = (1, 825)


def front_door_input_errors(values):
    """Error strings for the door's revocations (each names a client), its agents' env var, its lab certificate's days,
    and its lab CA's directory on the controller (made mode 0700: never a system directory there; its form is
    unit_value_errors('path')'s).

    values: {front_door_revoked_clients: [...], clients: [names of front_door_api_keys and the keys file],
    front_door_agent_api_key_env: str, front_door_lab_cert_days: int, front_door_lab_ca_dir: str}."""
    if not isinstance(values, Mapping):
        raise AnsibleFilterError("front_door_input_errors: the input must be a mapping {variable: value}")
    errors = []
    clients = sorted(str(c) for c in values.get("clients") or [])
    for name in values.get("front_door_revoked_clients") or []:
        if str(name) not in clients:
            errors.append("front_door_revoked_clients: %s is not a client (the clients are %s): a revocation that names "
                          "no client revokes nothing, and a typo leaves the real key working"
                          % (_quote(name), ", ".join(clients) or "none"))
    env = values.get("front_door_agent_api_key_env")
    if "front_door_agent_api_key_env" in values and (not isinstance(env, str) or not ENV_NAME.match(env)):
        errors.append("front_door_agent_api_key_env must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*: the "
                      "agents' configs and shell files write ${NAME}), got %s" % _quote(env))
    if "front_door_lab_cert_days" in values:
        days = values["front_door_lab_cert_days"]
        if isinstance(days, bool) or not CERT_DAYS[0] <= as_int(days, 0) <= CERT_DAYS[1]:
            errors.append("front_door_lab_cert_days must be %d-%d (a day at least; TLS clients refuse certificates "
                          "valid longer than 825 days), got %s" % (CERT_DAYS[0], CERT_DAYS[1], _quote(days)))
    ca_dir = values.get("front_door_lab_ca_dir")
    if _inv.is_plain_path(ca_dir):
        # The one path rule's system directories (the controller's packages are not asked: no dpkg there, maybe).
        reason = _inv.system_path_reason(_inv.normal_path(ca_dir))
        if reason:
            errors.append("front_door_lab_ca_dir=%s (on the controller): %s; %s" % (ca_dir, reason, _inv.WHY_SYSTEM))
    return errors


def _quote(value):
    return '"%s"' % value if isinstance(value, str) else repr(value)


def _covers(pattern, name):
    """RFC 6125: a SAN DNS name covers the name; a leading * matches one whole label."""
    pattern, name = pattern.lower().rstrip("."), name.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _dot, rest = name.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == name


def _read(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def front_door_tls_errors(cert_path, key_path, names, now=None):
    """front_door_tls_errors_text over the files on the controller (the key is read here, never passed around)."""
    return front_door_tls_errors_text(_read(cert_path), _read(key_path), names,
                                      cert_file="front_door_tls_cert_file=%s" % cert_path,
                                      key_file="front_door_tls_key_file=%s" % key_path, now=now)


def front_door_tls_errors_text(cert_text, key_text, names, cert_file="front_door_tls_cert_file",
                               key_file="front_door_tls_key_file", now=None):
    """Error strings for the operator's certificate and key as nginx would load them: PEM, an unencrypted key that
    matches the certificate's public key, valid now, and covering each name in `names` (the host's names a client
    connects to: a subjectAltName DNS name, wildcards as RFC 6125, or IP address)."""
    try:
        from cryptography import x509  # pylint: disable=import-outside-toplevel
        from cryptography.hazmat.primitives import serialization  # pylint: disable=import-outside-toplevel
    except ImportError:  # cryptography comes with ansible-core; without it nginx -t checks them on the host
        return []
    errors = []
    certs = []
    text = cert_text if isinstance(cert_text, (bytes, bytearray)) else str(cert_text or "").encode()
    if b"-----BEGIN CERTIFICATE-----" in text:
        try:
            certs = x509.load_pem_x509_certificates(text)
        except ValueError as exc:
            errors.append("%s is not a PEM certificate nginx can load: %s" % (cert_file, exc))
    else:
        errors.append("%s is not a PEM certificate (no -----BEGIN CERTIFICATE----- block)" % cert_file)
    key = None
    ktext = key_text if isinstance(key_text, (bytes, bytearray)) else str(key_text or "").encode()
    if b"-----BEGIN" in ktext and b"PRIVATE KEY-----" in ktext:
        try:
            key = serialization.load_pem_private_key(ktext, password=None)
        except TypeError:
            errors.append("%s is encrypted: nginx cannot read it without its passphrase at every start" % key_file)
        except ValueError as exc:
            errors.append("%s is not a PEM private key nginx can load: %s" % (key_file, str(exc).splitlines()[0]))
    else:
        errors.append("%s is not a PEM private key (no -----BEGIN ... PRIVATE KEY----- block)" % key_file)
    if not certs:
        return errors
    cert = certs[0]
    if key is not None:
        fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        if key.public_key().public_bytes(*fmt) != cert.public_key().public_bytes(*fmt):
            errors.append("%s does not match %s (the key is not the certificate's: nginx refuses the pair)"
                          % (key_file, cert_file))
    now = now or datetime.datetime.now(datetime.timezone.utc)
    if cert.not_valid_after_utc <= now:
        errors.append("%s expired on %s" % (cert_file, cert.not_valid_after_utc.date().isoformat()))
    elif cert.not_valid_before_utc > now:
        errors.append("%s is not valid before %s" % (cert_file, cert.not_valid_before_utc.isoformat()))
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns = san.get_values_for_type(x509.DNSName)
        ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    except x509.ExtensionNotFound:
        dns, ips = [], []
    missing = []
    for name in names or []:
        text_name = str(name).strip("[]")
        try:
            covered = str(ipaddress.ip_address(text_name)) in ips
        except ValueError:
            covered = any(_covers(pattern, text_name) for pattern in dns)
        if not covered:
            missing.append(text_name)
    if missing:
        errors.append("%s does not cover %s (its subjectAltName: %s): a client connecting by that name refuses it"
                      % (cert_file, ", ".join(missing), ", ".join(dns + ips) or "none"))
    return errors


class FilterModule:
    """The front door's input checks."""

    def filters(self):
        return {"front_door_input_errors": front_door_input_errors, "front_door_tls_errors": front_door_tls_errors}
