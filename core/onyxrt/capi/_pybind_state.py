"""onnxruntime's ``onnxruntime.capi._pybind_state``: the names of
:mod:`onyxrt.capi.onnxruntime_pybind11_state` (libraries import it as ``C``)."""

from __future__ import annotations

from . import _ld_preload  # noqa: F401  (onnxruntime's module imports it first)
from .onnxruntime_pybind11_state import *  # noqa: F403
from .onnxruntime_pybind11_state import __all__  # noqa: F401
