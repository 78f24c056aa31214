"""Activation functions and the softmax family, written once over an array namespace.

Elementwise activations (Relu, LeakyRelu, PRelu, Elu, Selu, Celu, ThresholdedRelu, Clip,
Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu, Softplus, Softsign, Shrink, Mish, Swish) and
the normalizing ones (Softmax, LogSoftmax, Hardmax), with every ONNX version of each.

float16 and bfloat16 inputs are computed in float32 and rounded once at the end
(:meth:`~onyxrt_ops.library.OpKernel.widen`), so a half-precision input gives a
half-precision output without rounding error accumulating between steps.

Attribute errors are :class:`~onyxrt.errors.InvalidGraph` naming the node, raised when the
kernel is built; errors in the data (a slope that does not broadcast, a bound that is not a
scalar, an axis out of range for the input's rank) are ``ValueError`` raised by ``compute``,
which the executor reports as a ``KernelError`` naming the node and its inputs.

Known gap: Gelu needs ``erf`` (not in the array API standard) for its exact form and is
declared with ``needs=("erf",)``, so a backend without it is offered neither form, though
the tanh approximation would need nothing beyond the standard.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES, NUMERIC_TYPES, SIGNED_INT_TYPES
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

FLOATS = FLOAT_TYPES  # float16, bfloat16, float32, float64

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


_name = dtype_name


def _is_half(x: Any) -> bool:
    return _name(x.dtype) in ("float16", "bfloat16")


def _is_bfloat16(x: Any) -> bool:
    return _name(x.dtype) == "bfloat16"


_INTEGERS = frozenset(f"{s}int{bits}" for s in ("", "u") for bits in (8, 16, 32, 64))


def _is_integer(x: Any) -> bool:
    # Not xp.isdtype: numpy's refuses the dtypes it does not define (ml_dtypes' bfloat16).
    return _name(x.dtype) in _INTEGERS


def _wide(kernel: OpKernel, x: Any) -> Any:
    """``x`` widened to float32 when it is float16/bfloat16 (:meth:`OpKernel.widen`)."""
    return kernel.widen(x) if _is_half(x) else x


def _broadcast_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    """The broadcast of two shapes, or None when they do not broadcast."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            return None
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def _sigmoid(xp: Any, x: Any) -> Any:
    """1 / (1 + e^-x) without overflow: e^-|x| never exceeds 1."""
    e = xp.exp(-xp.abs(x))
    r = 1.0 / (1.0 + e)
    return xp.where(x >= 0, r, e * r)


class FloatAttrs(OpKernel):
    """Base of the operators with float attributes: :meth:`float_attr` parses one."""

    def float_attr(self, name: str, default: float) -> float:
        """The float attribute ``name`` (``default`` when absent); InvalidGraph otherwise."""
        value = self.info.attr(name, default)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise InvalidGraph(
                f"{self.where()}: attribute {name!r} must be a float, got {value!r}"
            ) from None


class FloatUnary(FloatAttrs):
    """An elementwise float activation: :meth:`f` on the input widened to float32/64,
    rounded back to the input's type. Where the backend has a compiled pass for it (the
    ``unary_activation(x, name, p0, p1)`` extra: the same operations in one pass, for
    host float32 arrays), :attr:`compiled` names the operator, which it computes with the
    operator's ``alpha`` and ``beta``."""

    #: The operator's name for the backend's ``unary_activation``, where it takes it.
    compiled: str | None = None
    #: The float attributes the compiled pass reads (operators without them keep these).
    alpha: float = 0.0
    beta: float = 0.0

    def f(self, x: Any) -> Any:
        """The activation of a float32/float64 array."""
        raise NotImplementedError

    def compute(self, x):
        if self.compiled is not None and type(x) is np.ndarray and x.dtype == np.float32:
            act = self.backend.extras.get("unary_activation")
            if act is not None:
                y = act(x, self.compiled, self.alpha, self.beta)
                if y is not None:
                    return (y,)
        return (self.narrow(self.f(_wide(self, x)), x),)


# ------------------------------------------------------------------------ elementwise


