"""GPU kernels for the optimizer's fused operators (domain ``ai.onyxrt``, version 1).

The same semantics as the CPU's (``onyxrt_cpu.kernels.fused``; see ``onyxrt.optimizer``):
``FusedConv`` adds the bias, the residual ``Z`` and applies the activation in place on the
convolution's output (``onyxrt.optimizer.fused_ops``, shared with the CPU); ``FusedMatMul``
is ``alpha * A' @ B' + bias`` with transposed views handed to cuBLAS/hipBLAS by flag (float16
and float32 through :mod:`.blas`, with an explicit compute type). ``Gelu`` and
``LayerNormalization`` (the operator library's) are the standard kernels, registered in the fused
domain for models whose opset predates them.
"""

from __future__ import annotations

from onyxrt.kernels import KernelInfo
from onyxrt.optimizer import FUSED_DOMAIN, FUSED_DOMAIN_VERSION
from onyxrt.optimizer.fused_ops import MatMulAttributes, conv_epilogue
from onyxrt_ops import library

from . import registry
from ._common import BACKEND, FLOATS, GpuKernel
from .activation import Gelu
from .blas import kernel_blas
from .conv import Conv

__all__ = ["FusedConv", "FusedMatMul"]


@registry.register("FusedConv", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN, types={"T": FLOATS})
class FusedConv(Conv):
    """Conv + bias + optional residual Z + optional activation, in place on one buffer."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epilogue = conv_epilogue(info)

    def compute(self, x, w, b=None, z=None):
        (y,) = super().compute(x, w, b)
        self.epilogue(self.cp, y, z)
        return (y,)


@registry.register("FusedMatMul", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN, types={"T": FLOATS})
class FusedMatMul(GpuKernel):
    """Y = alpha * A' @ B' + bias; A'/B' swap their last two axes when transA/transB."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = MatMulAttributes.of(info)
        self.blas = kernel_blas(info)

    def compute(self, a, b, bias=None):
        if a.ndim < 2 or b.ndim < 2:
            raise ValueError(f"FusedMatMul operands must have rank >= 2, got {a.shape} and {b.shape}")
        cp = self.cp
        am = cp.swapaxes(a, -1, -2) if self.attrs.trans_a else a
        bm = cp.swapaxes(b, -1, -2) if self.attrs.trans_b else b
        y = self.blas.product(am, bm)
        if self.attrs.alpha != 1.0:
            y *= y.dtype.type(self.attrs.alpha)
        if bias is not None:
            y += bias.astype(y.dtype, copy=False)
        return (y,)


registry.register("Gelu", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN, types={"T": FLOATS})(Gelu)
registry.register(
    "LayerNormalization", since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN, types={"T": FLOATS, "U": FLOATS}
)(library.kernel("LayerNormalization", 17, BACKEND))
