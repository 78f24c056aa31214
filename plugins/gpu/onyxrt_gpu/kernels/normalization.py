"""GPU fast path of BatchNormalization; every other normalization comes from the operator
library (:mod:`onyxrt_ops.normalization`), bound over CuPy in ``kernels/__init__``.

BatchNormalization in inference is one fused multiply-add per element (``cupy.fuse``)
instead of two launches; the library's kernel folds constant statistics (the usual case)
into ``scale / sqrt(var + eps)`` and ``bias - mean * scale / sqrt(var + eps)`` once, at
creation. Training mode is the library's. float16 inputs are computed in float32 and
rounded back once.
"""

from __future__ import annotations

from typing import Any

from onyxrt_ops import library

from . import registry
from ._common import BACKEND, FLOATS, fused_kernel

__all__ = ["BatchNormalization"]


def _fma(cp: Any) -> Any:
    """A fused ``x * mul + add`` for CuPy module ``cp`` (built once)."""

    def fma(x, mul, add):
        return x * mul + add

    return fused_kernel(cp, "scale_shift", lambda module: fma)


@registry.register("BatchNormalization", since=(1, 6, 7, 9, 14, 15),
                   types={"T": FLOATS, "T1": FLOATS, "T2": FLOATS, "U": FLOATS})
class BatchNormalization(library.kernel("BatchNormalization", 15, BACKEND)):
    """The library's BatchNormalization; inference as one fused multiply-add."""

    def compute(self, x, scale, b, mean, var):
        if self.training:
            return super().compute(x, scale, b, mean, var)
        self.rank_at_least(x, 2, "N, C, ...")
        xc = self.widen(x)
        y = _fma(self.xp.module)(xc, *self.scale_shift(xc, scale, b, mean, var))
        return (self.narrow(y, x),)
