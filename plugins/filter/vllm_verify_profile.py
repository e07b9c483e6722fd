# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""vllm_verify's reading of a profile and its rollback, in Python: the name a profile serves under,
and the sentences that say what the rollback did (of the profile, of the vLLM release).

The docs of each filter are in the YAML file of the same name beside this one; the unit tests are
tests/unit/plugins/filter/test_vllm_verify_profile.py with the cases of tests/unit/data/vllm_verify_profile_cases.yaml.
"""
from __future__ import annotations

from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import type_name

_MISSING = object()
# What ansible.builtin.flatten leaves out.
_NULLS = (None, "None", "null")


def _flatten(value):
    out = []
    for item in value:
        if item in _NULLS:
            continue
        if isinstance(item, (list, tuple)):
            out.extend(_flatten(item))
        else:
            out.append(item)
    return out


def vllm_verify_served_name(settings, fallback=""):
    """The name a profile serves under: its first served_model_name (or served-model-name; a string or a
    list), else its model, else ``fallback`` (when the profile has no model key)."""
    if settings is None:
        settings = {}
    if not isinstance(settings, Mapping):
        raise TypeError("vllm_verify_served_name expects the profile's settings as a dict, got %s" % type_name(settings))
    served = settings.get("served_model_name", settings.get("served-model-name"))
    names = [name for name in _flatten([served]) if name]
    model = settings.get("model", _MISSING)
    return (names + [fallback if model is _MISSING else model])[0]


def _shown(value):
    """As a template shows a value: None as ''."""
    return "" if value is None else value


def vllm_verify_rollback_text(rollback_to, start=None, enabled=True, last_good="", last_good_file=""):
    """The sentence of the failure message that says what the rollback did, or why there was none.

    rollback_to: the profile rolled back to ('' for none). start: the answer of the vllm_verify_wait module for its start
    (ok, since_start_s, elapsed_s, reason). enabled: vllm_verify_rollback. last_good: the last profile that
    passed on this host ('' for none), read from last_good_file.
    """
    if rollback_to:
        start = start or {}
        if start.get("ok", False):
            return "Rolled back to the last good profile '%s': it serves again (healthy %s s after its start)." % (
                rollback_to, _shown(start.get("since_start_s") or start["elapsed_s"]))
        return "Rolled back to the last good profile '%s', but it did NOT come up either: %s." % (
            rollback_to, _shown(start.get("reason", "no answer")))
    if not enabled:
        return "No rollback (vllm_verify_rollback is false)."
    if not last_good:
        return "No rollback: no profile has passed on this host yet (%s)." % (last_good_file,)
    return "No rollback: the last good profile is the active one ('%s')." % (last_good,)


def vllm_verify_version_text(venvs, start=None):
    """The sentence of the failure message that says which vLLM release failed and which one serves again.

    venvs: venv_state.yml's {active, good, active_version, good_version, back}; back '' when the release was not switched
    back (then ''). start: the answer of the vllm_verify_wait module for the old release's start (after the profile
    rollback too, when one followed). Followed by a space when not empty (the profile's sentence comes next).
    """
    venvs = venvs if isinstance(venvs, Mapping) else {}
    if not venvs.get("back"):
        return ""
    start = start if isinstance(start, Mapping) else {}
    new = "vLLM %s (%s)" % (_shown(venvs.get("active_version")), _shown(venvs.get("active")))
    old = "vLLM %s (%s)" % (_shown(venvs.get("good_version")), _shown(venvs.get("back")))
    if start.get("ok", False):
        return ("Upgrade rolled back: %s failed; the venv link points at the last good %s again and it serves "
                "(healthy %s s after its start). The new venv is kept; pin vllm_install_version back to %s "
                "in the inventory, or the next run tries the new release again." % (
                    new, old, _shown(start.get("since_start_s") or start.get("elapsed_s")), _shown(venvs.get("good_version"))))
    return ("Upgrade rolled back: %s failed; the venv link points at the last good %s again, but it did NOT come up "
            "either: %s." % (new, old, _shown(start.get("reason", "no answer"))))


class FilterModule:
    """vllm_verify filters of the active profile and its rollback."""

    def filters(self):
        return {
            "vllm_verify_served_name": vllm_verify_served_name,
            "vllm_verify_rollback_text": vllm_verify_rollback_text,
            "vllm_verify_version_text": vllm_verify_version_text,
        }
