"""Render each role's variables table from its meta/argument_specs.yml into README.md.

The tables sit between `<!-- BEGIN vars ROLE -->` and `<!-- END vars ROLE -->` markers.
`--check` exits 1 when README.md is out of date (the unit tests run it), otherwise it rewrites.
"""
from __future__ import annotations

import argparse
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cell(value) -> str:
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


# `{{ other_var | default(lookup('gpuhost.inference.role_default', 'other_var')) }}`: the owner role's value.
OWNED = re.compile(r"^\{\{ (\w+) \| default\(lookup\('gpuhost\.inference\.role_default', '\1'\)\) \}\}(.*)$")


def table(role: str) -> str:
    path = os.path.join(ROOT, "roles", role, "meta", "argument_specs.yml")
    with open(path, encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)["argument_specs"]["main"]
    defaults_path = os.path.join(ROOT, "roles", role, "defaults", "main.yml")
    with open(defaults_path, encoding="utf-8") as fh:
        defaults = yaml.safe_load(fh) or {}
    rows = ["| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for name, opt in spec.get("options", {}).items():
        typ = opt.get("type", "str")
        if typ == "list" and opt.get("elements"):
            typ = f"list of {opt['elements']}"
        if opt.get("choices"):
            typ += " (" + ", ".join(str(c) for c in opt["choices"]) + ")"
        desc = opt.get("description", "")
        if isinstance(desc, list):
            desc = " ".join(desc)
        default = defaults.get(name, opt.get("default", ""))
        owned = OWNED.match(default) if isinstance(default, str) else None
        if owned:
            shown = f"`{owned.group(1)}`" + (f" + `{cell(owned.group(2))}`" if owned.group(2) else "")
        else:
            shown = "`" + cell(yaml.safe_dump(default, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()) + "`"
        if len(shown) > 80:
            shown = "see `defaults/main.yml`"
        if opt.get("required"):
            shown = "**required**"
        rows.append(f"| `{name}` | {cell(typ)} | {shown} | {cell(desc)} |")
    return "\n".join(rows)


def render(readme: str) -> str:
    def repl(m: re.Match) -> str:
        role = m.group(1)
        return f"<!-- BEGIN vars {role} -->\n{table(role)}\n<!-- END vars {role} -->"

    return re.sub(r"<!-- BEGIN vars (\w+) -->.*?<!-- END vars \1 -->", repl, readme, flags=re.S)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    path = os.path.join(ROOT, "README.md")
    with open(path, encoding="utf-8") as fh:
        old = fh.read()
    new = render(old)
    if args.check:
        if new != old:
            print("README.md variable tables are out of date: run python3 scripts/gen-role-docs.py", file=sys.stderr)
            return 1
        return 0
    if new != old:
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
