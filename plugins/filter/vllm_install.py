# Copyright: gpuhost.inference contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for vllm_install: what the vLLM CPU build needs on the box at run time.

The docs of each filter are in the YAML file of the same name beside this one.
"""
from __future__ import annotations

import re
from collections.abc import Mapping

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


class FilterModule:
    """vllm_install filters."""

    def filters(self):
        return {"vllm_install_cpu_runtime_errors": vllm_install_cpu_runtime_errors,
                "vllm_install_cuda_errors": vllm_install_cuda_errors}
