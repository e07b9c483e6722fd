"""The mocked nvidia-smi (a test double, tests/doubles/nvidia_smi_mock.py) against the real capture.

The mock runs as a subprocess, as the roles and modules run it. Its output must equal the
captured H200 output byte for byte once live values (power draw, timestamps) are masked.
"""
from __future__ import annotations

import json
import os
import pwd
import re
import shlex
import shutil
import subprocess
import tempfile
import time

import pytest

from ansible_collections.gpuhost.inference.tests.unit.paths import FIXTURES as ALL_FIXTURES, read_fixture
from ansible_collections.gpuhost.inference.tests.unit.paths import SMI_MOCK as MOCK, load_script

LIVE_FIELDS = ("power.draw", "power.draw.average", "power.draw.instant", "timestamp")
H200_BUS = "00000000:00:06.0"
RTX_BUS = ("00000000:01:00.0", "00000000:02:00.0")


def fixture(name):
    return read_fixture("nvidia-smi", "h200-580.159.04", name)


def load_mock_module():
    return load_script("nvidia_smi_mock", MOCK)


def fixture_sections():
    """nvidia-smi-queries.txt -> [(args, output, rc)]."""
    sections = []
    for block in fixture("nvidia-smi-queries.txt").split("### nvidia-smi")[1:]:
        command, _nl, rest = block.partition("\n")
        output, _sep, rc = rest.rpartition("rc=")
        sections.append((shlex.split(command), output, int(rc.strip())))
    return sections


class Box:
    """A mock state in a world-readable temp dir (so that 'nobody' can read it too)."""

    def __init__(self, profile):
        self.dir = tempfile.mkdtemp(prefix="smi-mock-")
        os.chmod(self.dir, 0o755)
        self.state = os.path.join(self.dir, "state.json")
        self.env = dict(os.environ, NVIDIA_SMI_MOCK_STATE=self.state)
        assert self.run("--mock-init", profile).returncode == 0

    def run(self, *args, user=None, timeout=30):
        preexec = None
        if user is not None:
            entry = pwd.getpwnam(user)

            def preexec():
                os.setgid(entry.pw_gid)
                os.setgroups([])
                os.setuid(entry.pw_uid)
        return subprocess.run([MOCK] + list(args), env=self.env, capture_output=True, text=True,
                              timeout=timeout, preexec_fn=preexec, check=False)

    def read(self):
        with open(self.state, encoding="utf-8") as handle:
            return json.load(handle)

    def limits(self):
        return [g["power_limit_w"] for g in self.read()["gpus"]]


@pytest.fixture
def h200():
    box = Box("h200")
    yield box
    shutil.rmtree(box.dir)


@pytest.fixture
def rtx2():
    box = Box("rtx3090x2")
    yield box
    shutil.rmtree(box.dir)


def mask_query(args, text):
    """Replace the cells of live fields in --query-gpu output with <live>."""
    fields = None
    for arg in args:
        if arg.startswith("--query-gpu="):
            fields = arg.split("=", 1)[1].split(",")
    if fields is None:
        return text
    live = [i for i, f in enumerate(fields) if f in LIVE_FIELDS]
    lines = text.split("\n")
    header = not any("noheader" in a for a in args)
    for n, line in enumerate(lines):
        if not line or (header and n == 0) or line.startswith("No devices") or line.startswith("Field "):
            continue
        cells = line.split(", ")
        for i in live:
            cells[i] = "<live>"
        lines[n] = ", ".join(cells)
    return "\n".join(lines)


# ------------------------------------------------------------------ byte for byte vs the capture

