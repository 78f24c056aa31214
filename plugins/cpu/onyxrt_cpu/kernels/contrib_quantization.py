"""CPU overrides of the operator library's com.microsoft quantization operators
(:mod:`onyxrt_ops.contrib_quantization`).

Only com.microsoft QuantizeLinear and DequantizeLinear, and not for speed: onnxruntime's CPU
kernels also take int4/uint4 data, which only numpy (ml_dtypes) holds. They are the CPU
provider's ai.onnx kernels (:mod:`.quantization`, over the library's attribute parsing)
registered for the com.microsoft domain with those types added. Every other operator is the
library's, bound over numpy in ``kernels/__init__``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from . import registry
from .quantization import DequantizeLinear, QuantizeLinear

__all__ = ["MsQuantizeLinear", "MsDequantizeLinear"]

_INT4 = (ml_dtypes.int4, ml_dtypes.uint4)
_INTS = (np.int8, np.uint8, np.int16, np.uint16)


@registry.register("QuantizeLinear", since=1, domain="com.microsoft",
                   types={"T1": (np.float32,), "T2": _INTS + _INT4})
class MsQuantizeLinear(QuantizeLinear):
    """com.microsoft QuantizeLinear, per-tensor or per-axis, 4-bit outputs included."""


@registry.register("DequantizeLinear", since=1, domain="com.microsoft",
                   types={"T1": _INTS + (np.int32,) + _INT4, "T2": (np.float32,)})
class MsDequantizeLinear(DequantizeLinear):
    """com.microsoft DequantizeLinear, per-tensor or per-axis, 4-bit inputs included."""
