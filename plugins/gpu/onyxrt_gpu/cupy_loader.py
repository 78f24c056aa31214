"""Finding CuPy and saying exactly why it cannot be used.

CuPy comes as one wheel per platform (``cupy-cuda12x``, ``cupy-cuda13x``,
``cupy-rocm-7-0``), all installing the same ``cupy`` module, so at most one works in an
environment. onyxrt-cuda brings its CuPy through an extra (``onyxrt-cuda[cuda12]`` or
``[cuda13]``, with the CUDA libraries from pip); onyxrt-rocm depends on ``cupy-rocm-7-0``.
The probe distinguishes every way this goes wrong, with the fix:

* CuPy is not installed, or is older than 14;
* more than one CuPy build is installed (they overwrite each other's files: the fix removes
  every one, then reinstalls the one the provider needs);
* the wrong build for this provider (a CUDA build under ROCm, or the reverse);
* the build imports but its runtime library is missing (``libamdhip64.so``, ``libcudart``);
* it imports but the driver reports no usable device (the driver's message is kept);
* there is a device, but CuPy cannot compile a kernel (no NVRTC / hiprtc) or multiply
  matrices (no cuBLAS / hipBLAS): a machine with only the driver. The probe compiles and
  runs a 4-element kernel and a 2x2 matmul and checks the values before it says usable.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.metadata
import re
import sys
from types import ModuleType
from typing import Any

import numpy as np

from onyxrt.protocol import ProbeResult

__all__ = ["cupy_module", "probe_cupy", "installed_cupy_distributions", "CUDA", "HIP",
           "MIN_CUPY_MAJOR"]

CUDA = "cuda"
HIP = "hip"
#: The oldest CuPy major onyxrt works with (the lower bound of onyxrt-cuda's extras and of
#: onyxrt-rocm's dependency).
MIN_CUPY_MAJOR = 14
_ROCM_WHEEL = "cupy-rocm-7-0"
_CUDA_WHEEL = re.compile(r"cupy-cuda(\d+)x")
#: The CUDA majors onyxrt-cuda has an extra for (``onyxrt-cuda[cuda12]``, ``[cuda13]``).
_CUDA_EXTRAS = (12, 13)
#: What compiles kernels and what multiplies matrices, per build (for the reasons).
_LIBRARIES = {CUDA: ("NVRTC", "cuBLAS"), HIP: ("hiprtc", "hipBLAS")}


def cupy_module() -> ModuleType:
    """The ``cupy`` module in use (the real one, or a simulated one a test installed)."""
    module = sys.modules.get("cupy")
    if module is None:
        module = importlib.import_module("cupy")
    return module


def installed_cupy_distributions() -> dict[str, str]:
    """Installed CuPy wheels, distribution name → version (``cupy-cuda12x``, ``cupy-rocm-*``)."""
    found = {}
    for dist in importlib.metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "cupy" or name.startswith(("cupy-cuda", "cupy-rocm")):
            found[name] = dist.version
    return found


def _build_of(distribution: str) -> str | None:
    """``HIP`` or ``CUDA`` for a CuPy wheel; ``None`` for a source build (plain ``cupy``),
    whose build is only known once it imports."""
    if distribution.startswith("cupy-rocm"):
        return HIP
    if _CUDA_WHEEL.fullmatch(distribution):
        return CUDA
    return None


def _first_line(exc: BaseException) -> str:
    """The first line of an error that says something.

    CuPy's ImportError starts with a blank line and a rule of ``=`` and ends with
    ``Original error:`` and the real error, which is the line kept.
    """
    text = str(exc)
    if "Original error:" in text:
        text = text.split("Original error:", 1)[1]
    for line in text.splitlines():
        line = line.strip()
        if any(c.isalnum() for c in line):
            return line
    return type(exc).__name__


def _major(version: str) -> int | None:
    match = re.match(r"\d+", version)
    return int(match.group()) if match else None


# -- the CUDA driver's version, to pick onyxrt-cuda's extra ------------------------------


def _libcuda_driver_version() -> int | None:
    """The CUDA version the NVIDIA driver supports (``12080`` for 12.8), read from the
    driver library without CuPy; ``None`` without a driver. (``cuDriverGetVersion`` needs
    no ``cuInit`` and touches no device, so this is cheap.)"""
    name = "nvcuda.dll" if sys.platform == "win32" else "libcuda.so.1"
    try:
        lib = ctypes.CDLL(name)
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) != 0:
            return None
    except (OSError, AttributeError):
        return None
    return version.value or None


def _driver_cuda_major(cupy: Any | None) -> int | None:
    """The driver's CUDA major version (through CuPy when it imports), or ``None``."""
    version: int | None = None
    if cupy is not None:
        try:
            version = int(cupy.cuda.runtime.driverGetVersion())  # 0: no driver
        except Exception:
            version = None
    else:
        version = _libcuda_driver_version()
    return version // 1000 if version else None


