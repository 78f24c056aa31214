"""CPU overrides of the operator library's com.microsoft operators (:mod:`onyxrt_ops.contrib_misc`).

* ``com.microsoft::FusedConv`` — what onnxruntime's optimizer writes for every Conv (+
  activation, + Add) of a saved optimized model — runs the CPU provider's own
  ``ai.onyxrt`` FusedConv (:mod:`.fused`): the same attributes (``activation``,
  ``activation_params``) and inputs (X, W, B, Z), computed by the compiled im2col/GEMM or
  Winograd convolution with the bias, residual and activation applied in place. The
  library's portable convolution (taps stacked, one matmul) is several times slower (see
  :mod:`.conv`'s docstring); onnxruntime-optimized ResNets and MobileNets are all
  FusedConv. The library's kernel still parses the node first, so an activation
  onnxruntime refuses is refused the same way.

The other operators of the module (FusedGemm, FusedMatMul: numpy's matmul already; the
host algorithms) run the library's kernels, bound over numpy in ``kernels/__init__``.
"""

from __future__ import annotations

import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from . import registry
from ._backend import BACKEND
from .fused import FusedConv as _CpuFusedConv

__all__ = ["FusedConv"]

_LIBRARY_FUSED_CONV = library.kernel("FusedConv", 1, BACKEND, domain="com.microsoft")


@registry.register("FusedConv", since=1, domain="com.microsoft", types={"T": (np.float32,)})
class FusedConv(_CpuFusedConv):
    """com.microsoft FusedConv through the CPU provider's compiled FusedConv."""

    def __init__(self, info: KernelInfo) -> None:
        _LIBRARY_FUSED_CONV(info)  # the library's checks of the attributes (typed errors)
        super().__init__(info)
