"""Normalizations, written once over an array namespace.

BatchNormalization (inference, and training mode with running statistics and, before
version 14, the saved batch statistics), LayerNormalization, InstanceNormalization,
GroupNormalization, LRN, MeanVarianceNormalization and LpNormalization, with every ONNX
version of each.

float16 and bfloat16 inputs are computed in float32 and rounded once at the end
(:meth:`~onyxrt_ops.library.OpKernel.widen`); LayerNormalization and GroupNormalization
compute their statistics in the ``stash_type`` (float32 unless it asks for float64).

Attribute errors are :class:`~onyxrt.errors.InvalidGraph` naming the node, raised when the
kernel is built; errors in the data (a rank too low, an axis out of range, scale/bias of
the wrong size) are ``ValueError`` raised by ``compute``.

Known gap: a ``stash_type`` the backend cannot hold (bfloat16 on CuPy, float16 on the
array API standard) is refused when the kernel is built.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .activation import FloatAttrs
from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_FLOAT_NAMES = frozenset({"float16", "bfloat16", "float32", "float64"})


def _compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """float64 stays, every other float type computes in float32."""
    return _F64 if dtype == _F64 else _F32


class Normalization(FloatAttrs):
    """Base of the normalizations: attribute parsing and the checks they share."""

    def epsilon_attr(self) -> float:
        """The ``epsilon`` attribute (default 1e-5); InvalidGraph when negative."""
        eps = self.float_attr("epsilon", 1e-5)
        if eps < 0:
            raise InvalidGraph(f"{self.where()}: epsilon={eps} must be >= 0")
        return eps

    def stash_dtype(self, stash: int) -> np.dtype[Any]:
        """The element type ``stash_type`` names: a float type the backend holds."""
        try:
            dtype = np_dtype(stash)
        except (TypeError, ValueError, KeyError):
            raise InvalidGraph(f"{self.where()}: stash_type={stash} is not an ONNX element type") from None
        if dtype_name(dtype) not in _FLOAT_NAMES or not self.backend.holds(dtype):
            raise InvalidGraph(
                f"{self.where()}: stash_type={stash} is not a floating-point type {self.backend.name} holds"
            )
        return dtype

    @staticmethod
    def rank_at_least(x: Any, rank: int, layout: str) -> None:
        """ValueError unless ``x`` has rank >= ``rank``."""
        if x.ndim < rank:
            raise ValueError(f"input must have rank >= {rank} ({layout}), got shape {tuple(x.shape)}")

    def channels(self, v: Any, ndim: int) -> Any:
        """A per-channel vector (C,) as (C, 1, ..., 1), to broadcast along axis 1 of a
        rank-``ndim`` array: indexed with None, a fifth of a reshape's cost on numpy."""
        if v.ndim == 1:
            return v[(slice(None),) + (None,) * (ndim - 2)]
        return self.xp.reshape(v, (-1,) + (1,) * (ndim - 2))

    def cast(self, v: Any, dtype: Any) -> Any:
        """``v`` in ``dtype`` (a namespace dtype), not copied when it already is."""
        return v if v.dtype == dtype else self.xp.astype(v, dtype)