@pytest.mark.parametrize("args,expected,rc", fixture_sections(), ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_matches_captured_queries(h200, args, expected, rc):
    result = h200.run(*args)
    assert result.returncode == rc
    assert mask_query(args, result.stdout) == mask_query(args, expected)
    assert result.stderr == ""


def test_live_power_draw_is_plausible(h200):
    result = h200.run("--query-gpu=power.draw,enforced.power.limit", "--format=csv,noheader,nounits")
    draw, limit = (float(v) for v in result.stdout.strip().split(", "))
    assert 80.0 <= draw <= limit == 700.0


def test_q_power_matches_capture(h200):
    expected = fixture("nvidia-smi-q-power.txt").split("\n")
    got = h200.run("-q", "-d", "POWER").stdout.split("\n")
    assert len(got) == len(expected)
    # live lines: Timestamp, average/instant draw, the power samples (duration, max, min, avg)
    live = {3, 10, 11, 18, 20, 21, 22}
    for n, (mine, real) in enumerate(zip(got, expected)):
        if n in live:
            label = real.split(":", 1)[0]
            assert mine.split(":", 1)[0] == label, n
            if n != 3:
                assert re.fullmatch(r" \d+\.\d\d (W|sec)", mine.split(":", 1)[1]), mine
        else:
            assert mine == real, n


def test_default_summary_matches_capture(h200):
    expected = fixture("nvidia-smi-default.txt").split("\n")
    got = h200.run().stdout.split("\n")
    assert len(got) == len(expected)
    for n, (mine, real) in enumerate(zip(got, expected)):
        if n == 0:
            assert re.fullmatch(r"\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4}       ", mine)
        elif n == 9:
            assert re.sub(r" +\d+W /", " xW /", mine) == re.sub(r" +\d+W /", " xW /", real)
        else:
            assert mine == real, n


def test_lms_rows_have_the_captured_format(h200):
    row = re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}, 0, \d+\.\d\d")
    assert all(row.fullmatch(line) for line in fixture("nvidia-smi-lms.txt").splitlines())
    result = h200.run("--query-gpu=timestamp,index,power.draw", "--format=csv,noheader,nounits",
                      "-lms", "100", "--mock-count", "5")
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) == 5
    assert all(row.fullmatch(line) for line in lines), lines
    stamps = [time.mktime(time.strptime(line[:19], "%Y/%m/%d %H:%M:%S")) + int(line[20:23]) / 1000.0 for line in lines]
    gaps = [b - a for a, b in zip(stamps, stamps[1:])]
    # rows in order, paced by -lms over the whole run (one late row on a loaded host is caught up by the next)
    assert all(g > 0 for g in gaps) and 0.3 <= stamps[-1] - stamps[0] <= 5.0, gaps


def test_lms_streams_until_killed_with_header_once(rtx2):
    proc = subprocess.Popen(  # pylint: disable=consider-using-with
        [MOCK, "--query-gpu=index,power.draw", "--format=csv", "-lms", "50"],
        env=rtx2.env, stdout=subprocess.PIPE, text=True)
    lines = [proc.stdout.readline() for _i in range(7)]
    proc.terminate()
    proc.wait(timeout=10)
    proc.stdout.close()
    assert lines[0] == "index, power.draw [W]\n"
    assert [line.split(",")[0] for line in lines[1:]] == ["0", "1", "0", "1", "0", "1"]
    assert all(line.endswith(" W\n") for line in lines[1:])


def test_loop_seconds(h200):
    start = time.monotonic()
    result = h200.run("--query-gpu=index", "--format=csv,noheader", "-l", "1", "--mock-count", "2")
    assert result.stdout == "0\n0\n"
    assert time.monotonic() - start >= 1.0


# ------------------------------------------------------------------ field names and units

def test_every_mock_field_is_a_real_field_name():
    help_text = fixture("nvidia-smi-help-query-gpu.txt")
    mock = load_mock_module()
    for canonical, aliases, _unit, _getter in mock.FIELDS:
        for name in (canonical,) + aliases:
            assert '"%s"' % name in help_text, name
        # the header shows the first name of the help's "a" or "b" line
        line = [ln for ln in help_text.splitlines() if ln.startswith('"%s"' % canonical) or ('or "%s"' % canonical) in ln]
        assert line and line[0].startswith('"%s"' % canonical), canonical


@pytest.mark.parametrize("field,header,value", [
    ("clocks.sm", "clocks.current.sm [MHz]", "345 MHz"),
    ("gpu_name", "name", "NVIDIA H200"),
    ("gpu.power.current_limit", "enforced.power.limit [W]", "700.00 W"),
    ("memory.total", "memory.total [MiB]", "143771 MiB"),
    ("utilization.gpu", "utilization.gpu [%]", "0 %"),
    ("temperature.gpu", "temperature.gpu", "41"),
    ("count", "count", "1"),
    ("fan.speed", "fan.speed [%]", "[N/A]"),
])
def test_headers_and_units(h200, field, header, value):
    result = h200.run("--query-gpu=" + field, "--format=csv")
    assert result.stdout == "%s\n%s\n" % (header, value)
    nounits = h200.run("--query-gpu=" + field, "--format=csv,noheader,nounits").stdout
    assert nounits == re.sub(r" (MHz|W|MiB|%)$", "", value) + "\n"


def test_timestamp_field_format(h200):
    out = h200.run("--query-gpu=timestamp", "--format=csv,noheader").stdout
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}\n", out)


