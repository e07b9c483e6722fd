# -*- coding: utf-8 -*-
# Copyright: (c) 2026, gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""How the collection's checks name a value's type in their messages (one place for every filter).

Python standard library only, never imports AnsibleModule.
"""
from __future__ import annotations

from collections.abc import Mapping

# bool before int: a bool is an int to isinstance.
_KINDS = ((bool, "bool"), (int, "int"), (float, "float"), (str, "str"), (Mapping, "dict"), (list, "list"),
          (type(None), "null"))


def type_name(value):
    """The YAML-ish type name of a value (ansible-core 2.19 hands filters tagged subclasses of the builtins,
    so the class name itself would say _AnsibleTaggedStr)."""
    for kind, name in _KINDS:
        if isinstance(value, kind):
            return name
    return type(value).__name__


def as_int(value, default=0):
    """As Jinja's ``int`` filter: '42.23' -> 42, anything else that is not a number -> default."""
    try:
        if isinstance(value, str):
            return int(value, 10)
        return int(value)
    except (TypeError, ValueError):
        try:
            return int(float(value))
        except (TypeError, ValueError):
            return default