@library.define("BatchNormalization", (1, 6, 7, 9, 14, 15))
class BatchNormalization(Normalization):
    """Per-channel (axis 1) normalization with the given statistics, or with the batch's in
    training mode (running mean/var outputs; before version 14 also the saved ones).

    Constant statistics (the usual inference case) are folded once, when the kernel is
    built, into ``y = x * mul + add`` (:attr:`folded`)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = self.epsilon_attr()
        self.momentum = self.float_attr("momentum", 0.9)
        v = info.since_version
        wants_stats = any(info.output_names[1:])
        if v >= 14:
            self.training = bool(info.attr("training_mode", 0))
        elif v >= 7:
            self.training = wants_stats  # before 14 the mode follows the requested outputs
        else:
            self.training = not bool(info.attr("is_test", 0)) and wants_stats
        self.spatial = bool(info.attr("spatial", 1)) if v < 9 else True
        #: (mul, add) from constant statistics, in the compute type of X's declared type.
        self.folded: tuple[Any, Any] | None = None
        consts = [info.constant(i) for i in (1, 2, 3, 4)]
        if not self.training and all(isinstance(c, np.ndarray) for c in consts):
            x_type = info.input_types[0] if info.input_types else None
            declared = x_type.dtype if x_type is not None and x_type.dtype is not None else consts[0].dtype
            cdt = _compute_dtype(np.dtype(declared))
            scale, bias, mean, var = (np.asarray(c, dtype=cdt) for c in consts)
            mul = scale / np.sqrt(var + cdt.type(self.epsilon))
            self.folded = (self.xp.asarray(mul), self.xp.asarray(bias - mean * mul))

    def scale_shift(self, xc: Any, scale: Any, b: Any, mean: Any, var: Any) -> tuple[Any, Any]:
        """The inference ``(mul, add)``, shaped to broadcast against ``xc``."""
        xp, cdt = self.xp, xc.dtype
        if self.folded is not None:
            mul, add = self.folded
        else:
            mul = self.cast(scale, cdt) / xp.sqrt(self.cast(var, cdt) + self.epsilon)
            add = self.cast(b, cdt) - self.cast(mean, cdt) * mul
        return self.stats(self.cast(mul, cdt), xc), self.stats(self.cast(add, cdt), xc)

    def stats(self, v: Any, x: Any) -> Any:
        """A statistic shaped to broadcast against ``x``: per channel, or per element of
        a sample when not spatial (before version 9)."""
        return self.channels(v, x.ndim) if self.spatial else self.xp.reshape(v, tuple(x.shape[1:]))

    def compute(self, x, scale, b, mean, var):
        self.rank_at_least(x, 2, "N, C, ...")
        xc = self.widen(x)
        if not self.training:
            mul, add = self.scale_shift(xc, scale, b, mean, var)
            y = xc * mul
            y += add  # in place: y is this call's own array
            return (self.narrow(y, x),)
        xp, cdt = self.xp, xc.dtype
        axes = (0,) + tuple(range(2, x.ndim)) if self.spatial else (0,)
        cur_mean = xp.mean(xc, axis=axes, keepdims=True)
        diff = xc - cur_mean
        cur_var = xp.mean(diff * diff, axis=axes, keepdims=True)
        mul = self.stats(self.cast(scale, cdt), x) / xp.sqrt(cur_var + self.epsilon)
        y = diff * mul + self.stats(self.cast(b, cdt), x)
        m, sdt = self.momentum, mean.dtype
        cm, cv = xp.reshape(cur_mean, mean.shape), xp.reshape(cur_var, var.shape)
        run_mean = self.cast(self.cast(mean, cdt) * m + cm * (1 - m), sdt)
        run_var = self.cast(self.cast(var, cdt) * m + cv * (1 - m), sdt)
        outs: tuple[Any, ...] = (self.narrow(y, x), run_mean, run_var)
        if self.info.since_version < 14:
            # Older versions also expose the batch statistics themselves (saved_*).
            outs += (self.cast(cm, sdt), self.cast(1.0 / xp.sqrt(cv + self.epsilon), sdt))
        return outs


@library.define("LayerNormalization", 17)
class LayerNormalization(Normalization):
    """Normalize over axes [axis, rank); outputs Y and (when asked) Mean and InvStdDev, in
    ``stash_type``. The statistics are computed in the stash type (float32 for the 16-bit
    ones), the normalized value rounded to X's type before scale and bias, as ONNX's
    function body does."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = self.epsilon_attr()
        self.axis = int(info.attr("axis", -1))
        stat = self.stash_dtype(int(info.attr("stash_type", 1)))
        self.stat_dtype = self.backend.dtype(stat)
        self.stash = self.backend.dtype(_compute_dtype(stat))

    def normalized_axis(self, x: Any) -> int:
        """``axis`` in [0, rank); ValueError when out of range."""
        r = x.ndim
        axis = self.axis + r if self.axis < 0 else self.axis
        if not 0 <= axis < r:
            raise ValueError(f"axis {self.axis} is out of range for rank {r}")
        return axis

    def compute(self, x, scale, b=None):
        xp = self.xp
        axes = tuple(range(self.normalized_axis(x), x.ndim))
        xs = self.cast(x, self.stash)
        mean = xp.mean(xs, axis=axes, keepdims=True)
        d = xs - mean
        inv_std = 1.0 / xp.sqrt(xp.mean(d * d, axis=axes, keepdims=True) + self.epsilon)
        y = self.widen(self.narrow(d * inv_std, x)) * self.widen(scale)
        if b is not None:
            y = y + self.widen(b)
        return self.narrow(y, x), self.cast(mean, self.stat_dtype), self.cast(inv_std, self.stat_dtype)


