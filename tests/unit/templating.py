"""Rendering the collection's YAML files in unit tests the way Ansible does.

    from ansible_collections.gpuhost.inference.tests.unit.templating import trusted
"""
from __future__ import annotations

from ansible.template import trust_as_template


def trusted(value):
    """Role and playbook files are trusted templates (as Ansible's loader marks them): mark every string of
    a loaded YAML value so that a Templar renders it."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trusted(v) for v in value]
    return value
