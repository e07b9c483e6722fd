"""Assertions the unit tests share.

    from ansible_collections.gpuhost.inference.tests.unit.asserts import assert_errors_match
"""
from __future__ import annotations


def assert_errors_match(errors, expected):
    """``errors`` is a list of strings; every list of fragments in ``expected`` is in an error of its
    own (all its fragments in that one error), and there is no other error."""
    assert isinstance(errors, list)
    assert all(isinstance(e, str) for e in errors)
    assert len(errors) == len(expected), errors
    unmatched = list(errors)
    for fragments in expected:
        hits = [e for e in unmatched if all(f in e for f in fragments)]
        assert hits, "no error contains all of %r in %r" % (fragments, errors)
        unmatched.remove(hits[0])
