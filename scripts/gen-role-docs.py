"""Render each role's variable table from its meta/argument_specs.yml into the role's README.md.

    python3 scripts/gen-role-docs.py [ROLE ...]          rewrite the tables (every role by default)
    python3 scripts/gen-role-docs.py --check [ROLE ...]  exit 1 when a table is out of date (the unit tests run it)

A table sits in roles/ROLE/README.md between `<!-- BEGIN vars ROLE -->` and `<!-- END vars ROLE -->`;
everything outside the markers is hand-written and left alone. A README without the markers gets a
`## Variables` section with them appended when rewriting; `--check` fails on it, as on any drift, and
names the README. Types, choices and descriptions come from the argument specs (Ansible's markup
C() V() O() ... turned into Markdown), defaults from defaults/main.yml (else the spec's default).
"""
from __future__ import annotations

import argparse
import difflib
import os
import re
import sys

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLES = os.path.join(ROOT, "roles")

BEGIN = "<!-- BEGIN vars {role} -->"
END = "<!-- END vars {role} -->"
INTRO = ("Generated from `meta/argument_specs.yml` and `defaults/main.yml` by `scripts/gen-role-docs.py`; "
         "every variable is typed there and checked at role entry.")


def cell(value) -> str:
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


# Ansible's documentation markup (the classic form: a letter, then its argument in parentheses).
# Parentheses inside an argument are balanced here, so C(http(s)://host) reads as the author meant.
MARKUP = re.compile(r"\b([CVOEPMIBUL]|RV?)\(")


def _argument(text: str, start: int):
    """The text from `start` to its closing parenthesis (balanced), and the index after it; None if unclosed."""
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return text[start:i], i + 1
    return None


def markdown(text: str) -> str:
    """Ansible markup to Markdown: code for C V O E P M, *I*, **B**, links for U and L."""
    out, pos = [], 0
    for m in MARKUP.finditer(text):
        if m.start() < pos:
            continue
        found = _argument(text, m.end())
        if found is None:
            continue
        arg, end = found
        kind = m.group(1)
        if kind in ("C", "V", "O", "E", "P", "M", "RV"):
            rendered = "`" + arg.replace("`", "'") + "`"
        elif kind == "I":
            rendered = f"*{arg}*"
        elif kind == "B":
            rendered = f"**{arg}**"
        elif kind == "U":
            rendered = f"<{arg}>"
        elif kind == "L":
            label, _sep, url = arg.rpartition(",")
            rendered = f"[{label.strip()}]({url.strip()})"
        else:  # R(text, reference): a reference inside Ansible's docsite, only the text means anything here
            rendered = arg.rpartition(",")[0].strip() or arg
        out.append(text[pos:m.start()] + rendered)
        pos = end
    out.append(text[pos:])
    return "".join(out)


# `{{ other_var | default(lookup('gpuhost.inference.role_default', 'other_var')) }}`: the owner role's value.
OWNED = re.compile(r"^\{\{ (\w+) \| default\(lookup\('gpuhost\.inference\.role_default', '\1'\)\) \}\}(.*)$")


def roles() -> list[str]:
    """Every role with argument specs, sorted."""
    return sorted(r for r in os.listdir(ROLES) if os.path.isfile(os.path.join(ROLES, r, "meta", "argument_specs.yml")))


def table(role: str) -> str:
    path = os.path.join(ROLES, role, "meta", "argument_specs.yml")
    with open(path, encoding="utf-8") as fh:
        spec = yaml.safe_load(fh)["argument_specs"]["main"]
    defaults_path = os.path.join(ROLES, role, "defaults", "main.yml")
    defaults = {}
    if os.path.isfile(defaults_path):
        with open(defaults_path, encoding="utf-8") as fh:
            defaults = yaml.safe_load(fh) or {}
    rows = [INTRO, "", "| variable | type | default | description |", "| --- | --- | --- | --- |"]
    for name, opt in (spec.get("options") or {}).items():
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
        elif isinstance(default, str) and default:
            shown = "`" + cell(default.strip()) + "`"   # as written: a Jinja default reads as Jinja
        else:
            shown = "`" + cell(yaml.safe_dump(default, default_flow_style=True, width=10_000).strip().removesuffix("...").strip()) + "`"
        if len(shown) > 80:
            shown = "see [defaults/main.yml](defaults/main.yml)"
        if opt.get("required"):
            shown = "**required**"
        rows.append(f"| `{name}` | {cell(typ)} | {shown} | {cell(markdown(desc))} |")
    return "\n".join(rows)


def render(role: str, readme: str) -> str:
    """The README with the role's table between its markers (appended in a Variables section when absent)."""
    begin, end = BEGIN.format(role=role), END.format(role=role)
    block = f"{begin}\n{table(role)}\n{end}"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), flags=re.S)
    if pattern.search(readme):
        return pattern.sub(lambda _m: block, readme, count=1)
    return readme.rstrip("\n") + f"\n\n## Variables\n\n{block}\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a table is out of date; change nothing")
    ap.add_argument("roles", nargs="*", help="roles to render (default: every role with meta/argument_specs.yml)")
    args = ap.parse_args()
    known = roles()
    unknown = [r for r in args.roles if r not in known]
    if unknown:
        print(f"no argument specs for role(s) {', '.join(unknown)} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    stale, broken = [], []
    for role in args.roles or known:
        path = os.path.join(ROLES, role, "README.md")
        rel = os.path.relpath(path, ROOT)
        old = ""
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                old = fh.read()
        else:
            old = f"# gpuhost.inference.{role}\n"
        try:
            new = render(role, old)
        except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            spec = os.path.join("roles", role, "meta", "argument_specs.yml")
            print(f"{rel}: cannot render the variable table from {spec}: {type(exc).__name__}: {exc}", file=sys.stderr)
            broken.append(rel)
            continue
        if new == old:
            continue
        stale.append(rel)
        if args.check:
            has_markers = BEGIN.format(role=role) in old
            why = "out of date" if has_markers else f"has no {BEGIN.format(role=role)} ... {END.format(role=role)} block"
            print(f"{rel}: the variable table {why}", file=sys.stderr)
            diff = difflib.unified_diff(old.splitlines(), new.splitlines(), rel, rel + " (generated)", n=0, lineterm="")
            for line in list(diff)[:12]:
                print("  " + line[:200], file=sys.stderr)
        else:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(new)
            print(f"{rel}: variable table rewritten")
    if args.check and stale:
        print("run: python3 scripts/gen-role-docs.py", file=sys.stderr)
    return 1 if broken or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
