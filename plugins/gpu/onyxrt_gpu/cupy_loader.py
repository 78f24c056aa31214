"""Finding CuPy and saying exactly why it cannot be used.

The CUDA and the HIP (ROCm) builds of CuPy are different wheels (``cupy-cuda12x``,
``cupy-rocm-7-0``) that install the same ``cupy`` module, so at most one works in an
environment. The probe distinguishes every way this goes wrong, with the fix:

* CuPy is not installed;
* both builds are installed (they overwrite each other's files);
* the wrong build for this provider (a CUDA build under ROCm, or the reverse);
* the build imports but its runtime library is missing (``libamdhip64.so``, ``libcudart``);
* it imports but the driver reports no usable device (the driver's message is kept).
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
from types import ModuleType

from onyxrt.protocol import ProbeResult

__all__ = ["cupy_module", "probe_cupy", "installed_cupy_distributions", "CUDA", "HIP"]

CUDA = "cuda"
HIP = "hip"
_WHEELS = {CUDA: "cupy-cuda12x", HIP: "cupy-rocm-7-0"}


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


def _build_of(distribution: str) -> str:
    return HIP if "rocm" in distribution else CUDA


def probe_cupy(build: str, provider: str) -> ProbeResult:
    """Whether the ``build`` (``"cuda"`` or ``"hip"``) of CuPy gives ``provider`` a device."""
    wheel = _WHEELS[build]
    simulated = getattr(sys.modules.get("cupy"), "__onyxrt_simulated__", False)
    details: dict[str, str] = {}
    if not simulated:
        dists = installed_cupy_distributions()
        details.update({f"installed {k}": v for k, v in dists.items()})
        builds = {_build_of(d) for d in dists}
        if len(builds) > 1:
            return ProbeResult(
                False,
                f"both a CUDA and a ROCm build of CuPy are installed ({', '.join(sorted(dists))}); "
                "they install the same 'cupy' module and break each other",
                fix=f"keep one: pip uninstall {' '.join(sorted(d for d in dists if _build_of(d) != build))}",
                details=details,
            )
        if dists and build not in builds:
            other = next(iter(dists))
            kind = "ROCm (HIP)" if _build_of(other) == HIP else "CUDA"
            return ProbeResult(
                False,
                f"the installed CuPy ({other}) is a {kind} build; {provider} needs the "
                f"{'HIP' if build == HIP else 'CUDA'} build",
                fix=f"pip uninstall {other} && pip install {wheel}",
                details=details,
            )
    try:
        cupy = cupy_module()
    except ImportError as exc:
        missing = str(exc).splitlines()[0] if str(exc) else repr(exc)
        if isinstance(exc, ModuleNotFoundError) and exc.name == "cupy":
            return ProbeResult(False, "cupy is not installed", fix=f"pip install {wheel}",
                               details=details)
        runtime = "the ROCm runtime (libamdhip64)" if build == HIP else "the CUDA runtime"
        return ProbeResult(
            False,
            f"cupy is installed but cannot load {runtime}: {missing}",
            fix=f"install {runtime} matching {wheel}, or use another provider",
            details=details,
        )
    except Exception as exc:  # a broken install must not break discovery
        return ProbeResult(False, f"importing cupy failed: {type(exc).__name__}: {exc}",
                           fix=f"pip install --force-reinstall {wheel}", details=details)
    details["cupy"] = str(getattr(cupy, "__version__", "?"))
    if simulated:
        details["simulated"] = "yes"
    is_hip = bool(cupy.cuda.runtime.is_hip)
    if is_hip != (build == HIP):
        return ProbeResult(
            False,
            f"this cupy is a {'HIP' if is_hip else 'CUDA'} build; {provider} needs the "
            f"{'HIP' if build == HIP else 'CUDA'} build",
            fix=f"pip install {wheel} (in an environment without the other build)",
            details=details,
        )
    try:
        count = int(cupy.cuda.runtime.getDeviceCount())
    except Exception as exc:  # CUDARuntimeError: no driver, insufficient driver, no device
        message = str(exc).strip() or type(exc).__name__
        return ProbeResult(
            False,
            f"cupy is installed but there is no usable device ({message})",
            fix="check the GPU driver (nvidia-smi / rocm-smi) or run on a machine with a GPU",
            details=details,
        )
    details["devices"] = str(count)
    if count < 1:
        return ProbeResult(False, "cupy is installed but the driver reports 0 devices",
                           fix="run on a machine with a GPU", details=details)
    return ProbeResult(True, details=details)