def test_unknown_field_message(h200):
    result = h200.run("--query-gpu=index,nope.nope", "--format=csv,noheader")
    assert (result.returncode, result.stdout) == (2, 'Field "nope.nope" is not a valid field to query.\n\n')


def test_bad_arguments_rc_2(h200):
    assert h200.run("--bogus").returncode == 2
    assert h200.run("--query-gpu=index").returncode == 2
    assert h200.run("--query-gpu=index", "--format=json").returncode == 2
    assert h200.run("-pl", "abc").returncode == 2


# ------------------------------------------------------------------ -i

def test_i_selects_by_index_uuid_and_bus_id(rtx2):
    uuid1 = rtx2.read()["gpus"][1]["uuid"]
    for ident in ("1", uuid1, RTX_BUS[1]):
        assert rtx2.run("-i", ident, "--query-gpu=index", "--format=csv,noheader").stdout == "1\n"
    assert rtx2.run("-i", "1,0", "--query-gpu=index", "--format=csv,noheader").stdout == "1\n0\n"


@pytest.mark.parametrize("ids", ["7", "0,7", "GPU-nope"])
def test_i_unknown_no_devices(rtx2, ids):
    result = rtx2.run("-i", ids, "--query-gpu=index", "--format=csv")
    assert (result.returncode, result.stdout) == (6, "No devices were found\n")
    assert rtx2.run("-i", ids, "-pl", "250").returncode == 6
    assert rtx2.limits() == [350.0, 350.0]


def test_list_and_q_power_for_two_gpus(rtx2):
    listing = rtx2.run("-L").stdout.splitlines()
    assert [line.split(" (UUID")[0] for line in listing] == ["GPU 0: NVIDIA GeForce RTX 3090", "GPU 1: NVIDIA GeForce RTX 3090"]
    power = rtx2.run("-q", "-d", "POWER").stdout
    assert re.search(r"^Attached GPUs +: 2$", power, re.M)
    assert re.findall(r"^GPU (\S+)$", power, re.M) == list(RTX_BUS)
    assert len(re.findall(r"Min Power Limit +: 100\.00 W", power)) == 2
    assert len(re.findall(r"Max Power Limit +: 350\.00 W", power)) == 2
    only1 = rtx2.run("-q", "-d", "POWER", "-i", "1").stdout
    assert re.findall(r"^GPU (\S+)$", only1, re.M) == [RTX_BUS[1]]


def test_profiles():
    box = Box("rtx3090x1")
    try:
        gpus = box.read()["gpus"]
        assert len(gpus) == 1
        out = box.run("--query-gpu=name,memory.total,power.default_limit,power.min_limit,power.max_limit",
                      "--format=csv,noheader").stdout
        assert out == "NVIDIA GeForce RTX 3090, 24576 MiB, 350.00 W, 100.00 W, 350.00 W\n"
        assert box.run("--mock-init", "nope").returncode == 2
    finally:
        shutil.rmtree(box.dir)


# ------------------------------------------------------------------ -pl

@pytest.mark.parametrize("watts,shown", [("50", "50.00"), ("700.5", "700.50"), ("199.99", "199.99")])
def test_pl_out_of_range_refused_with_the_real_message(h200, watts, shown):
    result = h200.run("-pl", watts)
    assert result.returncode == 2
    assert result.stdout == (
        "Provided power limit %s W is not a valid power limit which should be between 200.00 W and 700.00 W "
        "for GPU %s\nTerminating early due to previous errors.\n" % (shown, H200_BUS))
    assert h200.limits() == [700.0]


def test_pl_non_root_refused(rtx2):
    result = rtx2.run("-pl", "250", user="nobody")
    assert result.returncode == 4
    assert result.stdout == ("Failed to set power management limit for GPU %s: Insufficient Permissions\n"
                             "Terminating early due to previous errors.\n" % RTX_BUS[0])
    assert rtx2.limits() == [350.0, 350.0]
    # the state stays readable for non-root callers
    assert rtx2.run("--query-gpu=power.limit", "--format=csv,noheader", user="nobody").stdout == "350.00 W\n350.00 W\n"


def test_pl_all_gpus(rtx2):
    result = rtx2.run("-pl", "250")
    assert result.returncode == 0
    assert result.stdout == "".join(
        "Power limit for GPU %s was set to 250.00 W from 350.00 W.\n" % bus for bus in RTX_BUS) + "All done.\n"
    assert rtx2.limits() == [250.0, 250.0]
    out = rtx2.run("--query-gpu=power.limit,enforced.power.limit", "--format=csv,noheader,nounits").stdout
    assert out == "250.00, 250.00\n250.00, 250.00\n"