@library.define("Relu", (1, 6, 13, 14), types={"T": FLOATS | SIGNED_INT_TYPES})
class Relu(OpKernel):
    """y = max(x, 0); floats and (from version 14) signed integers."""

    def compute(self, x):
        if _is_bfloat16(x):
            return (self.narrow(self.xp.maximum(self.widen(x), 0), x),)
        return (self.xp.asarray(self.xp.maximum(x, 0)),)  # numpy makes a 0-d result a scalar


@library.define("LeakyRelu", (1, 6, 16), types={"T": FLOATS})
class LeakyRelu(FloatUnary):
    """y = x if x >= 0 else alpha * x."""

    compiled = "LeakyRelu"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 0.01)

    def f(self, x):
        # max/min instead of where: exact, and faster on mixed signs.
        xp = self.xp
        return xp.maximum(x, 0) + xp.minimum(x, 0) * self.alpha


@library.define("PRelu", (1, 6, 7, 9, 16), types={"T": NUMERIC_TYPES})
class PRelu(OpKernel):
    """y = x if x >= 0 else slope * x, slope broadcast to x (unidirectionally from v7)."""

    def compute(self, x, slope):
        xp = self.xp
        slope = xp.asarray(slope)
        if (
            self.info.since_version < 7
            and slope.ndim == 1
            and x.ndim >= 2
            and slope.shape[0] == x.shape[1] != x.shape[-1]
        ):
            # Old versions took a per-channel slope of shape [C] for X of shape [N, C, ...].
            slope = xp.reshape(slope, (x.shape[1],) + (1,) * (x.ndim - 2))
        if _broadcast_shape(tuple(slope.shape), tuple(x.shape)) != tuple(x.shape):
            raise ValueError(
                f"PRelu: slope of shape {tuple(slope.shape)} does not broadcast to X's shape "
                f"{tuple(x.shape)}"
            )
        if _is_integer(x):
            y = xp.maximum(x, 0) + xp.minimum(x, 0) * xp.astype(slope, x.dtype, copy=False)
        else:
            xw = _wide(self, x)
            y = xp.maximum(xw, 0) + xp.minimum(xw, 0) * _wide(self, slope)
        return (self.narrow(y, x),)


@library.define("Elu", (1, 6, 22), types={"T": FLOATS})
class Elu(FloatUnary):
    """y = x if x >= 0 else alpha * (exp(x) - 1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.0)

    def f(self, x):
        xp = self.xp
        return xp.maximum(x, 0) + self.alpha * xp.expm1(xp.minimum(x, 0))


@library.define("Selu", (1, 6, 22), types={"T": FLOATS})
class Selu(FloatUnary):
    """y = gamma * x if x > 0 else gamma * alpha * (exp(x) - 1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.67326319217681884765625)
        self.gamma = self.float_attr("gamma", 1.05070102214813232421875)

    def f(self, x):
        xp = self.xp
        return self.gamma * (xp.maximum(x, 0) + self.alpha * xp.expm1(xp.minimum(x, 0)))


@library.define("Celu", (12, 28), types={"T": FLOATS})
class Celu(FloatUnary):
    """y = max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.0)
        if self.alpha == 0.0:
            raise InvalidGraph(f"{self.where()}: attribute 'alpha' must not be 0")

    def f(self, x):
        xp = self.xp
        neg = self.alpha * xp.expm1(xp.minimum(x, 0) / self.alpha)
        return xp.maximum(x, 0) + xp.minimum(neg, 0)


@library.define("ThresholdedRelu", (10, 22), types={"T": FLOATS})
class ThresholdedRelu(FloatUnary):
    """y = x if x > alpha else 0."""

    compiled = "ThresholdedRelu"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.0)

    def f(self, x):
        return self.xp.where(x > self.alpha, x, 0.0)


@library.define("Clip", (1, 6), types={"T": FLOATS})
class ClipAttr(OpKernel):
    """y = min(max(x, min), max) with the bounds as attributes (versions 1 and 6)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        lo = info.attr("min")
        hi = info.attr("max")
        self.lo = None if lo is None else float(lo)
        self.hi = None if hi is None else float(hi)

    def compute(self, x):
        xp = self.xp
        y = _wide(self, x)
        # A bound at or past the type's largest value (the schema's defaults) clips nothing.
        limit = float(xp.finfo(y.dtype).max)
        if self.lo is not None and self.lo > -limit:
            y = xp.maximum(y, self.lo)
        if self.hi is not None and self.hi < limit:
            y = xp.minimum(y, self.hi)
        if y is x:  # never hand the input back as the output
            return (xp.astype(x, x.dtype),)
        return (self.narrow(y, x),)


