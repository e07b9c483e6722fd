"""Render the docs that restate the collection's own files: each role's variable table from its
meta/argument_specs.yml into the role's README.md, and (without ROLE arguments) the role list and the plays.

    python3 scripts/gen-role-docs.py [ROLE ...]          rewrite the tables (every role and the lists by default)
    python3 scripts/gen-role-docs.py --check [ROLE ...]  exit 1 when a table is out of date (the unit tests run it)

The role list (playbooks/vars/roles.yml: each role's `does` and `owns`) becomes README.md's role table
(`<!-- BEGIN roles readme -->`) and docs/CONTRACTS.md's (`<!-- BEGIN roles contracts -->`); the plays of
playbooks/site.yml (the first paragraph of the comment right above each play, its hosts and its roles) become the
numbered list `<!-- BEGIN plays -->` in docs/fleet.md and docs/CONTRACTS.md. Those markers must be there.

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
ROLE_LIST = os.path.join("playbooks", "vars", "roles.yml")
SITE = os.path.join("playbooks", "site.yml")

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


def _read(rel: str) -> str:
    with open(os.path.join(ROOT, rel), encoding="utf-8") as fh:
        return fh.read()


def role_list() -> list[dict]:
    return yaml.safe_load(_read(ROLE_LIST))["gpuhost_roles"]


def roles_readme() -> str:
    rows = ["| role | does | README |", "| --- | --- | --- |"]
    rows += [f"| `gpuhost.inference.{e['role']}` | {cell(e['does'])} | [roles/{e['role']}](roles/{e['role']}/README.md) |"
             for e in role_list()]
    return "\n".join(rows)


def roles_contracts() -> str:
    rows = ["| role | public prefix | owns on the host |", "| --- | --- | --- |"]
    rows += [f"| {e['role']} | `{e['role']}_` | {cell(e['owns'])} |" for e in role_list()]
    return "\n".join(rows)


# `docs/router.md` in a play's comment, as a link from a page in docs/.
DOC_LINK = re.compile(r"\bdocs/([\w.-]+\.md)\b")


def plays() -> list[dict]:
    """site.yml's plays: {text: the first paragraph of the comment right above the play, hosts, roles}."""
    text = _read(SITE)
    found = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.startswith("- name: "):
            continue
        block = []
        j = i - 1
        while j >= 0 and lines[j].startswith("#"):
            block.insert(0, lines[j][1:].strip())
            j -= 1
        paragraph = " ".join(block[:block.index("")] if "" in block else block)
        if not paragraph:
            raise ValueError(f"{SITE}: the play {line[8:]!r} has no comment right above it that says what it does")
        found.append({"text": paragraph})
    loaded = yaml.safe_load(text)
    if len(loaded) != len(found):
        raise ValueError(f"{SITE}: {len(loaded)} plays, {len(found)} found at the start of a line")
    for entry, play in zip(found, loaded):
        entry["hosts"] = play["hosts"]
        entry["roles"] = [(r["role"] if isinstance(r, dict) else r).rsplit(".", 1)[-1] for r in play.get("roles", [])]
    return found


def plays_list() -> str:
    items = []
    for number, play in enumerate(plays(), 1):
        where = "" if "{{" in play["hosts"] else f"on `{play['hosts']}`"
        roles = f" ({', '.join(play['roles'])})" if play["roles"] else ""
        text = DOC_LINK.sub(lambda m: f"[{m.group(1)}]({m.group(1)})", play["text"])
        head = (where + roles + ": ") if where else ""
        items.append(f"{number}. {head}{text[0].lower() + text[1:] if head else text}")
    return f"`site.yml` has {len(items)} plays (the comment above each play in `{SITE}`):\n\n" + "\n".join(items)


# (file, marker, renderer): the blocks generated from the role list and site.yml.
SITE_BLOCKS = (
    ("README.md", "roles readme", roles_readme),
    (os.path.join("docs", "CONTRACTS.md"), "roles contracts", roles_contracts),
    (os.path.join("docs", "CONTRACTS.md"), "plays", plays_list),
    (os.path.join("docs", "fleet.md"), "plays", plays_list),
)


def render_site_block(text: str, marker: str, content: str) -> str | None:
    """The text with the block between `<!-- BEGIN marker -->` and `<!-- END marker -->` replaced; None: no markers."""
    begin, end = f"<!-- BEGIN {marker} -->", f"<!-- END {marker} -->"
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end), flags=re.S)
    if not pattern.search(text):
        return None
    return pattern.sub(lambda _m: f"{begin}\n{content}\n{end}", text, count=1)


def site_docs(check: bool) -> tuple[list[str], list[str]]:
    """Rewrite (or check) the blocks of SITE_BLOCKS: (stale files, broken files)."""
    stale, broken = [], []
    texts = {}
    for rel, marker, renderer in SITE_BLOCKS:
        old = texts.setdefault(rel, _read(rel))
        try:
            new = render_site_block(old, marker, renderer())
        except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
            print(f"{rel}: cannot render the {marker} block: {type(exc).__name__}: {exc}", file=sys.stderr)
            broken.append(rel)
            continue
        if new is None:
            print(f"{rel}: has no <!-- BEGIN {marker} --> ... <!-- END {marker} --> block", file=sys.stderr)
            broken.append(rel)
            continue
        texts[rel] = new
    for rel, new in texts.items():
        if new == _read(rel):
            continue
        stale.append(rel)
        if check:
            print(f"{rel}: the blocks generated from {ROLE_LIST} and {SITE} are out of date", file=sys.stderr)
            diff = difflib.unified_diff(_read(rel).splitlines(), new.splitlines(), rel, rel + " (generated)", n=0, lineterm="")
            for line in list(diff)[:12]:
                print("  " + line[:200], file=sys.stderr)
        else:
            with open(os.path.join(ROOT, rel), "w", encoding="utf-8") as fh:
                fh.write(new)
            print(f"{rel}: generated blocks rewritten")
    return stale, broken


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
    if not args.roles:
        site_stale, site_broken = site_docs(args.check)
        stale += site_stale
        broken += site_broken
    if args.check and stale:
        print("run: python3 scripts/gen-role-docs.py", file=sys.stderr)
    return 1 if broken or (args.check and stale) else 0


if __name__ == "__main__":
    sys.exit(main())
