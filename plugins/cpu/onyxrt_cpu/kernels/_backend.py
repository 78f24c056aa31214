"""The CPU provider's backend for the operator library (:mod:`onyxrt_ops`): numpy, every
element type numpy holds, and the float64 ``erf`` of :mod:`._special` (numpy has none)."""

from __future__ import annotations

from onyxrt_ops import numpy_backend

from ._special import erf

__all__ = ["BACKEND"]

#: What the library's operators compute with on the CPU (bound in ``kernels/__init__``).
BACKEND = numpy_backend(extras={"erf": erf})