@library.define("Clip", (11, 12, 13), types={"T": NUMERIC_TYPES})
class Clip(OpKernel):
    """y = min(max(x, min), max) with optional scalar bound inputs; min > max gives max."""

    def compute(self, x, lo=None, hi=None):
        xp = self.xp
        y = x
        bfloat16 = _is_bfloat16(x)
        for bound, fn, name in ((lo, xp.maximum, "min"), (hi, xp.minimum, "max")):
            if bound is None:
                continue
            b = xp.asarray(bound)
            if math.prod(b.shape) != 1:
                raise ValueError(
                    f"Clip: input {name!r} must be a scalar, got shape {tuple(b.shape)}"
                )
            if b.ndim:
                b = xp.reshape(b, ())
            if b.dtype != x.dtype:
                b = xp.astype(b, x.dtype)
            if bfloat16:
                y = self.narrow(fn(self.widen(y), self.widen(b)), x)
            else:
                y = fn(y, b)
        if y is x:  # never hand the input back as the output
            y = xp.astype(x, x.dtype)
        return (y,)


@library.define("Sigmoid", (1, 6, 13), types={"T": FLOATS})
class Sigmoid(FloatUnary):
    """y = 1 / (1 + exp(-x)), computed without overflow for large |x|."""

    def f(self, x):
        return _sigmoid(self.xp, x)


@library.define("HardSigmoid", (1, 6, 22), types={"T": FLOATS})
class HardSigmoid(FloatUnary):
    """y = max(0, min(1, alpha * x + beta))."""

    compiled = "HardSigmoid"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 0.2)
        self.beta = self.float_attr("beta", 0.5)

    def f(self, x):
        return self.xp.clip(x * self.alpha + self.beta, 0.0, 1.0)


@library.define("HardSwish", (14, 22), types={"T": FLOATS})
class HardSwish(FloatUnary):
    """y = x * max(0, min(1, x / 6 + 0.5))."""

    compiled = "HardSwish"

    def f(self, x):
        return x * self.xp.clip(x * (1.0 / 6.0) + 0.5, 0.0, 1.0)


@library.define("Tanh", (1, 6, 13), types={"T": FLOATS})
class Tanh(FloatUnary):
    """y = tanh(x)."""

    def f(self, x):
        return self.xp.tanh(x)


@library.define("Gelu", 20, types={"T": FLOATS}, needs=("erf",))
class Gelu(OpKernel):
    """y = 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation when approximate='tanh'."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.approximate = info.attr("approximate", "none")
        if self.approximate not in ("none", "tanh"):
            raise InvalidGraph(
                f"{self.where()}: attribute 'approximate' must be 'none' or 'tanh', "
                f"got {self.approximate!r}"
            )

    def compute(self, x):
        xp = self.xp
        w = self.widen(x)
        if self.approximate == "tanh":
            inner = _SQRT_2_OVER_PI * (w + 0.044715 * (w * w * w))
            y = 0.5 * w * (1.0 + xp.tanh(inner))
        else:
            y = 0.5 * w * (1.0 + self.backend.extras["erf"](w * _INV_SQRT2))
        return (self.narrow(y, x),)


@library.define("Softplus", (1, 22), types={"T": FLOATS})
class Softplus(FloatUnary):
    """y = log(1 + exp(x)), as max(x, 0) + log1p(exp(-|x|)) to avoid overflow."""

    def f(self, x):
        xp = self.xp
        return xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))


@library.define("Softsign", (1, 22), types={"T": FLOATS})
class Softsign(FloatUnary):
    """y = x / (1 + |x|)."""

    def f(self, x):
        return x / (1.0 + self.xp.abs(x))


@library.define("Shrink", 9, types={"T": NUMERIC_TYPES})
class Shrink(FloatAttrs):
    """y = x + bias if x < -lambd, x - bias if x > lambd, else 0 (any numeric type)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.lambd = self.float_attr("lambd", 0.5)
        self.bias = self.float_attr("bias", 0.0)

    def compute(self, x):
        xp = self.xp
        if _is_integer(x):
            w = xp.astype(x, self.backend.dtype(np.float64))
        else:
            w = _wide(self, x)
        y = xp.where(w < -self.lambd, w + self.bias, xp.where(w > self.lambd, w - self.bias, 0.0))
        return (self.narrow(y, x),)