def _cuda_extra(dists: dict[str, str], driver_major: int | None) -> int | None:
    """Which of onyxrt-cuda's extras to advise (12 or 13), or ``None`` when unknown.

    The installed CUDA build's major is kept (installing the other extra beside it would
    put two builds in one environment) unless the driver is known to be too old for it.
    """
    installed = sorted({int(m.group(1)) for d in dists if (m := _CUDA_WHEEL.fullmatch(d))})
    supported = [m for m in installed if m in _CUDA_EXTRAS]
    if len(supported) == 1 and (driver_major is None or supported[0] <= driver_major):
        return supported[0]
    if driver_major is not None:
        return 13 if driver_major >= 13 else 12
    return None


def _install(build: str, dists: dict[str, str], driver_major: int | None) -> str:
    """The command installing the CuPy ``build`` needs (with the CUDA libraries)."""
    if build == HIP:
        return f"pip install {_ROCM_WHEEL}"
    extra = _cuda_extra(dists, driver_major)
    if extra is None:
        return "pip install 'onyxrt-cuda[cuda12]' (or 'onyxrt-cuda[cuda13]' with a CUDA 13 driver)"
    return f"pip install 'onyxrt-cuda[cuda{extra}]'"


def _target_wheel(build: str, dists: dict[str, str], driver_major: int | None) -> str | None:
    if build == HIP:
        return _ROCM_WHEEL
    extra = _cuda_extra(dists, driver_major)
    return None if extra is None else f"cupy-cuda{extra}x"


def _reinstall(build: str, dists: dict[str, str], driver_major: int | None) -> str:
    """Install the right CuPy; when any other CuPy distribution is installed, uninstall
    *every* one first: the builds share files, so uninstalling only the other one would
    delete files of the one kept."""
    install = _install(build, dists, driver_major)
    if not dists or set(dists) == {_target_wheel(build, dists, driver_major)}:
        return install
    return f"pip uninstall -y {' '.join(sorted(dists))} && {install}"


def _kind(build: str | None) -> str:
    return "ROCm (HIP)" if build == HIP else "CUDA"


# -- the probe ---------------------------------------------------------------------------


