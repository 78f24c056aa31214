"""onnxruntime's ``onnxruntime.capi.onnxruntime_validation``: checks it runs at import.
onyxrt supports every platform its packages install on, so the checks only report."""

from __future__ import annotations

import platform

from .._version import __version__
from ..api import cuda_version

__all__ = ["check_distro_info", "check_training_module", "get_package_name_and_version_info"]


def check_distro_info() -> str:
    """The platform onyxrt runs on (onnxruntime warns about untested distributions)."""
    return f"{platform.system()} {platform.release()} ({platform.machine()})"


def check_training_module() -> bool:
    """Whether onnxruntime's training build is present: onyxrt has none."""
    return False


def get_package_name_and_version_info() -> tuple[str, str, str, str, str]:
    """(package name, version, cuda version, ...) as onnxruntime reports them."""
    return ("onyxrt", __version__, cuda_version(), "", "")
