# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The rolling change of playbooks/site.yml, in Python: the check of ``gpuhost_serial`` and
``gpuhost_max_fail_percentage`` (play 1, before anything changes) and the values of play 2's
``serial`` and ``max_fail_percentage`` keywords.

The docs of each filter are in the YAML file of the same name beside this one; the unit tests are
tests/unit/plugins/filter/test_site_rollout.py with the cases of tests/unit/data/site_rollout_cases.yaml.
"""
from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

_WHOLE = re.compile(r"^[0-9]+$")
_PERCENT = re.compile(r"^([0-9]+)%$")
_NUMBER = re.compile(r"^[0-9]+(\.[0-9]+)?%?$")

SERIAL_FORMS = ("0 or all (every box at once, the default), a whole number of boxes per batch (e.g. 1), "
                "a whole percentage of the boxes per batch from 1% to 100% (e.g. 25%), or a list of those batch sizes, "
                "the last repeated (e.g. [1, '100%'] or '1,100%': a canary box, then the rest)")
MAX_FAIL_FORMS = ("a number from 0 to 100, with or without % (the percentage of a batch's boxes that may fail before the "
                  "play stops; default 0 with gpuhost_serial, 100 without)")


def _empty(value):
    return value is None or (isinstance(value, str) and value.strip() == "")


def _serial(value):
    """(serial keyword value, error or None). A list (or a comma-separated string) is Ansible's list of batch sizes."""
    if isinstance(value, str) and "," in value:
        value = value.split(",")
    if isinstance(value, (list, tuple)):
        sizes = [_one_serial(item) for item in value]
        if not sizes or any(error or size == 0 for size, error in sizes):
            return None, "gpuhost_serial must be %s, got %r (every batch size of a list a number or a percentage)" % (
                SERIAL_FORMS, value)
        return [size for size, _error in sizes], None
    return _one_serial(value)


def _one_serial(value):
    """(one batch size, error or None)."""
    if _empty(value):
        return 0, None
    if isinstance(value, bool):
        return None, "gpuhost_serial must be %s, got %r (a boolean)" % (SERIAL_FORMS, value)
    if isinstance(value, int):
        if value < 0:
            return None, "gpuhost_serial must be %s, got %r" % (SERIAL_FORMS, value)
        return value, None
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "all":
            return 0, None
        if _WHOLE.match(text):
            return int(text, 10), None
        match = _PERCENT.match(text)
        if match and 1 <= int(match.group(1), 10) <= 100:
            return "%d%%" % int(match.group(1), 10), None
    return None, "gpuhost_serial must be %s, got %r" % (SERIAL_FORMS, value)


def _max_fail(value, batched):
    """(max_fail_percentage keyword value, error or None)."""
    if _empty(value):
        # Without serial every box is on its own, as before the keyword existed (100: never stop the others).
        return (0.0 if batched else 100.0), None
    if isinstance(value, bool):
        return None, "gpuhost_max_fail_percentage must be %s, got %r (a boolean)" % (MAX_FAIL_FORMS, value)
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str) and _NUMBER.match(value.strip()):
        number = float(value.strip().rstrip("%"))
    else:
        return None, "gpuhost_max_fail_percentage must be %s, got %r" % (MAX_FAIL_FORMS, value)
    if not 0 <= number <= 100:
        return None, "gpuhost_max_fail_percentage must be %s, got %r" % (MAX_FAIL_FORMS, value)
    return number, None


def site_rollout_errors(settings):
    """Error strings for {serial, max_fail_percentage} (gpuhost_serial, gpuhost_max_fail_percentage; empty when all is well)."""
    serial, serial_error = _serial(settings.get("serial"))
    batched = serial not in (None, 0)
    max_fail_error = _max_fail(settings.get("max_fail_percentage"), batched)[1]
    return [e for e in (serial_error, max_fail_error) if e]


def site_rollout(settings):
    """Play 2's {serial, max_fail_percentage} from {serial, max_fail_percentage}; a bad value raises its error
    (play 1 refuses it first; this is the guard of a run that skips play 1, e.g. with --tags)."""
    errors = site_rollout_errors(settings)
    if errors:
        raise AnsibleFilterError("site.yml: %s. Nothing was changed on the hosts." % "; ".join(errors))
    serial = _serial(settings.get("serial"))[0]
    return {"serial": serial, "max_fail_percentage": _max_fail(settings.get("max_fail_percentage"), serial != 0)[0]}


class FilterModule:
    """playbooks/site.yml filters of the rolling change."""

    def filters(self):
        return {
            "site_rollout_errors": site_rollout_errors,
            "site_rollout": site_rollout,
        }
