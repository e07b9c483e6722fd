"""Every relative link of the docs points at a file that exists (and a heading that exists, for `#anchors`).

Checked: README.md, docs/*.md, scripts/README.md, benchmarks/README.md and every roles/*/README.md. Links into
code spans and fenced blocks are not links; http(s) and mailto links are not followed. Anchors are matched
against GitHub's slugs of the target's headings. Also: every page under docs/ is linked from the front page.
"""
from __future__ import annotations

import glob
import os
import re

import pytest

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT

FENCE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)
CODE = re.compile(r"`[^`\n]*`")
COMMENT = re.compile(r"<!--.*?-->", re.S)
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def pages():
    found = ["README.md", "scripts/README.md", "benchmarks/README.md"]
    found += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    found += sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "roles", "*", "README.md")))
    return [p for p in found if os.path.isfile(os.path.join(ROOT, p))]


def prose(text):
    """The text without fenced blocks, comments and code spans: what Markdown turns into links."""
    return CODE.sub("", COMMENT.sub("", FENCE.sub("", text)))


def slug(heading):
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link in a heading: its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as fh:
        text = FENCE.sub("", fh.read())
    seen, out = {}, set()
    for heading in HEADING.findall(text):
        base = slug(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page):
    with open(os.path.join(ROOT, page), encoding="utf-8") as fh:
        return LINK.findall(prose(fh.read()))


@pytest.mark.parametrize("page", pages())
def test_relative_links_resolve(page):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto:
            continue
        path, _sep, anchor = target.partition("#")
        resolved = os.path.normpath(os.path.join(ROOT, os.path.dirname(page), path)) if path else os.path.join(ROOT, page)
        if not os.path.exists(resolved):
            broken.append(f"{target}: no such file")
        elif anchor and resolved.endswith(".md") and anchor not in anchors(resolved):
            broken.append(f"{target}: no heading #{anchor} in {os.path.relpath(resolved, ROOT)}")
    assert not broken, f"{page}: " + "; ".join(broken)


def test_front_page_links_every_doc():
    linked = {os.path.normpath(t.partition("#")[0]) for t in links("README.md")}
    docs = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    missing = [d for d in docs if d not in linked]
    assert not missing, f"README.md does not link {', '.join(missing)}"
