"""roles/front_door: its templates rendered by Ansible's own templar from the role's defaults/main.yml and vars/main.yml,
then the real nginx (Debian's package: on PATH, else unpacked from the lab's apt pool) started on loopback with that
configuration in front of a capturing backend and the vLLM test double, and the route x header matrix sent through it
over TLS verified with a CA that the role's own tls.yml made (cases in data/front_door_cases.yaml). The preflight's
bind and variable checks are run by ansible-playbook on localhost (cases in the same file).
"""
from __future__ import annotations

import base64
import fcntl
import glob
import http.client
import http.server
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.gpuhost.inference.tests.unit.doubles.test_vllm_double import Double
from ansible_collections.gpuhost.inference.tests.unit.paths import ROOT, case_ids, load_cases
from ansible_collections.gpuhost.inference.tests.unit.playbook_run import run_playbook
from ansible_collections.gpuhost.inference.tests.unit.plugins.filter.matrix import matrix_cases
from ansible_collections.gpuhost.inference.tests.unit.ports import free_port
from ansible_collections.gpuhost.inference.tests.unit.templating import trusted

ROLE = os.path.join(ROOT, "roles", "front_door")
CASES = load_cases("front_door_cases.yaml")
UPSTREAM_KEY = "upstream-key-0123456789abcdef0123456789"
CLIENTS = CASES["clients"]
REVOKED = CASES["revoked"]


