"""The front door's inputs checked as their programs check them (plugins/filter/front_door.py, issue 42.5): the
revocations, the agents' env var, the lab certificate's days, and the operator's certificate and key (made here with
cryptography, the library the filter reads them with). Cases in tests/unit/data/front_door_inputs.yaml."""
from __future__ import annotations

import datetime

import pytest

from ansible_collections.gpuhost.inference.plugins.filter.front_door import (
    FilterModule,
    front_door_input_errors,
    front_door_tls_errors,
)
from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
from ansible_collections.gpuhost.inference.tests.unit.paths import case_ids, load_cases

CASES = load_cases("front_door_inputs.yaml")
x509 = pytest.importorskip("cryptography.x509")


@pytest.mark.parametrize("case", CASES["inputs"], ids=case_ids(CASES["inputs"]))
def test_inputs(case):
    assert_errors_match(front_door_input_errors(case["values"]), case["expect_errors"])


def _pair(san, days, key_kind):
    import ipaddress  # pylint: disable=import-outside-toplevel

    from cryptography.hazmat.primitives import hashes, serialization  # pylint: disable=import-outside-toplevel
    from cryptography.hazmat.primitives.asymmetric import ec  # pylint: disable=import-outside-toplevel

    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.timezone.utc)
    start = now - datetime.timedelta(days=1) if days > 0 else now - datetime.timedelta(days=10)
    end = now + datetime.timedelta(days=days) if days > 0 else now - datetime.timedelta(days=2)
    names = []
    for name in san:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            names.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(x509.oid.NameOID.COMMON_NAME, "door")])
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(names), critical=False).sign(key, hashes.SHA256()))
    if key_kind == "other":
        key = ec.generate_private_key(ec.SECP256R1())
    encryption = (serialization.BestAvailableEncryption(b"pass") if key_kind == "encrypted"
                  else serialization.NoEncryption())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


@pytest.mark.parametrize("case", CASES["tls"], ids=case_ids(CASES["tls"]))
def test_tls(case, tmp_path):
    if case["san"] is None:
        cert, key = b"not a certificate\n", b"not a key\n"
    else:
        cert, key = _pair(case["san"], case["days"], case["key"])
    (tmp_path / "door.crt").write_bytes(cert)
    (tmp_path / "door.key").write_bytes(key)
    errors = front_door_tls_errors(str(tmp_path / "door.crt"), str(tmp_path / "door.key"), case["names"])
    assert_errors_match(errors, case["expect_errors"])
    secret_part = key.decode(errors="replace")[40:80]
    assert not secret_part or all(secret_part not in e for e in errors)


def test_filters_registered():
    assert set(FilterModule().filters()) == {"front_door_input_errors", "front_door_tls_errors"}
