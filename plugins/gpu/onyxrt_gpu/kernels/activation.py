"""GPU kernels: activation functions and the softmax family.

Relu, LeakyRelu, Clip (attribute and input versions), Sigmoid, Tanh, HardSwish,
HardSigmoid, Gelu (exact and tanh), Softmax and LogSoftmax (per-axis from version 13,
2-D coerced before).

Activations made of several elementwise steps run as one fused kernel (``cupy.fuse``),
built once per CuPy module and shared by every node. float16 inputs are computed in
float32 and rounded once at the end, as the CPU provider does. Gelu's exact form is
evaluated as ``0.5 x erfc(-x / sqrt 2)``, which avoids the cancellation of
``1 + erf(x / sqrt 2)`` for negative x.
"""

from __future__ import annotations

import importlib
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo

from . import registry
from ._common import FLOATS, NUMERIC, SIGNED_INTS, GpuKernel, bad, host_scalar, widen

_FUSED: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT2 = 1.0 / math.sqrt(2.0)


def _builders(module: Any) -> dict[str, Callable[..., Any]]:
    """The fused activations, as plain functions of device arrays over CuPy ``module``.

    They reach the module through a weak proxy, so the cache entry does not keep a
    (simulated) CuPy module alive.
    """
    cp = weakref.proxy(module)
    erfc = importlib.import_module("cupyx.scipy.special").erfc

    def sigmoid(x):
        return 1.0 / (1.0 + cp.exp(-x))

    def leaky_relu(x, alpha):
        return cp.maximum(x, 0.0) + cp.minimum(x, 0.0) * alpha

    def hard_sigmoid(x, alpha, beta):
        return cp.maximum(cp.minimum(x * alpha + beta, 1.0), 0.0)

    def hard_swish(x):
        return x * cp.maximum(cp.minimum(x * (1.0 / 6.0) + 0.5, 1.0), 0.0)

    def gelu_erf(x):
        return 0.5 * x * erfc(x * -_INV_SQRT2)

    def gelu_tanh(x):
        return 0.5 * x * (1.0 + cp.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))))

    return {
        "sigmoid": sigmoid,
        "leaky_relu": leaky_relu,
        "hard_sigmoid": hard_sigmoid,
        "hard_swish": hard_swish,
        "gelu_erf": gelu_erf,
        "gelu_tanh": gelu_tanh,
    }


def fused(cp: Any, name: str) -> Callable[..., Any]:
    """The fused kernel ``name`` for CuPy module ``cp`` (built on first use, then shared)."""
    table = _FUSED.get(cp)
    if table is None:
        table = {}
        _FUSED[cp] = table
    fn = table.get(name)
    if fn is None:
        fn = cp.fuse(kernel_name=f"onyxrt_{name}")(_builders(cp)[name])
        table[name] = fn
    return fn


def _float_attr(info: KernelInfo, name: str, default: float) -> float:
    value = info.attr(name, default)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise bad(info, f"attribute {name!r} must be a float, got {value!r}") from None


class _Fused(GpuKernel):
    """An activation computed by one fused kernel on float32/float64 data."""

    kernel = "sigmoid"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn = fused(self.cp, self.kernel)
        self.args: tuple[float, ...] = ()

    def compute(self, x):
        y = self.fn(widen(x), *self.args)
        return (y.astype(x.dtype, copy=False),)


# ------------------------------------------------------------------------ elementwise


@registry.register("Relu", since=(1, 6, 13, 14), types={"T": FLOATS | SIGNED_INTS})
class Relu(GpuKernel):
    """y = max(x, 0); floats and (from version 14) signed integers."""

    def compute(self, x):
        return (self.cp.maximum(x, 0),)


@registry.register("LeakyRelu", since=(1, 6, 16), types={"T": FLOATS})
class LeakyRelu(_Fused):
    """y = x if x >= 0 else alpha * x."""

    kernel = "leaky_relu"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.args = (_float_attr(info, "alpha", 0.01),)


@registry.register("Sigmoid", since=(1, 6, 13), types={"T": FLOATS})
class Sigmoid(_Fused):
    """y = 1 / (1 + exp(-x))."""

    kernel = "sigmoid"


@registry.register("HardSigmoid", since=(1, 6, 22), types={"T": FLOATS})
class HardSigmoid(_Fused):
    """y = max(0, min(1, alpha * x + beta))."""

    kernel = "hard_sigmoid"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.args = (_float_attr(info, "alpha", 0.2), _float_attr(info, "beta", 0.5))


@registry.register("HardSwish", since=(14, 22), types={"T": FLOATS})
class HardSwish(_Fused):
    """y = x * max(0, min(1, x / 6 + 0.5))."""

    kernel = "hard_swish"