def load(*parts):
    with open(os.path.join(ROLE, *parts), encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def templar(overrides=None, clients=None, upstream_env=None):
    variables = {"ansible_facts": {"os_family": "Debian"}, "ansible_managed": "Ansible managed: do not edit",
                 "inventory_hostname": "door", "groups": {"gpu_servers": ["door"]},
                 "vllm_service_host": "127.0.0.1", "vllm_service_port": 8000,
                 "vllm_service_config_dir": "/etc/vllm",
                 "__front_door_clients": clients if clients is not None else {},
                 "__front_door_upstream_env": ({"content": base64.b64encode(upstream_env.encode()).decode()}
                                               if upstream_env is not None else {"failed": True})}
    for key_, value in {**load("defaults", "main.yml"), **load("vars", "main.yml")}.items():
        variables[key_] = trusted(value)
    variables.update(overrides or {})
    return Templar(loader=DataLoader(), variables=variables)


def render(name, overrides=None, clients=None, upstream_env=None):
    with open(os.path.join(ROLE, "templates", name), encoding="utf-8") as fh:
        return templar(overrides, clients, upstream_env).template(trust_as_template(fh.read()))


# ------------------------------------------------------------------ nginx, the Debian package

def _nginx_binary(folder):
    for path in (shutil.which("nginx"), "/usr/sbin/nginx"):
        if path and os.access(path, os.X_OK):
            return path
    pool = os.environ.get("APT_POOL") or os.path.join(os.environ.get("GPUHOST_CACHE", "/var/tmp/gpuhost-cache"), "apt", "lab")
    debs = sorted(glob.glob(os.path.join(pool, "nginx_*.deb")))
    if not debs or not shutil.which("dpkg-deb"):
        pytest.skip("no nginx: neither installed nor in the lab's apt pool (scripts/apt-pool.sh puts it there)")
    subprocess.run(["dpkg-deb", "-x", debs[-1], str(folder)], check=True)
    return str(folder / "usr" / "sbin" / "nginx")


def once_per_run(tmp_path_factory, name, make):
    """`make(folder)` once per test run, its result kept as JSON beside the folder. ansible-test runs each test in a
    fork of its own (its ansible_forked plugin), so a module-scoped fixture would run once per test: made under the
    run's shared base folder instead (xdist gives each worker a folder under it), behind a lock for the workers."""
    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent
    folder = base / name
    with open(base / (name + ".lock"), "a+", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = base / (name + ".json")
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            done.write_text(json.dumps(make(folder)), encoding="utf-8")
        return json.loads(done.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def nginx_bin(tmp_path_factory):
    return once_per_run(tmp_path_factory, "front-door-nginx", _nginx_binary)


# tls.yml alone; the play ends before the reload it notifies (no nginx service here).
TLS_TASKS = [{"name": "TLS", "ansible.builtin.include_role": {"name": "gpuhost.inference.front_door", "tasks_from": "tls.yml"}},
             {"name": "No handlers", "ansible.builtin.meta": "end_play"}]


def make_lab_tls(tmp):
    """The role's tls.yml on localhost, twice (the second changes nothing): a lab CA and a certificate for localhost,
    copied into a config dir. Also used by benchmarks/front_door_ttft.py --local."""
    (tmp / "conf").mkdir(mode=0o700)   # install.yml makes it on a host
    extra = {"front_door_lab_ca_dir": str(tmp / "ca"), "front_door_config_dir": str(tmp / "conf"),
             "front_door_listen_host": "127.0.0.1"}
    result = run_playbook(tmp, TLS_TASKS, extra)
    assert result.returncode == 0, result.stdout + result.stderr
    again = run_playbook(tmp, TLS_TASKS, extra)
    assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout + again.stderr
    return {"ca": str(tmp / "ca" / "ca.crt"), "conf": str(tmp / "conf")}


@pytest.fixture(scope="module")
def lab_tls(tmp_path_factory):
    return once_per_run(tmp_path_factory, "front-door-tls", make_lab_tls)


class Capture(http.server.ThreadingHTTPServer):
    """A backend that answers every request with what it received (method, path with query, headers) as JSON; on
    /v1/completions with "stream": true it sends one SSE event, then waits for the test to say it saw it."""

    daemon_threads = True

    def __init__(self):
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), CaptureHandler)


class CaptureHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def _answer(self):
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        if self.path.startswith("/v1/completions") and b'"stream": true' in body:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            for event, wait in ((b"data: first\n\n", True), (b"data: [DONE]\n\n", False)):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.flush()
                if wait:
                    self.server.release.wait(20)
            self.wfile.write(b"0\r\n\r\n")
            return
        payload = json.dumps({"method": self.command, "path": self.path, "body_bytes": len(body),
                              "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    do_GET = do_POST = do_PUT = do_DELETE = _answer


class Nginx:
    """nginx started in the foreground on loopback with the role's rendered site, its maps and upstream header."""

    def __init__(self, nginx_bin, tmp_path, upstream_port, tls=None, overrides=None, upstream_env=None):
        self.port = free_port()
        self.dir = tmp_path / ("nginx-%d" % self.port)
        conf = self.dir / "conf"
        conf.mkdir(parents=True)
        (self.dir / "logs").mkdir()
        self.log = self.dir / "logs" / "access.log"
        clients = {k: v for k, v in CLIENTS.items() if k not in REVOKED}
        variables = {"front_door_listen_host": "127.0.0.1", "front_door_port": self.port,
                     "front_door_config_dir": str(conf), "front_door_access_log": str(self.log),
                     "vllm_service_port": upstream_port, "front_door_revoked_clients": REVOKED}
        if tls is None:
            variables["front_door_allow_plain_http"] = True
        else:
            variables["front_door_config_dir"] = tls["conf"]
            variables["_front_door_bearer_map"] = str(conf / "clients-bearer.map")
            variables["_front_door_xkey_map"] = str(conf / "clients-x-api-key.map")
            variables["_front_door_upstream_conf"] = str(conf / "upstream-auth.conf")
        variables.update(overrides or {})
        env = ("VLLM_API_KEY='%s'\n" % UPSTREAM_KEY) if upstream_env is None else upstream_env
        (conf / "clients-bearer.map").write_text(render("clients-bearer.map.j2", variables, clients), encoding="utf-8")
        (conf / "clients-x-api-key.map").write_text(render("clients-x-api-key.map.j2", variables, clients), encoding="utf-8")
        (conf / "upstream-auth.conf").write_text(render("upstream-auth.conf.j2", variables, clients, env), encoding="utf-8")
        self.site = render("gpuhost-front-door.conf.j2", variables, clients, env)
        (conf / "site.conf").write_text(self.site, encoding="utf-8")
        # The frame Debian's nginx.conf gives a conf.d file (http block, mime types), pointed at this folder.
        (self.dir / "nginx.conf").write_text(
            # As root, the workers too (the default `nobody` cannot enter pytest's folders to buffer a body).
            ("user root;\n" if os.geteuid() == 0 else "") +
            "worker_processes 1;\npid %s/nginx.pid;\nerror_log %s/logs/error.log;\ndaemon off;\n"
            "events { worker_connections 256; }\nhttp {\n  default_type application/octet-stream;\n"
            "  client_body_temp_path %s/body;\n  proxy_temp_path %s/proxy;\n  fastcgi_temp_path %s/fastcgi;\n"
            "  uwsgi_temp_path %s/uwsgi;\n  scgi_temp_path %s/scgi;\n  include %s;\n}\n"
            % ((self.dir,) * 7 + (conf / "site.conf",)), encoding="utf-8")
        check = subprocess.run([nginx_bin, "-t", "-q", "-p", str(self.dir), "-e", str(self.dir / "logs" / "error.log"),
                                "-c", str(self.dir / "nginx.conf")], capture_output=True, text=True, check=False)
        assert check.returncode == 0, check.stderr + self.site
        self.proc = subprocess.Popen([nginx_bin, "-p", str(self.dir), "-e", str(self.dir / "logs" / "error.log"),
                                      "-c", str(self.dir / "nginx.conf")], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
        self.context = None
        if tls is not None:
            self.context = ssl.create_default_context(cafile=tls["ca"])
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                assert self.proc.poll() is None, self.proc.stderr.read()
                time.sleep(0.05)
        raise AssertionError("nginx did not listen")

    def connection(self, host="127.0.0.1", timeout=30):
        if self.context is None:
            return http.client.HTTPConnection(host, self.port, timeout=timeout)
        return http.client.HTTPSConnection(host, self.port, timeout=timeout, context=self.context)

    def request(self, method, path, headers=None, body=None, host="127.0.0.1"):
        conn = self.connection(host)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def capture():
    server = Capture()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.shutdown()
    server.server_close()


@pytest.fixture
def door(nginx_bin, tmp_path, capture, lab_tls):
    started = []

    def start(upstream_port=None, tls=True, **kwargs):
        n = Nginx(nginx_bin, tmp_path, upstream_port or capture.server_address[1], lab_tls if tls else None, **kwargs)
        started.append(n)
        return n

    yield start
    for n in started:
        n.stop()


def headers_of(case):
    return {k: (v.format(**CLIENTS) if isinstance(v, str) else v) for k, v in (case.get("headers") or {}).items()}


# ------------------------------------------------------------------ the matrix through real nginx

MATRIX = CASES["matrix"]


@pytest.mark.parametrize("case", MATRIX, ids=case_ids(MATRIX))
def test_route_by_header_matrix(door, case):
    n = door()
    body = json.dumps({"model": "m", "prompt": "hi"}).encode() if case["method"] == "POST" else None
    status, payload = n.request(case["method"], case["path"], headers_of(case), body)
    assert status == case["status"], payload
    if status == 200:
        seen = json.loads(payload)
        # The query string is kept, the upstream gets its own key and never the client's.
        assert seen["path"] == case["path"]
        assert seen["headers"]["authorization"] == "Bearer " + UPSTREAM_KEY
        assert "x-api-key" not in seen["headers"]
        assert seen["headers"]["x-gpuhost-client"] == case["client"]
    if status == 401:
        assert json.loads(payload)["error"]["type"] == "authentication_error"
    # nginx writes the line once the response is sent: wait for it.
    deadline = time.monotonic() + 60
    log = ""
    while time.monotonic() < deadline and "client=" not in log:
        log = n.log.read_text(encoding="utf-8") if n.log.exists() else ""
        time.sleep(0.02)
    for key in CLIENTS.values():
        assert key not in log
    assert "client=%s " % case.get("client", "-") in log, log


def test_no_upstream_key_sends_no_authorization(door):
    n = door(upstream_env="# no key\n")
    status, payload = n.request("GET", "/v1/models", {"Authorization": "Bearer " + CLIENTS["alice"]})
    assert status == 200
    assert "authorization" not in json.loads(payload)["headers"]


def test_body_limit_fits_a_256k_token_prompt_and_no_more(door):
    n = door()
    limit = 262144 * 16
    ok = b"x" * (limit - 64)
    headers = {"x-api-key": CLIENTS["bob"], "content-type": "application/json"}
    status, payload = n.request("POST", "/v1/completions", headers, ok)
    assert status == 200, payload
    assert json.loads(payload)["body_bytes"] == len(ok)
    # nginx answers 413 from the Content-Length, before reading the body.
    conn = n.connection()
    conn.putrequest("POST", "/v1/completions")
    conn.putheader("x-api-key", CLIENTS["bob"])
    conn.putheader("content-length", str(limit + 1))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()


def test_sse_passes_unbuffered(door, capture):
    """The backend sends one event and then waits until the client saw it: a buffering proxy never delivers it."""
    n = door()
    conn = n.connection(timeout=10)
    conn.request("POST", "/v1/completions", body=b'{"stream": true}',
                 headers={"Authorization": "Bearer " + CLIENTS["alice"], "content-type": "application/json"})
    resp = conn.getresponse()
    assert resp.status == 200
    first = resp.readline()   # chunked decoding; returns once the first event's line arrived
    capture.release.set()
    rest = resp.read()
    conn.close()
    assert first.startswith(b"data: first") and b"[DONE]" in rest


def test_tls_is_verified_with_the_lab_ca_and_is_1_2_or_later(door, lab_tls):
    n = door()
    status = n.request("GET", "/health", {"x-api-key": CLIENTS["alice"]}, host="localhost")[0]
    assert status == 200
    old = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    old.load_verify_locations(lab_tls["ca"])
    old.minimum_version = old.maximum_version = ssl.TLSVersion.TLSv1_1  # the version refused
    with pytest.raises((ssl.SSLError, OSError)):
        with socket.create_connection(("127.0.0.1", n.port), timeout=5) as raw:
            with old.wrap_socket(raw, server_hostname="localhost"):
                pass
    untrusted = ssl.create_default_context()
    with pytest.raises(ssl.SSLCertVerificationError):
        with socket.create_connection(("127.0.0.1", n.port), timeout=5) as raw:
            with untrusted.wrap_socket(raw, server_hostname="localhost"):
                pass


def test_through_the_vllm_double_with_its_own_key(door, tmp_path):
    """The real shape of a GPU box: the double checks the upstream key only; clients use their own keys."""
    double = Double(tmp_path, settings={"api_key": UPSTREAM_KEY, "served_model_name": "lab-model"})
    try:
        n = door(upstream_port=double.port)
        body = json.dumps({"model": "lab-model", "prompt": "hello", "max_tokens": 4, "stream": True}).encode()
        for headers in ({"Authorization": "Bearer " + CLIENTS["alice"]}, {"x-api-key": CLIENTS["bob"]}):
            status, payload = n.request("POST", "/v1/completions?x=1", dict(headers, **{"content-type": "application/json"}), body)
            assert status == 200, payload
            assert payload.rstrip().endswith(b"data: [DONE]")
        status = n.request("GET", "/v1/models", {"Authorization": "Bearer " + UPSTREAM_KEY})[0]
        assert status == 401
        status = n.request("GET", "/metrics", {"x-api-key": CLIENTS["alice"]})[0]
        assert status == 404
        # Direct to the double without a key: 401 (the door's key is what lets it in).
        conn = http.client.HTTPConnection("127.0.0.1", double.port, timeout=10)
        conn.request("GET", "/v1/models")
        assert conn.getresponse().status == 401
        conn.close()
    finally:
        double.stop()


# ------------------------------------------------------------------ rendering

def test_site_holds_no_secret_and_names_its_limits():
    clients = {k: v for k, v in CLIENTS.items() if k not in REVOKED}
    site = render("gpuhost-front-door.conf.j2", {"front_door_revoked_clients": REVOKED}, clients,
                  "VLLM_API_KEY=%s\n" % UPSTREAM_KEY)
    assert site.startswith("#\n# Ansible managed: do not edit\n#\n")
    for key in list(CLIENTS.values()) + [UPSTREAM_KEY]:
        assert key not in site
    assert "ssl_protocols TLSv1.2 TLSv1.3;" in site
    assert "client_max_body_size 4194304;" in site
    assert "proxy_buffering off;" in site and "proxy_read_timeout 1800s;" in site
    assert "listen 0.0.0.0:443 ssl;" in site
    for route in ("/metrics", "/add_worker", "/load", "/server_info"):
        assert "location = %s " % route not in site


def test_revoked_client_is_not_in_the_maps():
    clients = {k: v for k, v in CLIENTS.items() if k not in REVOKED}
    text = render("clients-bearer.map.j2", {}, clients) + render("clients-x-api-key.map.j2", {}, clients)
    for name in REVOKED:
        assert CLIENTS[name].replace("+", "\\+") not in text
    assert " alice;" in text


def test_plain_http_only_by_opt_in():
    site = render("gpuhost-front-door.conf.j2", {"front_door_allow_plain_http": True}, {}, "")
    assert "ssl_certificate" not in site and "PLAIN HTTP" in site


# ------------------------------------------------------------------ the preflight (ansible-playbook on localhost)

PREFLIGHT = CASES["preflight"]


@pytest.mark.parametrize("case", PREFLIGHT, ids=case_ids(PREFLIGHT))
def test_preflight(tmp_path, case):
    tasks = [{"name": "Groups", "ansible.builtin.add_host": {"name": "localhost", "groups": case.get("groups", ["gpu_servers"])}},
             {"name": "Routers", "ansible.builtin.add_host": {"name": "gateway", "groups": ["vllm_routers"]}},
             {"name": "Preflight", "ansible.builtin.include_role": {"name": "gpuhost.inference.front_door",
                                                                    "tasks_from": "preflight.yml"}}]
    if not case.get("router"):
        tasks.pop(1)
    result = run_playbook(tmp_path, tasks, case["vars"])
    out = result.stdout + result.stderr
    if case.get("errors"):
        assert result.returncode != 0, out
        for text in case["errors"]:
            assert text in out, out
        assert "Nothing was changed on the host" in out or "nothing was changed on the host" in out
    else:
        assert result.returncode == 0, out
    for key in CLIENTS.values():
        assert key not in out


def test_the_lab_apt_pool_holds_nginx():
    with open(os.path.join(ROOT, "scripts", "apt-pool.sh"), encoding="utf-8") as handle:
        line = next(ln for ln in handle if ln.startswith("PACKAGES=${APT_POOL_PACKAGES:-"))
    pool = line.split(":-", 1)[1].rstrip("}\n").split()
    assert set(load("defaults", "main.yml")["front_door_packages"]) <= set(pool)


# The bad-input matrix's cases of the door's preflight (molecule default, faults; issue 42.5): the role's preflight run
# by ansible-playbook on the controller (its checks run there) refuses each with the message the matrix looks for.
PREFLIGHT_TASKS = [{"name": "Preflight",
                    "ansible.builtin.include_role": {"name": "gpuhost.inference.front_door", "tasks_from": "preflight.yml"}}]


@pytest.mark.parametrize("name", sorted(n for n in matrix_cases() if n.startswith("door_")))
def test_matrix_door_case_refused_by_the_preflight(tmp_path, name):
    bad, expected = matrix_cases()[name]
    result = run_playbook(tmp_path, PREFLIGHT_TASKS, bad)
    assert result.returncode != 0, result.stdout[-2000:]
    missing = [s for s in expected if s not in result.stdout]
    assert not missing, "matrix case %s looks for %r:\n%s" % (name, missing, result.stdout[-3000:])


# tasks/unmanaged.yml: a door an earlier run installed, in a run that does not manage it (front_door_enabled false).
# Local files stand for the host's (root here: no privilege change); the play ends before the reload it notifies.
UNMANAGED_TASKS = [{"name": "Unmanaged", "ansible.builtin.include_role": {"name": "gpuhost.inference.front_door",
                                                                          "tasks_from": "unmanaged.yml"}},
                   {"name": "No handlers", "ansible.builtin.meta": "end_play"}]


def _unmanaged(tmp_path, server_key, door_key=None):
    """The door's config dir (with its upstream header when door_key is not None) and vLLM's secrets file."""
    (tmp_path / "door").mkdir(exist_ok=True)
    (tmp_path / "vllm").mkdir(exist_ok=True)
    (tmp_path / "vllm" / "secrets.env").write_text("VLLM_API_KEY=%s\n" % server_key, encoding="utf-8")
    conf = tmp_path / "door" / "upstream-auth.conf"
    if door_key is not None:
        conf.write_text('proxy_set_header Authorization "Bearer %s";\n' % door_key, encoding="utf-8")
    extra = {"front_door_config_dir": str(tmp_path / "door"), "vllm_service_config_dir": str(tmp_path / "vllm"),
             "ansible_become": False}
    return conf, extra


def test_an_unmanaged_door_follows_the_servers_key(tmp_path):
    old, new = "old-server-key-0123456789abcdef0123", "new-server-key-0123456789abcdef0123"
    conf, extra = _unmanaged(tmp_path, new, door_key=old)
    first = run_playbook(tmp_path, UNMANAGED_TASKS, extra)
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    assert 'proxy_set_header Authorization "Bearer %s";' % new in conf.read_text(encoding="utf-8")
    assert "not managed in this run" in out and "changed with the one in %s/secrets.env" % (tmp_path / "vllm") in out, out
    again = run_playbook(tmp_path, UNMANAGED_TASKS, extra)
    out = again.stdout + again.stderr
    assert again.returncode == 0 and "changed=0" in out and "the key it sends to vLLM is the one in" in out, out
    assert old not in out + first.stdout and new not in out + first.stdout


def test_no_door_on_the_host_nothing_is_written(tmp_path):
    conf, extra = _unmanaged(tmp_path, "server-key-0123456789abcdef0123456789")
    result = run_playbook(tmp_path, UNMANAGED_TASKS, extra)
    assert result.returncode == 0 and "changed=0" in result.stdout, result.stdout + result.stderr
    assert not conf.exists() and "not managed in this run" not in result.stdout


def test_an_unmanaged_door_refuses_a_key_nginx_cannot_send_and_keeps_its_file(tmp_path):
    old = "old-server-key-0123456789abcdef0123"
    conf, extra = _unmanaged(tmp_path, "new$server-key-0123456789abcdef0123", door_key=old)
    before = conf.read_text(encoding="utf-8")
    result = run_playbook(tmp_path, UNMANAGED_TASKS, extra)
    out = result.stdout + result.stderr
    assert result.returncode != 0 and "VLLM_API_KEY in %s/secrets.env" % (tmp_path / "vllm") in out, out
    assert "'$'" in out and "The door's files were not changed" in out, out
    assert conf.read_text(encoding="utf-8") == before and "new$server" not in out
