"""CPU kernels: activation functions and the softmax family.

Elementwise activations (Relu, LeakyRelu, PRelu, Elu, Selu, Celu, ThresholdedRelu, Clip,
Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu, Softplus, Softsign, Mish, Swish) and the
normalizing ones (Softmax, LogSoftmax, Hardmax).

float16 and bfloat16 inputs are computed in float32 and cast back, so a half-precision input
gives a half-precision output without accumulating rounding error between steps. Gelu's exact
form uses :func:`._special.erf`.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from .. import native
from . import registry
from ._special import erf, erf_float32, gelu_float32_native

_BF16 = np_dtype(TensorProto.BFLOAT16)
_HALF_TYPES = (np.dtype(np.float16), _BF16)


def _widen(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype numpy computes accurately in: float16/bfloat16 become float32."""
    if x.dtype in _HALF_TYPES:
        return x.astype(np.float32)
    return x


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _float_attr(info: KernelInfo, name: str, default: float) -> float:
    value = info.attr(name, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidGraph(
            f"{_node(info)}: attribute {name!r} must be a float, got {value!r}"
        ) from None




# ---------------------------------------------------------------- elementwise


class _FloatUnary(Kernel):
    """Base for float activations: compute ``_f`` in float32/64, cast back to the input type."""

    def _f(self, x: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def compute(self, x):
        x = np.asarray(x)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            y = self._f(_widen(x))
        return (np.asarray(y).astype(x.dtype, copy=False),)


@registry.register("Relu", since=(1, 6, 13, 14))
class Relu(Kernel):
    """y = max(x, 0); floats and (from version 14) signed integers."""

    def compute(self, x):
        x = np.asarray(x)
        if x.dtype == _BF16:
            return (np.maximum(x.astype(np.float32), 0).astype(_BF16),)
        return (np.maximum(x, x.dtype.type(0)),)


@registry.register("LeakyRelu", since=(1, 6, 16))
class LeakyRelu(_FloatUnary):
    """y = x if x >= 0 else alpha * x."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 0.01)

    def _f(self, x):
        # max/min instead of np.where: exact, and several times faster on mixed signs.
        return np.maximum(x, 0) + np.minimum(x, 0) * self.alpha


@registry.register("PRelu", since=(1, 6, 7, 9, 16))
class PRelu(Kernel):
    """y = x if x >= 0 else slope * x, slope broadcast to x (unidirectionally from v7)."""

    def compute(self, x, slope):
        x = np.asarray(x)
        slope = np.asarray(slope)
        if (
            self.info.since_version < 7
            and slope.ndim == 1
            and x.ndim >= 2
            and slope.shape[0] == x.shape[1] != x.shape[-1]
        ):
            # Old versions took a per-channel slope of shape [C] for X of shape [N, C, ...].
            slope = slope.reshape((x.shape[1],) + (1,) * (x.ndim - 2))
        try:
            shape = np.broadcast_shapes(slope.shape, x.shape)
        except ValueError:
            shape = None
        if shape != x.shape:
            raise ValueError(
                f"PRelu: slope of shape {slope.shape} does not broadcast to X's shape {x.shape}"
            )
        if x.dtype.kind in "iu":
            y = np.maximum(x, 0) + np.minimum(x, 0) * slope.astype(x.dtype, copy=False)
        else:
            xw = _widen(x)
            y = np.maximum(xw, 0) + np.minimum(xw, 0) * _widen(slope)
        return (y.astype(x.dtype, copy=False),)


@registry.register("Elu", since=(1, 6, 22))
class Elu(_FloatUnary):
    """y = x if x >= 0 else alpha * (exp(x) - 1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 1.0)

    def _f(self, x):
        return np.maximum(x, 0) + self.alpha * np.expm1(np.minimum(x, 0))


@registry.register("Selu", since=(1, 6, 22))
class Selu(_FloatUnary):
    """y = gamma * x if x > 0 else gamma * alpha * (exp(x) - 1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 1.67326319217681884765625)
        self.gamma = _float_attr(info, "gamma", 1.05070102214813232421875)

    def _f(self, x):
        return self.gamma * (np.maximum(x, 0) + self.alpha * np.expm1(np.minimum(x, 0)))


@registry.register("Celu", since=(12, 28))
class Celu(_FloatUnary):
    """y = max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 1.0)
        if self.alpha == 0.0:
            raise InvalidGraph(f"{_node(info)}: attribute 'alpha' must not be 0")

    def _f(self, x):
        neg = self.alpha * np.expm1(np.minimum(x, 0) / self.alpha)
        return np.maximum(x, 0) + np.minimum(neg, 0)


@registry.register("ThresholdedRelu", since=(10, 22))
class ThresholdedRelu(_FloatUnary):
    """y = x if x > alpha else 0."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 1.0)

    def _f(self, x):
        return np.where(x > self.alpha, x, 0)


@registry.register("Clip", since=(1, 6))
class ClipAttr(Kernel):
    """y = min(max(x, min), max) with the bounds as attributes (versions 1 and 6)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        lo = info.attr("min")
        hi = info.attr("max")
        self.lo = None if lo is None else float(lo)
        self.hi = None if hi is None else float(hi)

    def compute(self, x):
        x = np.asarray(x)
        y = _widen(x)
        limit = float(np.finfo(y.dtype).max) if y.dtype.kind == "f" else math.inf
        if self.lo is not None and self.lo > -limit:
            y = np.maximum(y, y.dtype.type(self.lo))
        if self.hi is not None and self.hi < limit:
            y = np.minimum(y, y.dtype.type(self.hi))
        return (y.astype(x.dtype, copy=y is x),)


@registry.register("Clip", since=(11, 12, 13))
class Clip(Kernel):
    """y = min(max(x, min), max) with optional scalar bound inputs; min > max gives max."""

    def compute(self, x, lo=None, hi=None):
        x = np.asarray(x)
        y = x
        for bound, fn, name in ((lo, np.maximum, "min"), (hi, np.minimum, "max")):
            if bound is None:
                continue
            b = np.asarray(bound)
            if b.size != 1:
                raise ValueError(f"Clip: input {name!r} must be a scalar, got shape {b.shape}")
            b = b.reshape(()).astype(x.dtype, copy=False)
            if x.dtype == _BF16:
                y = fn(y.astype(np.float32), b.astype(np.float32)).astype(_BF16)
            else:
                y = fn(y, b)
        if y is x:
            y = x.copy()
        return (y,)


@registry.register("Sigmoid", since=(1, 6, 13))
class Sigmoid(_FloatUnary):
    """y = 1 / (1 + exp(-x)); exp(-x) overflowing to inf gives 0, no NaN."""

    def _f(self, x):
        return _sigmoid(x)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-x) overflowing to inf (caller ignores the warning) correctly gives 0.
    d = np.exp(-x)
    d += 1.0
    return np.reciprocal(d, out=d)