@registry.register("Gelu", since=20, types={"T": FLOATS})
class Gelu(_Fused):
    """y = 0.5 x (1 + erf(x / sqrt 2)), or the tanh approximation when approximate='tanh'."""

    def __init__(self, info: KernelInfo) -> None:
        approximate = info.attr("approximate", "none")
        if approximate not in ("none", "tanh"):
            raise bad(info, f"attribute 'approximate' must be 'none' or 'tanh', "
                            f"got {approximate!r}")
        self.kernel = "gelu_tanh" if approximate == "tanh" else "gelu_erf"
        super().__init__(info)


@registry.register("Tanh", since=(1, 6, 13), types={"T": FLOATS})
class Tanh(GpuKernel):
    """y = tanh(x)."""

    def compute(self, x):
        return (self.cp.tanh(widen(x)).astype(x.dtype, copy=False),)


# ------------------------------------------------------------------------------- Clip


@registry.register("Clip", since=(1, 6), types={"T": FLOATS})
class ClipAttr(GpuKernel):
    """y = min(max(x, min), max) with the bounds as attributes (versions 1 and 6)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        lo = info.attr("min")
        hi = info.attr("max")
        self.lo = None if lo is None else float(lo)
        self.hi = None if hi is None else float(hi)

    def compute(self, x):
        cp = self.cp
        y = widen(x)
        limit = float(np.finfo(y.dtype).max)
        out = None
        if self.lo is not None and self.lo > -limit:
            out = cp.maximum(y, self.lo)
        if self.hi is not None and self.hi < limit:
            out = cp.minimum(y if out is None else out, self.hi)
        if out is None:
            return (x.copy(),)
        return (out.astype(x.dtype, copy=False),)


@registry.register("Clip", since=(11, 12, 13), types={"T": NUMERIC})
class Clip(GpuKernel):
    """y = min(max(x, min), max) with optional scalar bounds; min > max gives max.

    Constant bounds are read once at creation; runtime ones stay where they are (a
    device bound is used on the device, so no copy back to the host).
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.const: dict[int, Any] = {}
        for i in (1, 2):
            c = info.constant(i)
            if c is not None:
                self.const[i] = host_scalar(c)

    def _bound(self, i: int, value: Any, dtype: np.dtype[Any]) -> Any:
        if i in self.const:
            return dtype.type(self.const[i])
        if value is None:
            return None
        if isinstance(value, self.cp.ndarray):
            if value.size != 1:
                raise ValueError(f"Clip: the bounds must be scalars, got shape {value.shape}")
            return value.reshape(()).astype(dtype, copy=False)
        return dtype.type(host_scalar(value))

    def compute(self, x, lo=None, hi=None):
        cp = self.cp
        y = x
        b = self._bound(1, lo, x.dtype) if (lo is not None or 1 in self.const) else None
        if b is not None:
            y = cp.maximum(y, b)
        b = self._bound(2, hi, x.dtype) if (hi is not None or 2 in self.const) else None
        if b is not None:
            y = cp.minimum(y, b)
        if y is x:
            y = x.copy()
        return (y.astype(x.dtype, copy=False),)


# ---------------------------------------------------------------------- softmax family


class _AxisKernel(GpuKernel):
    """Softmax-like op: per-axis from version 13, on the input coerced to 2-D before."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.per_axis = info.since_version >= 13
        self.axis = int(info.attr("axis", -1 if self.per_axis else 1))

    def _axis(self, ndim: int) -> int:
        axis = self.axis
        hi = ndim - 1 if self.per_axis else ndim
        if not -ndim <= axis <= hi:
            raise ValueError(
                f"{self.info.op_type}: axis {axis} is out of range for an input of rank {ndim}"
            )
        return axis + ndim if axis < 0 else axis

    def _op(self, x: Any, axis: int) -> Any:
        raise NotImplementedError

    def compute(self, x):
        axis = self._axis(x.ndim)
        if x.size == 0:
            return (self.cp.empty_like(x),)
        w = widen(x)
        if self.per_axis:
            y = self._op(w, axis)
        else:
            rows = math.prod(x.shape[:axis])
            y = self._op(w.reshape(rows, -1), 1).reshape(x.shape)
        return (y.astype(x.dtype, copy=False),)


@registry.register("Softmax", since=(1, 11, 13), types={"T": FLOATS})
class Softmax(_AxisKernel):
    """y = exp(x - max) / sum(exp(x - max)) along axis (2-D coerced before version 13)."""

    def _op(self, x, axis):
        cp = self.cp
        e = cp.exp(x - x.max(axis=axis, keepdims=True))
        e /= e.sum(axis=axis, keepdims=True)
        return e


@registry.register("LogSoftmax", since=(1, 11, 13), types={"T": FLOATS})
class LogSoftmax(_AxisKernel):
    """y = x - max - log(sum(exp(x - max))) along axis (2-D coerced before version 13)."""

    def _op(self, x, axis):
        cp = self.cp
        shifted = x - x.max(axis=axis, keepdims=True)
        shifted -= cp.log(cp.exp(shifted).sum(axis=axis, keepdims=True))
        return shifted
