"""Shared helpers for running Ansible modules in unit tests: exit_json / fail_json raise
instead of exiting, so a test can catch the module's result."""
from __future__ import annotations


class ExitJson(Exception):
    pass


class FailJson(Exception):
    pass


def exit_json(self, **kwargs):  # pylint: disable=unused-argument
    raise ExitJson(kwargs)


def fail_json(self, **kwargs):  # pylint: disable=unused-argument
    raise FailJson(kwargs)
