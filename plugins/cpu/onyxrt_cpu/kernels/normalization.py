"""CPU kernels: normalizations.

BatchNormalization (inference, and training mode with running statistics),
LayerNormalization, InstanceNormalization, GroupNormalization, LRN,
MeanVarianceNormalization and LpNormalization. Statistics of float16/bfloat16 inputs are
computed in float32 and results cast back to the input dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from .. import native
from . import registry
from ._spatial import LOW_FLOATS, compute_dtype

__all__ = [
    "BatchNormalization",
    "LayerNormalization",
    "InstanceNormalization",
    "GroupNormalization",
    "LRN",
    "MeanVarianceNormalization",
    "LpNormalization",
]


def _bad(info: KernelInfo, msg: str) -> InvalidGraph:
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {msg}")


def _epsilon(info: KernelInfo, default: float = 1e-5) -> float:
    eps = float(info.attr("epsilon", default))
    if eps < 0:
        raise _bad(info, f"epsilon={eps} must be >= 0")
    return eps


def _channel_shape(x: np.ndarray) -> tuple[int, ...]:
    """Shape that broadcasts a per-channel (axis 1) vector against ``x``."""
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _as(v: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    return np.asarray(v).astype(dtype, copy=False)


@registry.register("BatchNormalization", since=(1, 6, 7, 9, 14, 15))
class BatchNormalization(Kernel):
    """Per-channel (axis 1) normalization with given stats, or batch stats in training mode."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = _epsilon(info)
        self.momentum = float(info.attr("momentum", 0.9))
        v = info.since_version
        if v >= 14:
            self.training = bool(info.attr("training_mode", 0))
        elif v >= 7:
            # Before 14 the mode follows the requested outputs.
            self.training = self._wants_stats(info)
        else:
            self.training = not bool(info.attr("is_test", 0)) and self._wants_stats(info)
        self.spatial = bool(info.attr("spatial", 1)) if v < 9 else True

    @staticmethod
    def _wants_stats(info: KernelInfo) -> bool:
        return any(n for n in info.output_names[1:])

    def compute(self, x, scale, b, mean, var):
        if x.ndim < 2:
            raise ValueError(f"X must have rank >= 2 (N, C, ...), got shape {x.shape}")
        cdt = compute_dtype(x.dtype)
        stat_shape = _channel_shape(x) if self.spatial else x.shape[1:]
        xc = x.astype(cdt, copy=False)
        sc = _as(scale, cdt).reshape(stat_shape)
        bc = _as(b, cdt).reshape(stat_shape)
        if not self.training:
            mc = _as(mean, cdt).reshape(stat_shape)
            vc = _as(var, cdt).reshape(stat_shape)
            mul = sc / np.sqrt(vc + cdt.type(self.epsilon))
            y = xc * mul + (bc - mc * mul)
            return (y.astype(x.dtype, copy=False),)
        axes = (0,) + tuple(range(2, x.ndim)) if self.spatial else (0,)
        acc = np.float64 if cdt == np.float64 else np.float32
        cur_mean = np.mean(xc, axis=axes, dtype=acc, keepdims=True)
        cur_var = np.mean(np.square(xc - cur_mean), axis=axes, dtype=acc, keepdims=True)
        mul = sc / np.sqrt(cur_var.astype(cdt) + cdt.type(self.epsilon))
        y = (xc - cur_mean.astype(cdt)) * mul + bc
        sdt = np.asarray(mean).dtype
        m = self.momentum
        cm = cur_mean.reshape(np.shape(mean))
        cv = cur_var.reshape(np.shape(var))
        run_mean = (_as(mean, acc) * m + cm * (1 - m)).astype(sdt)
        run_var = (_as(var, acc) * m + cv * (1 - m)).astype(sdt)
        outs: tuple[np.ndarray, ...] = (y.astype(x.dtype, copy=False), run_mean, run_var)
        if self.info.since_version < 14:
            # Older versions also expose the batch statistics themselves (saved_*).
            inv_std = 1.0 / np.sqrt(cv + self.epsilon)
            outs += (cm.astype(sdt), inv_std.astype(sdt))
        return outs


