"""GPU kernels: Cast and CastLike (numeric and bool element types: CuPy holds no strings,
bfloat16 or float8, so ``saturate`` and ``round_mode``, which only float8 reads, never apply).

Arithmetic, the math functions, Max/Min/Sum/Mean and the bitwise operators
(:mod:`onyxrt_ops.elementwise`), and the comparisons, boolean logic and Where
(:mod:`onyxrt_ops.logical`) come from the operator library, bound over CuPy in
``kernels/__init__``; no CuPy-specific fast path is needed there (the library computes a
constant exponent 2, 3 or 0.5 of Pow by multiplication or ``sqrt`` on every provider).
The library's Equal and Where are declared without strings, which CuPy cannot hold: their
string nodes are refused at capability time.
"""

from __future__ import annotations

from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.kernels import KernelInfo

from . import registry
from ._common import TENSORS, GpuKernel, bad

__all__ = ["Cast", "CastLike"]


# -------------------------------------------------------------------------------- Cast


@registry.register("Cast", since=(1, 6, 9, 13, 19, 21, 23, 24, 25, 28),
                   types={"T1": TENSORS, "T2": TENSORS})
class Cast(GpuKernel):
    """Convert to the numeric (or bool) element type ``to``; floats truncate toward zero
    when cast to integers; anything nonzero is True."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        to = info.attr("to")
        if to is None:
            raise bad(info, "the required attribute 'to' is missing")
        if isinstance(to, str):  # Cast-1 names the type: 'FLOAT', 'INT64', ...
            try:
                to = TensorProto.DataType.Value(to.strip().upper())
            except ValueError:
                raise bad(info, f"unknown element type to={to!r}") from None
        try:
            self.to = np_dtype(int(to))
        except TypeError:
            raise bad(info, f"attribute to={to} is not a tensor element type") from None
        if self.to not in TENSORS:
            raise NotImplementedError(
                f"Cast to {self.to} is not supported on the GPU (numeric and bool types only)"
            )

    def compute(self, x):
        if x.dtype == self.to:
            return (x,)
        return (x.astype(self.to),)


@registry.register("CastLike", since=(15, 19, 21, 23, 24, 25), types={"T1": TENSORS, "T2": TENSORS})
class CastLike(GpuKernel):
    """Cast the first input to the element type of the second (as Cast does). Function
    expansions of many operators (Gelu, LayerNormalization, CausalConvWithState...) use it, so
    without it their nodes would leave the GPU."""

    def compute(self, x, like):
        return (x,) if x.dtype == like.dtype else (x.astype(like.dtype),)