@library.define("InstanceNormalization", (1, 6, 22))
class InstanceNormalization(Normalization):
    """Normalize each (n, c) slice over its spatial axes, then per-channel scale and bias."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = self.epsilon_attr()

    def compute(self, x, scale, b):
        xp = self.xp
        self.rank_at_least(x, 3, "N, C, D1, ...")
        xc = self.widen(x)
        axes = tuple(range(2, x.ndim))
        mean = xp.mean(xc, axis=axes, keepdims=True)
        d = xc - mean
        var = xp.mean(d * d, axis=axes, keepdims=True)
        d *= self.channels(self.cast(scale, xc.dtype), x.ndim) / xp.sqrt(var + self.epsilon)
        d += self.channels(self.cast(b, xc.dtype), x.ndim)  # in place: d is this call's own array
        return (self.narrow(d, x),)


@library.define("GroupNormalization", (18, 21))
class GroupNormalization(Normalization):
    """Normalize per (n, group of channels); scale and bias per group (version 18) or per
    channel (21). Statistics in ``stash_type`` (float32, or float64 when it says so or X
    is float64)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = self.epsilon_attr()
        groups = info.attr("num_groups")
        if groups is None or int(groups) < 1:
            raise InvalidGraph(f"{self.where()}: num_groups={groups} must be set and >= 1")
        self.num_groups = int(groups)
        self.per_channel = info.since_version >= 21
        stash = _F64 if int(info.attr("stash_type", 1)) == 11 else _F32
        self.stash, self.f64 = self.backend.dtype(stash), self.backend.dtype(_F64)

    def affine(self, v: Any, c: int, ndim: int) -> Any:
        """Scale or bias as one value per channel, shaped to broadcast against X."""
        g = self.num_groups
        want = c if self.per_channel else g
        if v.ndim != 1 or v.shape[0] != want:
            raise ValueError(f"scale and bias must have {'C' if self.per_channel else 'num_groups'}={want} values")
        v = self.widen(v)
        if not self.per_channel:  # each group's value repeated over its channels
            v = self.xp.reshape(self.xp.broadcast_to(self.xp.reshape(v, (g, 1)), (g, c // g)), (c,))
        return self.channels(v, ndim)

    def compute(self, x, scale, bias):
        xp = self.xp
        self.rank_at_least(x, 2, "N, C, ...")
        n, c = x.shape[:2]
        g = self.num_groups
        if c % g:
            raise ValueError(f"num_groups={g} does not divide the {c} channels")
        xg = xp.reshape(self.cast(x, self.f64 if x.dtype == self.f64 else self.stash), (n, g, -1))
        d = xg - xp.mean(xg, axis=2, keepdims=True)
        d /= xp.sqrt(xp.mean(d * d, axis=2, keepdims=True) + self.epsilon)
        y = xp.reshape(self.widen(self.narrow(d, x)), x.shape) * self.affine(scale, c, x.ndim)
        y += self.affine(bias, c, x.ndim)  # in place: y is this call's own array
        return (self.narrow(y, x),)


@library.define("LRN", (1, 13))
class LRN(Normalization):
    """Local response normalization across channels:
    ``x / (bias + alpha / size * sum of x² over the channel window) ** beta``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        size = info.attr("size")
        if size is None or int(size) < 1:
            raise InvalidGraph(f"{self.where()}: size={size} must be set and >= 1")
        self.size = int(size)
        self.alpha = self.float_attr("alpha", 1e-4)
        self.beta = self.float_attr("beta", 0.75)
        self.bias = self.float_attr("bias", 1.0)

    def compute(self, x):
        self.rank_at_least(x, 2, "N, C, ...")
        xc = self.widen(x)
        c = x.shape[1]
        before = (self.size - 1) // 2
        after = self.size - 1 - before
        # The sum of squares over channels [i - before, i + after] (clipped to [0, C)),
        # added slice by slice onto the channel's own square (no concat: CuPy before 14
        # has none).
        sq, window = xc * xc, xc * xc
        for o in range(1, min(before, c - 1) + 1):
            window[:, o:, ...] += sq[:, :c - o, ...]
        for o in range(1, min(after, c - 1) + 1):
            window[:, :c - o, ...] += sq[:, o:, ...]
        return (self.narrow(xc / (self.bias + (self.alpha / self.size) * window) ** self.beta, x),)


@library.define("MeanVarianceNormalization", (9, 13))
class MeanVarianceNormalization(OpKernel):
    """(X - mean) / (std + 1e-9), mean and std over ``axes`` (default [0, 2, 3])."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axes = tuple(int(a) for a in info.attr("axes", [0, 2, 3]))

    def compute(self, x):
        xp = self.xp
        r = x.ndim
        axes = tuple(sorted({a + r if a < 0 else a for a in self.axes}))
        if any(not 0 <= a < r for a in axes):
            raise ValueError(f"axes {list(self.axes)} are out of range for rank {r}")
        xc = self.widen(x)
        mean = xp.mean(xc, axis=axes, keepdims=True)
        var = xp.mean(xc * xc, axis=axes, keepdims=True) - mean * mean
        return (self.narrow((xc - mean) / (xp.sqrt(xp.maximum(var, 0.0)) + 1e-9), x),)


@library.define("LpNormalization", (1, 22))
class LpNormalization(OpKernel):
    """x / ||x||_p along ``axis`` (p is 1 or 2); slices with a zero norm stay zero."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", -1))
        self.p = int(info.attr("p", 2))
        if self.p not in (1, 2):
            raise InvalidGraph(f"{self.where()}: p={self.p} must be 1 or 2")

    def compute(self, x):
        xp = self.xp
        if not -x.ndim <= self.axis < x.ndim:
            raise ValueError(f"axis {self.axis} is out of range for rank {x.ndim}")
        xc = self.widen(x)
        if self.p == 1:
            norm = xp.sum(xp.abs(xc), axis=self.axis, keepdims=True)
        else:
            norm = xp.sqrt(xp.sum(xc * xc, axis=self.axis, keepdims=True))
        # A zero norm means an all-zero slice: divided by 1 it stays zero (not NaN).
        return (self.narrow(xc / xp.where(norm == 0, 1.0, norm), x),)