@registry.register("HardSigmoid", since=(1, 6, 22))
class HardSigmoid(_FloatUnary):
    """y = max(0, min(1, alpha * x + beta))."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 0.2)
        self.beta = _float_attr(info, "beta", 0.5)

    def _f(self, x):
        return np.clip(x * self.alpha + self.beta, 0, 1)


@registry.register("HardSwish", since=(14, 22))
class HardSwish(_FloatUnary):
    """y = x * max(0, min(1, x / 6 + 0.5))."""

    def _f(self, x):
        return x * np.clip(x * (1.0 / 6.0) + 0.5, 0, 1)


@registry.register("Tanh", since=(1, 6, 13))
class Tanh(_FloatUnary):
    """y = tanh(x)."""

    def _f(self, x):
        return np.tanh(x)


@registry.register("Gelu", since=20)
class Gelu(Kernel):
    """y = 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation when approximate='tanh'."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.approximate = info.attr("approximate", "none")
        if self.approximate not in ("none", "tanh"):
            raise InvalidGraph(
                f"{_node(info)}: attribute 'approximate' must be 'none' or 'tanh', "
                f"got {self.approximate!r}"
            )

    def compute(self, x):
        x = np.asarray(x)
        if self.approximate == "tanh":
            if x.dtype == np.float32:
                y = native.gelu_tanh(x)
                if y is not None:
                    return (y,)
            w = _widen(x)
            inner = math.sqrt(2.0 / math.pi) * (w + 0.044715 * (w * w * w))
            y = 0.5 * w * (1.0 + np.tanh(inner))
        elif x.dtype == np.float32:
            y = gelu_float32_native(x)
            if y is not None:
                return (y,)
            # In float32, in place on one temporary: y = x * (0.5 + 0.5 erf(x / sqrt 2)).
            y = erf_float32(x * np.float32(1.0 / math.sqrt(2.0)))
            y *= np.float32(0.5)
            y += np.float32(0.5)
            y *= x
        else:
            w = x.astype(np.float64)
            y = 0.5 * w * (1.0 + erf(w * (1.0 / math.sqrt(2.0))))
        return (y.astype(x.dtype, copy=False),)