@registry.register("LayerNormalization", since=17)
class LayerNormalization(Kernel):
    """Normalize over axes [axis, rank); outputs Y and optionally Mean and InvStdDev."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", -1))
        self.epsilon = _epsilon(info)
        stash = int(info.attr("stash_type", 1))
        try:
            self.stat_dtype = np_dtype(stash)
        except TypeError:
            raise _bad(info, f"stash_type={stash} is not an ONNX element type") from None
        if self.stat_dtype.kind != "f" and self.stat_dtype not in LOW_FLOATS:
            raise _bad(info, f"stash_type={stash} is not a floating-point type")
        # Stage one runs in the stash type (float32 for the 16-bit stash types).
        self.stash = compute_dtype(self.stat_dtype)

    def compute(self, x, scale, b=None):
        r = x.ndim
        axis = self.axis + r if self.axis < 0 else self.axis
        if not 0 <= axis < r:
            raise ValueError(f"axis {self.axis} is out of range for rank {r}")
        axes = tuple(range(axis, r))
        sdt = self.stash
        if axis == r - 1 and x.dtype == sdt == np.float32:
            done = native.layernorm_last_axis(
                x, _as(scale, sdt), None if b is None else _as(b, sdt), float(sdt.type(self.epsilon))
            )
            if done is not None:
                return done
        xs = x.astype(sdt, copy=False)
        mean = np.mean(xs, axis=axes, keepdims=True)
        d = xs - mean
        if x.dtype == sdt and axis == r - 1:
            # The common case (float32 over the last axis): the variance as a row-wise dot
            # product and the rest in place on d — one temporary instead of four.
            var = np.vecdot(d, d)[..., None] / sdt.type(x.shape[-1])
            inv_std = 1.0 / np.sqrt(var + sdt.type(self.epsilon))
            d *= inv_std
            d *= _as(scale, sdt)
            if b is not None:
                d += _as(b, sdt)
            return d, mean.astype(self.stat_dtype, copy=False), inv_std.astype(self.stat_dtype, copy=False)
        var = np.mean(d * d, axis=axes, keepdims=True)
        inv_std = 1.0 / np.sqrt(var + sdt.type(self.epsilon))
        normalized = (d * inv_std).astype(x.dtype, copy=False)
        cdt = compute_dtype(x.dtype)
        y = normalized.astype(cdt, copy=False) * _as(scale, cdt)
        if b is not None:
            y += _as(b, cdt)
        return (
            y.astype(x.dtype, copy=False),
            mean.astype(self.stat_dtype, copy=False),
            inv_std.astype(self.stat_dtype, copy=False),
        )


@registry.register("InstanceNormalization", since=(1, 6, 22))
class InstanceNormalization(Kernel):
    """Normalize each (n, c) slice over its spatial axes, then per-channel scale and bias."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = _epsilon(info)

    def compute(self, x, scale, b):
        if x.ndim < 3:
            raise ValueError(f"input must have rank >= 3 (N, C, D1...), got shape {x.shape}")
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        axes = tuple(range(2, x.ndim))
        mean = np.mean(xc, axis=axes, keepdims=True)
        d = xc - mean
        var = np.mean(d * d, axis=axes, keepdims=True)
        cs = _channel_shape(x)
        y = d * (_as(scale, cdt).reshape(cs) / np.sqrt(var + cdt.type(self.epsilon)))
        y += _as(b, cdt).reshape(cs)
        return (y.astype(x.dtype, copy=False),)