def test_pl_one_gpu_and_from_value(rtx2):
    assert rtx2.run("-i", "1", "-pl", "275").stdout == (
        "Power limit for GPU %s was set to 275.00 W from 350.00 W.\nAll done.\n" % RTX_BUS[1])
    assert rtx2.run("-i", "1", "--power-limit=260").stdout.startswith(
        "Power limit for GPU %s was set to 260.00 W from 275.00 W." % RTX_BUS[1])
    assert rtx2.limits() == [350.0, 260.0]


def test_state_file_atomic_and_world_readable(rtx2):
    rtx2.run("-pl", "300")
    assert os.stat(rtx2.state).st_mode & 0o777 == 0o644
    assert sorted(os.listdir(rtx2.dir)) == ["state.json", "state.json.lock"]


# ------------------------------------------------------------------ -pm

def test_pm(rtx2):
    assert rtx2.run("-i", "0", "-pm", "1").stdout == "Enabled persistence mode for GPU %s.\nAll done.\n" % RTX_BUS[0]
    assert rtx2.run("-pm", "ENABLED").stdout == (
        "Persistence mode is already Enabled for GPU %s.\nEnabled persistence mode for GPU %s.\nAll done.\n" % RTX_BUS)
    assert rtx2.run("-pm", "0").stdout == (
        "Disabled persistence mode for GPU %s.\nDisabled persistence mode for GPU %s.\nAll done.\n" % RTX_BUS)
    assert [g["persistence_mode"] for g in rtx2.read()["gpus"]] == ["Disabled", "Disabled"]
    assert rtx2.run("-pm", "2").returncode == 2


def test_pm_non_root_refused(h200):
    result = h200.run("-pm", "0", user="nobody")
    assert result.returncode == 4
    assert result.stdout == ("Unable to set persistence mode for GPU %s: Insufficient Permissions\n"
                             "Terminating early due to previous errors.\n" % H200_BUS)
    assert h200.read()["gpus"][0]["persistence_mode"] == "Enabled"


# ------------------------------------------------------------------ fault switches

DRIVER_FAIL = ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
               "Make sure that the latest NVIDIA driver is installed and running.\n")


def test_fault_fail(rtx2):
    assert rtx2.run("--mock-set", "fault=fail").returncode == 0
    for args in (["-L"], ["--query-gpu=index", "--format=csv"], ["-pl", "250"], ["--version"], []):
        result = rtx2.run(*args)
        assert (result.returncode, result.stdout) == (9, DRIVER_FAIL), args
    assert rtx2.limits() == [350.0, 350.0]
    assert rtx2.run("--mock-set", "fault=none").returncode == 0
    assert rtx2.run("-L").returncode == 0


def test_fault_no_devices(rtx2):
    rtx2.run("--mock-set", "fault=no_devices")
    for args in (["-L"], ["--query-gpu=index", "--format=csv"], ["-pl", "250"], ["-q", "-d", "POWER"]):
        result = rtx2.run(*args)
        assert (result.returncode, result.stdout) == (6, "No devices were found\n"), args


def test_fault_slow(h200):
    h200.run("--mock-set", "fault=slow", "--mock-set", "slow_seconds=0.6")
    start = time.monotonic()
    result = h200.run("-L")
    assert result.returncode == 0 and time.monotonic() - start >= 0.6
    assert h200.read()["slow_seconds"] == 0.6


def test_fault_pl_unsupported(rtx2):
    rtx2.run("--mock-set", "fault=pl_unsupported")
    result = rtx2.run("-pl", "250")
    assert result.returncode == 0
    assert result.stdout == "".join(
        "Changing power management limit is not supported for GPU: %s.\nTreating as warning and moving on.\n" % bus
        for bus in RTX_BUS) + "All done.\n"
    assert rtx2.limits() == [350.0, 350.0]


def test_fault_pl_permission_even_as_root(rtx2):
    rtx2.run("--mock-set", "fault=pl_permission")
    result = rtx2.run("-i", "1", "-pl", "250")
    assert result.returncode == 4
    assert result.stdout.startswith("Failed to set power management limit for GPU %s: Insufficient Permissions\n" % RTX_BUS[1])
    assert rtx2.limits() == [350.0, 350.0]


