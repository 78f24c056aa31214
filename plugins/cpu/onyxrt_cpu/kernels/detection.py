"""CPU kernels: the sampling and detection fast path the operator library
(:mod:`onyxrt_ops.detection`, bound over numpy in ``kernels/__init__``) cannot match.

GridSample, RoiAlign, NonMaxSuppression, Col2Im and DeformConv come from the library: the
former numpy kernels were no faster (per call, float32, this machine: GridSample
[1, 3, 8, 8] 85 us before / 81 us library, [2, 16, 64, 64] linear 602 / 610 us, cubic
2260 / 2320 us; RoiAlign [2, 64, 50, 50] with 8 regions 680 / 620 us; Col2Im 3x3 blocks
of a [2, 16, 64, 64] image 620 / 610-680 us; DeformConv [1, 2, 6, 6] 122 / 95 us,
[2, 16, 32, 32] 6.1-6.4 / 5.4 ms; NonMaxSuppression, host numpy in both, 1.68 ms for 200
boxes in 4 classes).

Override of a library operator, subclassing the library's kernel:

* MaxUnpool — numpy's indexed assignment scatters in one call; the library, which the
  standard leaves without integer-array assignment, sorts and searches instead
  ([1, 2, 2, 2]: 5.6 us here, 29 us library; [4, 32, 32, 32]: 0.22 ms here, 8.5 ms).
"""

from __future__ import annotations

import numpy as np

from onyxrt.spatial import prod
from onyxrt_ops import library

from . import registry
from ._backend import BACKEND

__all__ = ["MaxUnpool"]


@registry.register("MaxUnpool", since=(9, 11, 22))
class MaxUnpool(library.kernel("MaxUnpool", 22, BACKEND)):
    """The library's MaxUnpool, scattering with numpy's indexed assignment (the last of
    duplicate indices wins)."""

    def compute(self, x, indices, output_shape=None):
        shape = self.unpooled_shape(x, indices)
        out = np.zeros(prod(shape), x.dtype)
        flat = indices.reshape(-1).astype(np.intp)
        if flat.size and (flat.min() < 0 or flat.max() >= out.size):
            raise ValueError(f"MaxUnpool: an index is outside the output of shape {shape}")
        out[flat] = x.reshape(-1)
        return (self.resized(out.reshape(shape), x, output_shape),)