@registry.register("GroupNormalization", since=(18, 21))
class GroupNormalization(Kernel):
    """Normalize per (n, group of channels); scale/bias per group (v18) or per channel (v21)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = _epsilon(info)
        groups = info.attr("num_groups")
        if groups is None or int(groups) < 1:
            raise _bad(info, f"num_groups={groups} must be set and >= 1")
        self.num_groups = int(groups)
        self.per_channel = info.since_version >= 21
        stash = int(info.attr("stash_type", 1))
        self.stash = np.dtype(np.float64) if stash == 11 else np.dtype(np.float32)

    def compute(self, x, scale, bias):
        if x.ndim < 2:
            raise ValueError(f"X must have rank >= 2 (N, C, ...), got shape {x.shape}")
        n, c = x.shape[:2]
        g = self.num_groups
        if c % g:
            raise ValueError(f"num_groups={g} does not divide the {c} channels")
        sdt = self.stash if x.dtype != np.float64 else np.dtype(np.float64)
        xg = x.astype(sdt, copy=False).reshape(n, g, -1)
        mean = np.mean(xg, axis=2, keepdims=True)
        d = xg - mean
        var = np.mean(d * d, axis=2, keepdims=True)
        normalized = (d / np.sqrt(var + sdt.type(self.epsilon))).astype(x.dtype, copy=False)
        cdt = compute_dtype(x.dtype)
        sc = _as(scale, cdt).reshape(-1)
        bc = _as(bias, cdt).reshape(-1)
        if not self.per_channel:
            if sc.size != g or bc.size != g:
                raise ValueError(f"scale and bias must have num_groups={g} values")
            sc = np.repeat(sc, c // g)
            bc = np.repeat(bc, c // g)
        elif sc.size != c or bc.size != c:
            raise ValueError(f"scale and bias must have C={c} values")
        cs = _channel_shape(x)
        y = normalized.astype(cdt, copy=False).reshape(x.shape) * sc.reshape(cs)
        y += bc.reshape(cs)
        return (y.astype(x.dtype, copy=False),)


@registry.register("LRN", since=(1, 13))
class LRN(Kernel):
    """Local response normalization across channels."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        size = info.attr("size")
        if size is None or int(size) < 1:
            raise _bad(info, f"size={size} must be set and >= 1")
        self.size = int(size)
        self.alpha = float(info.attr("alpha", 1e-4))
        self.beta = float(info.attr("beta", 0.75))
        self.bias = float(info.attr("bias", 1.0))

    def compute(self, x):
        if x.ndim < 2:
            raise ValueError(f"X must have rank >= 2 (N, C, ...), got shape {x.shape}")
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        sq = xc * xc
        c = x.shape[1]
        before = (self.size - 1) // 2
        after = self.size - 1 - before
        # Running sum of squares over the channel window [c - before, c + after].
        csum = np.zeros((x.shape[0], c + 1) + x.shape[2:], dtype=cdt)
        np.cumsum(sq, axis=1, out=csum[:, 1:])
        hi = np.minimum(np.arange(c) + after + 1, c)
        lo = np.maximum(np.arange(c) - before, 0)
        sq_sum = csum[:, hi] - csum[:, lo]
        scale = cdt.type(self.bias) + cdt.type(self.alpha / self.size) * sq_sum
        y = xc / scale ** cdt.type(self.beta)
        return (y.astype(x.dtype, copy=False),)


@registry.register("MeanVarianceNormalization", since=(9, 13))
class MeanVarianceNormalization(Kernel):
    """(X - mean) / (std + 1e-9) with mean and std over ``axes``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axes = tuple(int(a) for a in info.attr("axes", [0, 2, 3]))

    def compute(self, x):
        r = x.ndim
        axes = tuple(sorted({a + r if a < 0 else a for a in self.axes}))
        if any(not 0 <= a < r for a in axes):
            raise ValueError(f"axes {list(self.axes)} are out of range for rank {r}")
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        mean = np.mean(xc, axis=axes, keepdims=True)
        var = np.mean(xc * xc, axis=axes, keepdims=True) - mean * mean
        std = np.sqrt(np.maximum(var, 0))
        y = (xc - mean) / (std + cdt.type(1e-9))
        return (y.astype(x.dtype, copy=False),)


@registry.register("LpNormalization", since=(1, 22))
class LpNormalization(Kernel):
    """x / ||x||_p along ``axis`` (p is 1 or 2); slices with a zero norm stay zero."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", -1))
        self.p = int(info.attr("p", 2))
        if self.p not in (1, 2):
            raise _bad(info, f"p={self.p} must be 1 or 2")

    def compute(self, x):
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        if self.p == 1:
            norm = np.sum(np.abs(xc), axis=self.axis, keepdims=True)
        else:
            norm = np.sqrt(np.sum(xc * xc, axis=self.axis, keepdims=True))
        # A zero norm gives zeros (the slice is all zeros), not NaN.
        y = np.zeros_like(xc)
        np.divide(xc, norm, out=y, where=norm != 0)
        return (y.astype(x.dtype, copy=False),)