@registry.register("Softplus", since=(1, 22))
class Softplus(_FloatUnary):
    """y = log(1 + exp(x)), as max(x, 0) + log1p(exp(-|x|)) to avoid overflow."""

    def _f(self, x):
        return _softplus(x)


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


@registry.register("Softsign", since=(1, 22))
class Softsign(_FloatUnary):
    """y = x / (1 + |x|)."""

    def _f(self, x):
        return x / (1 + np.abs(x))


@registry.register("Shrink", since=9)
class Shrink(Kernel):
    """y = x + bias if x < -lambd, x - bias if x > lambd, else 0 (any numeric type)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.lambd = _float_attr(info, "lambd", 0.5)
        self.bias = _float_attr(info, "bias", 0.0)

    def compute(self, x):
        x = np.asarray(x)
        w = _widen(x).astype(np.float64) if x.dtype.kind in "iu" else _widen(x)
        y = np.where(w < -self.lambd, w + self.bias, np.where(w > self.lambd, w - self.bias, 0))
        return (np.asarray(y).astype(x.dtype),)


@registry.register("Mish", since=(18, 22))
class Mish(_FloatUnary):
    """y = x * tanh(softplus(x)) = x * n / (n + 2) with n = e^x (e^x + 2)."""

    def _f(self, x):
        # tanh(log(1 + e)) = ((1 + e)^2 - 1) / ((1 + e)^2 + 1). Past x = 20 the ratio is 1.0
        # in float64, so clamping there avoids overflow without changing the result.
        e = np.exp(np.minimum(x, 20.0))
        n = e * (e + 2.0)
        return x * (n / (n + 2.0))


@registry.register("Swish", since=24)
class Swish(_FloatUnary):
    """y = x * sigmoid(alpha * x)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = _float_attr(info, "alpha", 1.0)

    def _f(self, x):
        return x * _sigmoid(x * self.alpha)


# ------------------------------------------------------------ softmax family


class _AxisKernel(Kernel):
    """Softmax-like op: per-axis from version 13, on the input coerced to 2D before."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.per_axis = info.since_version >= 13
        self.axis = int(info.attr("axis", -1 if self.per_axis else 1))

    def _axis(self, ndim: int) -> int:
        # Per-axis versions need a real axis; the 2D-coerced ones also accept axis == rank.
        axis = self.axis
        hi = ndim - 1 if self.per_axis else ndim
        if not -ndim <= axis <= hi:
            raise ValueError(
                f"{self.info.op_type}: axis {axis} is out of range for an input of rank {ndim}"
            )
        return axis + ndim if axis < 0 else axis

    def _op(self, x: np.ndarray, axis: int) -> np.ndarray:
        raise NotImplementedError

    def compute(self, x):
        x = np.asarray(x)
        axis = self._axis(x.ndim)
        if x.size == 0:
            return (np.empty_like(x),)
        w = _widen(x)
        with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
            if self.per_axis:
                y = self._op(w, axis)
            else:
                rows = math.prod(x.shape[:axis])
                y = self._op(w.reshape(rows, -1), 1).reshape(x.shape)
        return (y.astype(x.dtype, copy=False),)


@registry.register("Softmax", since=(1, 11, 13))
class Softmax(_AxisKernel):
    """y = exp(x - max) / sum(exp(x - max)) along axis (2D-coerced before version 13)."""

    def _op(self, x, axis):
        if axis == x.ndim - 1:
            y = native.softmax_last_axis(x)
            if y is not None:
                return y
        e = x - np.max(x, axis=axis, keepdims=True)
        np.exp(e, out=e)  # in place: one buffer for the whole computation
        e /= np.sum(e, axis=axis, keepdims=True)
        return e


@registry.register("LogSoftmax", since=(1, 11, 13))
class LogSoftmax(_AxisKernel):
    """y = x - max - log(sum(exp(x - max))) along axis (2D-coerced before version 13)."""

    def _op(self, x, axis):
        shifted = x - np.max(x, axis=axis, keepdims=True)
        shifted -= np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
        return shifted


@registry.register("Hardmax", since=(1, 11, 13))
class Hardmax(_AxisKernel):
    """1 at the first maximum along axis, 0 elsewhere (2D-coerced before version 13)."""

    def _op(self, x, axis):
        idx = np.expand_dims(np.argmax(x, axis=axis), axis)
        y = np.zeros(x.shape, dtype=x.dtype)
        np.put_along_axis(y, idx, 1, axis=axis)
        return y
