"""Linear algebra, written once over an array namespace: MatMul, Gemm, MatMulInteger and
Det, with every ONNX version of each.

Products go through ``xp.matmul`` (a BLAS on every backend that has one). float16 and
bfloat16 operands are multiplied in float32 and rounded once at the end
(:meth:`~onyxrt_ops.library.OpKernel.widen`); MatMulInteger subtracts the zero points and
multiplies in int32, its output type. Det takes ``xp.linalg.det``, from the standard's
``linalg`` extension.

Shape errors (ranks, inner dimensions, a C that does not broadcast) are ``ValueError``
raised by ``compute``; attribute errors are :class:`~onyxrt.errors.InvalidGraph`.

Einsum needs the backend's ``einsum`` extra (the standard has none): numpy's, with its
contraction-order optimizer, on the host; ``cupy.einsum`` on the GPU. A backend without it
(``array_api_strict``) does not offer the operator.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .activation import FloatAttrs
from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_F32 = np.dtype(np.float32)
_HALF = frozenset({"float16", "bfloat16"})


class Product(OpKernel):
    """Base of the matrix products: :meth:`product`."""

    def product(self, a: Any, b: Any) -> Any:
        """``a @ b``, half-precision operands in float32 (the result stays float32)."""
        return self.xp.matmul(self.widen(a), self.widen(b))


@library.define("MatMul", (1, 9, 13))
class MatMul(Product):
    """numpy.matmul semantics: batched N-d product, 1-D operands promoted and squeezed."""

    def compute(self, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError("MatMul operands must have rank >= 1")
        y = self.product(a, b)
        # numpy's product of two vectors is a scalar: asarray makes it the 0-d array.
        return (self.narrow(y if y.ndim else self.xp.asarray(y), a),)


def _scaled_host(c: np.ndarray, factor: float) -> np.ndarray:
    """A host constant ``c * factor`` in its compute type (float32 for half precision;
    integers truncated toward zero)."""
    if dtype_name(c.dtype) in _HALF:
        c = c.astype(_F32)
    if c.dtype.kind == "f":
        return np.ascontiguousarray(c * c.dtype.type(factor))
    return np.ascontiguousarray((c * factor).astype(c.dtype))


@library.define("Gemm", (1, 6, 7, 9, 11, 13))
class Gemm(Product, FloatAttrs):
    """Y = alpha * A' @ B' + beta * C, A'/B' optionally transposed, C broadcast to Y.

    A constant C is scaled by beta once, when the kernel is built (:attr:`c_scaled`)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.0)
        self.beta = self.float_attr("beta", 1.0)
        self.trans_a = bool(info.attr("transA", 0))
        self.trans_b = bool(info.attr("transB", 0))
        # Versions 1 and 6 carry a `broadcast` flag; C is broadcast either way (a superset).
        c = info.constant(2)
        self.c_scaled = None
        if isinstance(c, np.ndarray) and self.beta not in (0.0, 1.0):
            self.c_scaled = self.xp.asarray(_scaled_host(c, self.beta))

    def operands(self, a: Any, b: Any) -> tuple[Any, Any]:
        """A' and B': transposed views where ``transA``/``transB`` ask."""
        return (a.T if self.trans_a else a), (b.T if self.trans_b else b)

    def scaled(self, v: Any, factor: float) -> Any:
        """``v * factor`` keeping ``v``'s dtype (integer results truncate toward zero)."""
        if factor == 1.0:
            return v
        if dtype_name(v.dtype).startswith(("int", "uint")):
            xp = self.xp
            return xp.astype(xp.astype(v, self.backend.dtype(np.float64)) * factor, v.dtype)
        return v * factor

    def compute(self, a, b, c=None):
        if a.ndim != 2 or b.ndim != 2:
            raise ValueError(f"A and B must be 2-D, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
        am, bm = self.operands(a, b)
        if am.shape[1] != bm.shape[0]:
            raise ValueError(f"A' has shape {tuple(am.shape)} and B' has shape {tuple(bm.shape)}; inner dims differ")
        y = self.scaled(self.product(am, bm), self.alpha)
        if c is not None and self.beta != 0.0:
            cc = self.c_scaled if self.c_scaled is not None else self.scaled(self.widen(c), self.beta)
            if np.broadcast_shapes(tuple(cc.shape), tuple(y.shape)) != tuple(y.shape):
                raise ValueError(f"C of shape {tuple(cc.shape)} does not broadcast to Y {tuple(y.shape)}")
            y = y + (cc if cc.dtype == y.dtype else self.xp.astype(cc, y.dtype))
        return (self.narrow(y, a),)


@library.define("MatMulInteger", 10)
class MatMulInteger(OpKernel):
    """(A - a_zero_point) @ (B - b_zero_point) in int32; A's zero point is a scalar or one
    per row, B's a scalar or one per column."""

    def zero_point(self, zp: Any, per_row: bool) -> Any:
        """A zero point in int32, shaped to broadcast against its operand."""
        z = self.xp.astype(zp, self.backend.dtype(np.int32))
        if z.size == 1:
            return self.xp.reshape(z, ())
        return self.xp.reshape(z, (-1, 1)) if per_row and z.ndim == 1 else z

    def compute(self, a, b, a_zero_point=None, b_zero_point=None):
        xp = self.xp
        i32 = self.backend.dtype(np.int32)
        am, bm = xp.astype(a, i32), xp.astype(b, i32)
        if a_zero_point is not None:
            am = am - self.zero_point(a_zero_point, per_row=True)
        if b_zero_point is not None:
            bm = bm - self.zero_point(b_zero_point, per_row=False)
        y = xp.matmul(am, bm)
        return (y if y.ndim else xp.asarray(y),)  # numpy's vector product is a scalar


@library.define("Det", (11, 22))
class Det(OpKernel):
    """Determinant of each square matrix in the last two axes."""

    def compute(self, x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"Det needs [..., M, M] input, got shape {tuple(x.shape)}")
        xp = self.xp
        # numpy's det of one matrix is a scalar: asarray makes it the 0-d array of the others.
        return (self.narrow(xp.asarray(xp.linalg.det(self.widen(x))), x),)


@library.define("Einsum", (12, 28), needs=("einsum",))
class Einsum(OpKernel):
    """Einstein summation over the ``equation`` attribute (half-precision operands in
    float32, rounded once at the end)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        equation = info.attr("equation")
        if not equation:
            raise InvalidGraph(f"{self.where()}: attribute 'equation' is required")
        self.equation = str(equation).replace(" ", "")
        self._einsum = self.backend.extras["einsum"]

    def compute(self, *inputs):
        if not inputs:
            raise ValueError("Einsum needs at least one input")
        y = self._einsum(self.equation, *(self.widen(v) for v in inputs))
        # numpy's full contraction is a scalar: asarray makes it a 0-d array.
        return (self.narrow(self.xp.asarray(y), inputs[0]),)