@library.define("Mish", (18, 22), types={"T": FLOATS})
class Mish(FloatUnary):
    """y = x * tanh(softplus(x)) = x * n / (n + 2) with n = e^x (e^x + 2)."""

    def f(self, x):
        # tanh(log(1 + e)) = ((1 + e)^2 - 1) / ((1 + e)^2 + 1). Past x = 20 the ratio is 1.0
        # in float64, so clamping there avoids overflow without changing the result.
        e = self.xp.exp(self.xp.minimum(x, 20.0))
        n = e * (e + 2.0)
        return x * (n / (n + 2.0))


@library.define("Swish", 24, types={"T": FLOATS})
class Swish(FloatUnary):
    """y = x * sigmoid(alpha * x)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = self.float_attr("alpha", 1.0)

    def f(self, x):
        return x * _sigmoid(self.xp, x * self.alpha)


# -------------------------------------------------------------------- softmax family


class AxisKernel(OpKernel):
    """A softmax-like operator: along one axis from version 13; before, on the input
    coerced to 2-D at ``axis`` (rows ``shape[:axis]``, columns the rest).

    :meth:`along` computes the operator along one axis of a float32/float64 array; a
    provider's fast path overrides it and defers to ``super().along`` for the rest.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.per_axis = info.since_version >= 13
        self.axis = int(info.attr("axis", -1 if self.per_axis else 1))

    def _axis(self, ndim: int) -> int:
        # Per-axis versions need a real axis; the 2-D-coerced ones also accept axis == rank.
        axis = self.axis
        hi = ndim - 1 if self.per_axis else ndim
        if not -ndim <= axis <= hi:
            raise ValueError(
                f"{self.info.op_type}: axis {axis} is out of range for an input of rank {ndim}"
            )
        return axis + ndim if axis < 0 else axis

    def along(self, x: Any, axis: int) -> Any:
        """The operator along ``axis`` of ``x`` (float32 or float64, not empty)."""
        raise NotImplementedError

    def compute(self, x):
        xp = self.xp
        axis = self._axis(x.ndim)
        if math.prod(x.shape) == 0:
            return (xp.empty_like(x),)
        w = _wide(self, x)
        if self.per_axis:
            y = self.along(w, axis)
        else:
            rows = math.prod(x.shape[:axis])
            y = xp.reshape(self.along(xp.reshape(w, (rows, -1)), 1), x.shape)
        return (self.narrow(y, x),)


@library.define("Softmax", (1, 11, 13), types={"T": FLOATS})
class Softmax(AxisKernel):
    """y = exp(x - max) / sum(exp(x - max)) along axis (2-D coerced before version 13)."""

    def along(self, x, axis):
        xp = self.xp
        e = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
        return e / xp.sum(e, axis=axis, keepdims=True)


@library.define("LogSoftmax", (1, 11, 13), types={"T": FLOATS})
class LogSoftmax(AxisKernel):
    """y = x - max - log(sum(exp(x - max))) along axis (2-D coerced before version 13)."""

    def along(self, x, axis):
        xp = self.xp
        shifted = x - xp.max(x, axis=axis, keepdims=True)
        return shifted - xp.log(xp.sum(xp.exp(shifted), axis=axis, keepdims=True))


@library.define("Hardmax", (1, 11, 13), types={"T": FLOATS})
class Hardmax(AxisKernel):
    """1 at the first maximum along axis, 0 elsewhere (2-D coerced before version 13)."""

    def along(self, x, axis):
        xp = self.xp
        first = xp.argmax(x, axis=axis, keepdims=True)
        n = x.shape[axis]
        # Positions along the axis, shaped to broadcast against ``first``.
        position = xp.reshape(xp.arange(n, dtype=first.dtype), (n,) + (1,) * (x.ndim - 1 - axis))
        return xp.astype(position == first, x.dtype)
