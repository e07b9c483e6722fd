# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Prometheus text (a /metrics answer) in Jinja, through the collection's one reader of it
(plugins/module_utils/prometheus_text.py): ``prometheus_total`` and ``prometheus_by_label``."""
from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuhost.inference.plugins.module_utils import prometheus_text
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_invariants import type_name


def _text(value, name):
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if not isinstance(value, str):
        raise AnsibleFilterError("%s expects the /metrics text (a string), got %s" % (name, type_name(value)))
    return value


def _names(names, filter_name):
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) and n for n in names):
        raise AnsibleFilterError("%s expects a sample name or a non-empty list of them, got %r" % (filter_name, names))
    return list(names)


def _labels(labels, filter_name):
    if labels is None:
        return {}
    if not isinstance(labels, dict):
        raise AnsibleFilterError("%s expects labels as a dict, got %s" % (filter_name, type_name(labels)))
    return labels


def prometheus_total(text, names, labels=None, default=0.0):
    """The sum over every series of ``names`` (a sample name or a list) whose labels include ``labels``;
    ``default`` when none is present."""
    parsed = prometheus_text.samples(_text(text, "prometheus_total"))
    found = [prometheus_text.total(parsed, n, _labels(labels, "prometheus_total"))
             for n in _names(names, "prometheus_total")]
    found = [v for v in found if v is not None]
    return sum(found) if found else default


def prometheus_by_label(text, name, label, labels=None):
    """{value of ``label``: the sum over the series of ``name`` that carry it} (series without it are left out)."""
    if not isinstance(label, str) or not label:
        raise AnsibleFilterError("prometheus_by_label expects a label name, got %r" % (label,))
    out = {}
    for lbls, value in prometheus_text.series(_text(text, "prometheus_by_label"),
                                              _names(name, "prometheus_by_label")[0],
                                              _labels(labels, "prometheus_by_label")):
        if label in lbls:
            out[lbls[label]] = out.get(lbls[label], 0.0) + value
    return out


class FilterModule:
    """Prometheus exposition text."""

    def filters(self):
        return {"prometheus_total": prometheus_total, "prometheus_by_label": prometheus_by_label}
