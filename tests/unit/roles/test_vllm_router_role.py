"""roles/vllm_router: its derived names, its templates (the unit, the flags file, the secrets file) rendered by Ansible's
own templar from the role's defaults/main.yml and vars/main.yml (cases in data/vllm_router_role_cases.yaml), the
launcher files/vllm_router_start.py (stdlib only, loaded by path, with a stand-in for the router's own modules), and
the router plays of playbooks/site.yml.
"""
from __future__ import annotations

import os
import sys
import types

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases, load_script
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

ROLE = os.path.join(ROOT, "roles", "vllm_router")
DERIVED = load_cases("vllm_router_role_cases.yaml", "derived")
FLAGS = load_cases("vllm_router_role_cases.yaml", "flags")

launcher = load_script("vllm_router_start", os.path.join(ROLE, "files", "vllm_router_start.py"))


def load(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def templar(overrides=None, workers=None, key=""):
    variables = {"ansible_facts": {"os_family": "Debian"}, "ansible_managed": "Ansible managed: do not edit",
                 "inventory_hostname": "gateway", "role_path": ROLE,
                 "__vllm_router_workers": {"urls": workers or [], "errors": [], "api_keys": [], "api_key_files": [], "no_key": []},
                 "__vllm_router_key": {"key": key, "workers_have_key": bool(key), "errors": []}}
    for key_, value in {**load("defaults", "main.yml"), **load("vars", "main.yml")}.items():
        variables[key_] = trusted(value)
    variables.update(overrides or {})
    return Templar(loader=DataLoader(), variables=variables)


def render(name, overrides=None, workers=None, key=""):
    with open(os.path.join(ROLE, "templates", name), encoding="utf-8") as fh:
        return templar(overrides, workers, key).template(trust_as_template(fh.read()))


def tasks(name):
    return load("tasks", name)


def task(name, title):
    return next(t for t in tasks(name) if t["name"] == title)


@pytest.mark.parametrize("case", DERIVED, ids=case_ids(DERIVED))
def test_derived_names(case):
    t = templar(case["vars"])
    variables = t.available_variables
    assert {name: t.template(variables[name]) for name in case["expect"]} == case["expect"]


def test_venv_name_follows_the_install_spec():
    first = templar().template(trust_as_template("{{ _vllm_router_venv }}"))
    again = templar().template(trust_as_template("{{ _vllm_router_venv }}"))
    other_python = templar({"vllm_router_python": "/usr/bin/python3.12"}).template(trust_as_template("{{ _vllm_router_venv }}"))
    other_pin = templar({"vllm_router_version": "0.1.18"}).template(trust_as_template("{{ _vllm_router_venv }}"))
    assert first == again
    assert first.startswith("/opt/vllm-router/venvs/vllm-router-0.1.17-") and len(first.rsplit("-", 1)[1]) == 10
    assert len({first, other_python, other_pin}) == 3


@pytest.mark.parametrize("case", FLAGS, ids=case_ids(FLAGS))
def test_flags_file(case, tmp_path):
    text = render("router.args.j2", trusted(case["vars"]), case["workers"])
    assert text.startswith("#\n# Ansible managed: do not edit\n#\n")
    path = tmp_path / "router.args"
    path.write_text(text, encoding="utf-8")
    words = launcher.read_flags(str(path))
    parsed, flag = {}, None
    for word in words:
        if word.startswith("--"):
            flag = word
            parsed[flag] = []
        else:
            parsed[flag].append(word)
    for name, values in case["expect"].items():
        assert parsed.get(name) == values, (name, parsed.get(name))
    for name in case["absent"]:
        assert name not in parsed
    assert not launcher.key_on_command_line(words)


def test_unit():
    unit = render("vllm-router.service.j2")
    assert unit.startswith("#\n# Ansible managed: do not edit\n#\n")
    lines = unit.splitlines()
    for expected in ("User=vllm-router", "Group=vllm-router", "Type=exec", "Restart=always", "RestartSec=5",
                     "RestartPreventExitStatus=2", "EnvironmentFile=-/etc/vllm-router/secrets.env",
                     "ExecStart=/opt/vllm-router/venv/bin/python -I -B -u /usr/local/lib/gpuhost-inference/vllm_router_start.py "
                     "/etc/vllm-router/router.args",
                     'Environment="VLLM_ROUTER_SLL_SESSION_EXPIRATION_IN_S=7200"',
                     "NoNewPrivileges=true", "CapabilityBoundingSet=", "ProtectSystem=strict", "ProtectHome=true",
                     "PrivateTmp=true", "DevicePolicy=closed", "MemoryDenyWriteExecute=true",
                     "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK", "SystemCallFilter=@system-service",
                     "WantedBy=multi-user.target"):
        assert expected in lines, expected
    # Nothing writable, no secret in the world-readable unit.
    assert not any(line.startswith("ReadWritePaths=") for line in lines)
    assert "api-key" not in unit and "VLLM_ROUTER_API_KEY=" not in unit


def test_unit_extra_settings():
    unit = render("vllm-router.service.j2", {"vllm_router_unit_extra_settings": {"CPUQuota": "200%", "Environment": ["A=1", "B=2"]}})
    lines = unit.splitlines()
    assert "CPUQuota=200%" in lines and "Environment=A=1" in lines and "Environment=B=2" in lines


@pytest.mark.parametrize("key, expected", [("s3cret", "VLLM_ROUTER_API_KEY='s3cret'"), ("", None)])
def test_secrets_file(key, expected):
    text = render("secrets.env.j2", key=key)
    assert text.startswith("#\n# Ansible managed: do not edit\n#\n")
    assignments = [line for line in text.splitlines() if line and not line.startswith("#")]
    assert assignments == ([expected] if expected else [])


def test_secret_and_flags_tasks():
    secrets = task("configure.yml", "Write the router's API key to the root-only secrets env file")
    assert secrets["ansible.builtin.template"]["mode"] == "0600" and secrets["no_log"] is True and secrets["diff"] is False
    flags = task("configure.yml", "Write the router's flags file")
    assert flags["ansible.builtin.template"]["validate"].endswith("{{ _vllm_router_launcher }} --check %s")
    # Every key-handling set_fact of the preflight keeps the keys out of the log.
    for t in tasks("preflight.yml"):
        if "ansible.builtin.set_fact" in t and any("key" in k for k in t["ansible.builtin.set_fact"]):
            assert t.get("no_log") is True, t["name"]


def test_main_only_orchestrates():
    main = tasks("main.yml")
    assert [t.get("ansible.builtin.import_tasks") or t.get("ansible.builtin.meta")
            or t.get("ansible.builtin.include_tasks", {}).get("file") for t in main] == \
        ["preflight.yml", "install.yml", "configure.yml", "flush_handlers", "service.yml", "agent_configs.yml"]
    # The preflight is skipped only where site.yml's first play checked the router's inputs in this run.
    assert main[0]["when"] == "'vllm_router' not in (__site_checked_roles | default([]))"


def test_policy_default_is_a_policy_of_the_router():
    spec = load("meta", "argument_specs.yml")["argument_specs"]["main"]["options"]
    defaults = load("defaults", "main.yml")
    assert defaults["vllm_router_policy"] == "sticky_least_loaded"
    policies = {"random", "round_robin", "cache_aware", "power_of_two", "consistent_hash", "sticky_least_loaded"}
    assert set(spec["vllm_router_policy"]["choices"]) <= policies


# The launcher, files/vllm_router_start.py.

def test_read_flags_skips_comments_and_keeps_quoted_words(tmp_path):
    path = tmp_path / "router.args"
    path.write_text("# header\n\n--host 127.0.0.1  # trailing\n--worker-urls http://a:1 'http://b:2'\n--disable-retries\n",
                    encoding="utf-8")
    assert launcher.read_flags(str(path)) == ["--host", "127.0.0.1", "--worker-urls", "http://a:1", "http://b:2", "--disable-retries"]


def test_read_flags_names_the_bad_line(tmp_path):
    path = tmp_path / "router.args"
    path.write_text("--host 127.0.0.1\n--policy 'unclosed\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        launcher.read_flags(str(path))


@pytest.mark.parametrize("words, expected", [(["--api-key", "k"], True), (["--api-key=k"], True),
                                             (["--host", "x", "--api-keys"], False), ([], False)])
def test_key_on_command_line(words, expected):
    assert launcher.key_on_command_line(words) is expected


def test_strip_ansi():
    line = b"\x1b[2m2026-12-04 14:23:26\x1b[0m \x1b[32m INFO\x1b[0m \x1b[2mvllm_router_rs::server\x1b[0m\x1b[2m:\x1b[0m ready\n"
    assert launcher.strip_ansi(line) == b"2026-12-04 14:23:26  INFO vllm_router_rs::server: ready\n"


def test_copy_without_colours_keeps_split_lines_whole():
    source_r, source_w = os.pipe()
    sink_r, sink_w = os.pipe()
    os.write(source_w, b"\x1b[32mone\x1b[0m\ntw")
    os.write(source_w, b"o \x1b[1mbold\x1b[0m\nno newline \x1b[0")
    os.write(source_w, b"m at the end")
    os.close(source_w)
    launcher.copy_without_colours(source_r, sink_w, chunk=5)
    os.close(sink_w)
    out = b""
    while True:
        data = os.read(sink_r, 4096)
        if not data:
            break
        out += data
    os.close(source_r)
    os.close(sink_r)
    assert out == b"one\ntwo bold\nno newline  at the end"


@pytest.fixture
def fake_router(monkeypatch):
    """A stand-in for vllm_router.launch_router: its parser keeps the words, launch_router records the args."""
    launched = []

    class Args(types.SimpleNamespace):
        def _validate_router_args(self):
            if "--bad" in self.words:
                raise ValueError("PD disaggregation mode requires --prefill")

    def parse_router_args(words):
        urls = words[words.index("--worker-urls") + 1:] if "--worker-urls" in words else []
        return Args(words=list(words), policy="sticky_least_loaded", worker_urls=[u for u in urls if not u.startswith("--")],
                    api_key=None)

    module = types.ModuleType("vllm_router.launch_router")
    module.parse_router_args = parse_router_args
    module.launch_router = launched.append
    package = types.ModuleType("vllm_router")
    package.launch_router = module
    monkeypatch.setitem(sys.modules, "vllm_router", package)
    monkeypatch.setitem(sys.modules, "vllm_router.launch_router", module)
    monkeypatch.setattr(launcher, "_uncoloured_output", lambda: None)
    return launched


def test_check_parses_with_the_routers_parser(fake_router, tmp_path, capsys):
    path = tmp_path / "router.args"
    path.write_text("--worker-urls http://a:1 http://b:2\n", encoding="utf-8")
    assert launcher.main(["--check", str(path)]) == 0
    assert "policy sticky_least_loaded, 2 worker(s): http://a:1 http://b:2" in capsys.readouterr().out
    assert fake_router == []
    path.write_text("--bad\n", encoding="utf-8")
    assert launcher.main(["--check", str(path)]) == 2
    assert "requires --prefill" in capsys.readouterr().err


def test_start_takes_the_key_from_the_environment(fake_router, tmp_path, monkeypatch):
    path = tmp_path / "router.args"
    path.write_text("--worker-urls http://a:1\n", encoding="utf-8")
    monkeypatch.setenv(launcher.KEY_ENV, " s3cret\n")
    assert launcher.main([str(path)]) == 0
    assert fake_router[0].api_key == "s3cret" and "s3cret" not in fake_router[0].words
    assert launcher.KEY_ENV not in os.environ
    monkeypatch.delenv(launcher.KEY_ENV, raising=False)
    assert launcher.main([str(path)]) == 0
    assert fake_router[1].api_key is None


@pytest.mark.parametrize("argv, content, message", [
    ([], None, "usage:"),
    (["a", "b"], None, "usage:"),
    (["missing"], None, "cannot read the flags file"),
    (["FILE"], "--host 127.0.0.1\n--api-key s3cret\n", "the key belongs in VLLM_ROUTER_API_KEY"),
])
def test_refusals_exit_2(fake_router, tmp_path, capsys, argv, content, message):
    if content is not None:
        path = tmp_path / "router.args"
        path.write_text(content, encoding="utf-8")
        argv = [str(path) if a == "FILE" else a for a in argv]
    else:
        argv = [str(tmp_path / a) if a == "missing" else a for a in argv]
    assert launcher.main(argv) == 2
    assert message in capsys.readouterr().err
    assert fake_router == []


# playbooks/site.yml: the router plays.

def test_site_router_plays():
    plays = yaml.safe_load(open(os.path.join(ROOT, "playbooks", "site.yml"), encoding="utf-8"))
    names = [p["name"] for p in plays]
    preflight = names.index("Preflight - check every input before anything on the host changes")
    gpu = names.index("Turn GPU boxes into tuned, power-capped, verified vLLM servers")
    router = names.index("Put vLLM's router in front of the GPU boxes")
    # The router's play follows the boxes' (the front door's and the fleet Prometheus's come after it).
    assert preflight == 0 < gpu < router
    assert plays[router]["hosts"] == "vllm_routers"
    assert [r["role"] for r in plays[router]["roles"]] == ["gpuhost.inference.vllm_router"]
    # The router's inputs are checked in the first play from the role list (tests/unit/playbooks/test_role_list.py),
    # where a refused router stops the run (stops_the_run: the checks imported with any_errors_fatal).
    with open(os.path.join(ROOT, "playbooks", "vars", "roles.yml"), encoding="utf-8") as fh:
        listed = yaml.safe_load(fh)["gpuhost_roles"]
    assert {"role": "vllm_router", "group": "vllm_routers", "stops_the_run": True} in [
        {key: entry.get(key) for key in ("role", "group", "stops_the_run")} for entry in listed]
    fatal = [t for t in plays[preflight]["tasks"] if t.get("any_errors_fatal")]
    assert [t["ansible.builtin.import_tasks"] for t in fatal] == ["tasks/site_preflight.yml"]