def test_mock_set_checks(rtx2):
    assert rtx2.run("--mock-set", "fault=bogus").returncode == 2
    assert rtx2.run("--mock-set", "nope=1").returncode == 2
    assert rtx2.run("--mock-set", "gpu9.power_limit_w=1").returncode == 2
    assert rtx2.run("--mock-set", "fault=fail", user="nobody").returncode == 4
    assert rtx2.read()["fault"] == "none"
    assert rtx2.run("--mock-set", "gpu1.enforced_cap_w=300").returncode == 0
    out = rtx2.run("-i", "1", "--query-gpu=power.limit,enforced.power.limit", "--format=csv,noheader").stdout
    assert out == "350.00 W, 300.00 W\n"
    assert json.loads(rtx2.run("--mock-show").stdout)["gpus"][1]["enforced_cap_w"] == 300


# ------------------------------------------------------------------ topo -m

TOPO = os.path.join(ALL_FIXTURES, "nvidia-smi", "topo")


def test_topo_matrix_is_the_public_capture_byte_for_byte(rtx2):
    # two consumer cards on the CPU's root complex (PHB): the RTX 3090 boxes' default
    result = rtx2.run("topo", "-m")
    assert result.returncode == 0
    with open(os.path.join(TOPO, "rtx5090x2-phb.txt"), encoding="utf-8") as handle:
        assert result.stdout == handle.read()
    assert rtx2.run("topo", "--matrix").stdout == result.stdout


@pytest.mark.parametrize("link", ["NV4", "PIX", "PXB", "NODE", "SYS", "NV12"])
def test_topo_link_knob(rtx2, link):
    assert rtx2.run("--mock-set", "link=" + link).returncode == 0
    lines = rtx2.run("topo", "-m").stdout.splitlines()
    assert lines[1] == "GPU0\t X \t%s\t0-63\t0\t\tN/A" % link
    assert lines[2] == "GPU1\t%s\t X \t0-63\t0\t\tN/A" % link


def test_topo_link_none_fails_as_a_driver_without_topo(rtx2):
    assert rtx2.run("--mock-set", "link=none").returncode == 0
    result = rtx2.run("topo", "-m")
    assert (result.returncode, result.stdout) == (2, "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n")


def test_topo_checks(rtx2, h200):
    assert rtx2.run("--mock-set", "link=bogus").returncode == 2
    assert rtx2.run("--mock-set", "link=NV0").returncode == 2
    assert rtx2.read()["link"] == "PHB"
    assert rtx2.run("topo").returncode == 2
    assert rtx2.run("-m").returncode == 2
    assert rtx2.run("topo", "-m", "-L").returncode == 2
    one = h200.run("topo", "-m").stdout.splitlines()
    assert one[:2] == ["\tGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID", "GPU0\t X \t0-15\t0\t\tN/A"]
    assert h200.run("--mock-set", "fault=fail").returncode == 0
    assert h200.run("topo", "-m").returncode == 9


def test_no_state_fails_like_no_driver():
    directory = tempfile.mkdtemp(prefix="smi-mock-")
    try:
        env = dict(os.environ, NVIDIA_SMI_MOCK_STATE=os.path.join(directory, "missing.json"))
        result = subprocess.run([MOCK, "-L"], env=env, capture_output=True, text=True, check=False)
        assert (result.returncode, result.stdout) == (9, DRIVER_FAIL)
        assert "--mock-init" in result.stderr
    finally:
        shutil.rmtree(directory)


# ------------------------------------------------------------------ simulated power

def test_power_draw_model():
    mock = load_mock_module()
    gpu = dict(mock.profile_state("rtx3090x1")["gpus"][0])
    idle = [mock.power_draw(gpu, 0.0) for _i in range(50)]
    assert all(abs(v - gpu["idle_power_w"]) <= 0.05 for v in idle)
    full = [mock.power_draw(gpu, 1.0) for _i in range(50)]
    assert all(0.96 * 350.0 <= v <= 350.0 for v in full)
    gpu["power_limit_w"] = 250.0
    assert all(v <= 250.0 for v in (mock.power_draw(gpu, 1.0) for _i in range(50)))
    gpu["enforced_cap_w"] = 21.0  # below idle: still capped
    assert all(v <= 21.0 for v in (mock.power_draw(gpu, b / 10.0) for b in range(11)))


def test_power_draw_never_above_enforced_limit(rtx2):
    rtx2.run("-pl", "100")
    out = rtx2.run("--query-gpu=power.draw,enforced.power.limit", "--format=csv,noheader,nounits",
                   "-lms", "20", "--mock-count", "10").stdout
    pairs = [tuple(float(v) for v in line.split(", ")) for line in out.splitlines()]
    assert len(pairs) == 20
    assert all(0 < draw <= limit == 100.0 for draw, limit in pairs)