def probe_cupy(build: str, provider: str) -> ProbeResult:
    """Whether the ``build`` (``"cuda"`` or ``"hip"``) of CuPy gives ``provider`` a device
    that compiles and runs kernels and multiplies matrices."""
    simulated = getattr(sys.modules.get("cupy"), "__onyxrt_simulated__", False)
    needs = "HIP" if build == HIP else "CUDA"
    details: dict[str, str] = {}
    # The installed distributions say what a broken import cannot; under the simulated
    # CuPy they are not the ones in use, so they are not looked at.
    dists = {} if simulated else installed_cupy_distributions()
    details.update({f"installed {k}": v for k, v in dists.items()})
    builds = {b for d in dists if (b := _build_of(d)) is not None}

    def driver(cupy: Any | None) -> int | None:
        return _driver_cuda_major(cupy) if build == CUDA else None

    if len(dists) > 1:
        which = ("both a CUDA and a ROCm build of CuPy are" if builds == {CUDA, HIP}
                 else "more than one CuPy build is")
        return ProbeResult(
            False,
            f"{which} installed ({', '.join(sorted(dists))}); they install the same 'cupy' "
            "module, so they break each other, and uninstalling one deletes files of the other",
            fix=_reinstall(build, dists, driver(None)),
            details=details,
        )
    if builds and build not in builds:
        other = next(d for d in dists if _build_of(d) is not None)
        return ProbeResult(
            False,
            f"the installed CuPy ({other}) is a {_kind(_build_of(other))} build; {provider} "
            f"needs the {needs} build",
            fix=_reinstall(build, dists, driver(None)),
            details=details,
        )
    try:
        cupy = cupy_module()
    except ImportError as exc:
        if isinstance(exc, ModuleNotFoundError) and exc.name == "cupy":
            return ProbeResult(False, "cupy is not installed",
                               fix=_install(build, dists, driver(None)), details=details)
        runtime = "the ROCm runtime (libamdhip64)" if build == HIP else "the CUDA runtime"
        fix = (f"install the ROCm 7 runtime (libamdhip64) that {_ROCM_WHEEL} is built for, or "
               "use another provider" if build == HIP
               else f"install the CUDA libraries from pip: {_reinstall(build, dists, driver(None))}")
        return ProbeResult(False, f"cupy is installed but cannot load {runtime}: {_first_line(exc)}",
                           fix=fix, details=details)
    except Exception as exc:  # a broken install must not break discovery
        return ProbeResult(
            False, f"importing cupy failed: {type(exc).__name__}: {_first_line(exc)}",
            fix=f"reinstall CuPy: pip uninstall -y {' '.join(sorted(dists)) or 'cupy'} && "
                f"{_install(build, dists, driver(None))}",
            details=details,
        )
    version = str(getattr(cupy, "__version__", "?"))
    details["cupy"] = version
    if simulated:
        details["simulated"] = "yes"
    driver_major = driver(cupy)
    if driver_major is not None:
        details["driver CUDA major"] = str(driver_major)
    major = _major(version)
    if major is not None and major < MIN_CUPY_MAJOR:
        upgrade = _reinstall(build, dists, driver_major)
        if build == HIP and upgrade == f"pip install {_ROCM_WHEEL}":
            upgrade = f"pip install -U {_ROCM_WHEEL}"
        return ProbeResult(
            False,
            f"cupy {version} is installed; onyxrt needs CuPy {MIN_CUPY_MAJOR} or newer",
            fix=f"upgrade CuPy: {upgrade}",
            details=details,
        )
    is_hip = bool(cupy.cuda.runtime.is_hip)
    if is_hip != (build == HIP):
        this = "HIP" if is_hip else "CUDA"
        fix = (_reinstall(build, dists, driver_major) if dists
               else f"remove this {this} build of CuPy, then {_install(build, dists, driver_major)}")
        return ProbeResult(False, f"this cupy is a {this} build; {provider} needs the {needs} build",
                           fix=fix, details=details)
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, insufficient driver, no device
        message = str(exc).strip() or type(exc).__name__
        fix = "check the GPU driver (nvidia-smi / rocm-smi) or run on a machine with a GPU"
        wheel_major = _cuda_extra(dists, None)
        if driver_major is not None and wheel_major is not None and driver_major < wheel_major:
            fix = (f"the driver supports CUDA {driver_major}, the installed CuPy needs CUDA "
                   f"{wheel_major}: update the driver, or {_reinstall(build, dists, driver_major)}")
        return ProbeResult(False, f"cupy is installed but there is no usable device ({message})",
                           fix=fix, details=details)
    details["devices"] = str(count)
    if count < 1:
        return ProbeResult(False, "cupy is installed but the driver reports 0 devices",
                           fix="run on a machine with a GPU", details=details)
    failure = _run_test_kernels(cupy, build)
    if failure is not None:
        reason, libraries_missing = failure
        if not libraries_missing:
            fix = "check the GPU driver (nvidia-smi / rocm-smi) and the GPU's health"
        elif build == HIP:
            fix = (f"install ROCm 7's hiprtc and hipBLAS libraries (the ones {_ROCM_WHEEL} is "
                   "built for) where the loader finds them (e.g. /opt/rocm/lib)")
        else:
            fix = f"install the CUDA libraries from pip: {_reinstall(build, dists, driver_major)}"
        return ProbeResult(False, reason, fix=fix, details=details)
    compiler, blas = _LIBRARIES[build]
    details["test kernels"] = f"elementwise ({compiler}) and matmul ({blas}) ran on device 0"
    return ProbeResult(True, details=details)


def _run_test_kernels(cupy: Any, build: str) -> tuple[str, bool] | None:
    """Compile and run a 4-element elementwise kernel and a 2x2 matmul on device 0 and
    check the values; ``None`` when both are right, else ``(reason, libraries_missing)``.

    A machine with only the driver passes ``getDeviceCount`` but fails here, at the first
    kernel (no NVRTC/hiprtc to compile it) or the first matmul (no cuBLAS/hipBLAS). The
    arrays come from raw device memory (``using_allocator(None)``), returned when they
    die, so the probe leaves nothing cached in CuPy's pool.
    """
    compiler, blas = _LIBRARIES[build]
    x = np.arange(1, 5, dtype=np.float32)
    a = np.array([[1, 2], [3, 4]], dtype=np.float32)
    b = np.array([[5, 6], [7, 8]], dtype=np.float32)
    try:
        with cupy.cuda.Device(0), cupy.cuda.using_allocator(None):
            try:
                dx, da, db = cupy.asarray(x), cupy.asarray(a), cupy.asarray(b)
            except Exception as exc:
                return f"cupy is installed but cannot copy data to device 0: {_first_line(exc)}", False
            try:
                y = cupy.asnumpy(dx * 2 + 1)
            except Exception as exc:
                return (f"cupy is installed but cannot compile and run a kernel ({compiler}): "
                        f"{_first_line(exc)}", True)
            try:
                c = cupy.asnumpy(cupy.matmul(da, db))
            except Exception as exc:
                return (f"cupy is installed but cannot multiply matrices ({blas}): "
                        f"{_first_line(exc)}", True)
    except Exception as exc:  # entering the device failed
        return f"cupy is installed but cannot use device 0: {_first_line(exc)}", False
    for what, got, expected in (("elementwise kernel", y, x * 2 + 1), ("matmul", c, a @ b)):
        if not np.array_equal(got, expected):
            return (f"cupy ran a test {what} on device 0 but got wrong values "
                    f"({got.tolist()}, expected {expected.tolist()})", False)
    return None
