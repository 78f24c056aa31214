"""GPU kernels: BatchNormalization, LayerNormalization and InstanceNormalization.

BatchNormalization in inference is one fused multiply-add per element: with constant
statistics (the usual case) the per-channel ``scale / sqrt(var + eps)`` and
``bias - mean * scale / sqrt(var + eps)`` are folded once, at creation. Training mode
(batch statistics and running averages) is supported too. Statistics of float16 inputs
are computed in float32 and results rounded back once.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from onyxrt.dtypes import np_dtype
from onyxrt.kernels import KernelInfo

from . import registry
from ._common import FLOATS, GpuKernel, bad, widen

__all__ = ["BatchNormalization", "LayerNormalization", "InstanceNormalization"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)
_FMA: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _fma(cp: Any) -> Any:
    """A fused ``x * mul + add`` for CuPy module ``cp`` (built once)."""
    fn = _FMA.get(cp)
    if fn is None:

        def fma(x, mul, add):
            return x * mul + add

        fn = cp.fuse(kernel_name="onyxrt_scale_shift")(fma)
        _FMA[cp] = fn
    return fn


def _compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    return _F32 if dtype == np.float16 else np.dtype(dtype)


def _epsilon(info: KernelInfo, default: float = 1e-5) -> float:
    eps = float(info.attr("epsilon", default))
    if eps < 0:
        raise bad(info, f"epsilon={eps} must be >= 0")
    return eps


@registry.register("BatchNormalization", since=(1, 6, 7, 9, 14, 15),
                   types={"T": FLOATS, "T1": FLOATS, "T2": FLOATS, "U": FLOATS})
class BatchNormalization(GpuKernel):
    """Per-channel (axis 1) normalization with given statistics, or batch statistics in
    training mode (running mean/var outputs; before version 14 also the saved ones)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = _epsilon(info)
        self.momentum = float(info.attr("momentum", 0.9))
        v = info.since_version
        wants_stats = any(n for n in info.output_names[1:])
        if v >= 14:
            self.training = bool(info.attr("training_mode", 0))
        elif v >= 7:
            self.training = wants_stats  # before 14 the mode follows the requested outputs
        else:
            self.training = not bool(info.attr("is_test", 0)) and wants_stats
        self.spatial = bool(info.attr("spatial", 1)) if v < 9 else True
        consts = [info.constant(i) for i in (1, 2, 3, 4)]
        self.folded: tuple[Any, Any] | None = None
        if not self.training and all(isinstance(c, np.ndarray) for c in consts):
            x_type = info.input_types[0] if info.input_types else None
            x_dtype = x_type.dtype if x_type is not None else None
            cdt = _compute_dtype(x_dtype if x_dtype is not None else consts[0].dtype)
            sc, b, mean, var = (np.asarray(c, dtype=cdt) for c in consts)
            mul = sc / np.sqrt(var + cdt.type(self.epsilon))
            add = b - mean * mul
            self.folded = (self.upload(mul), self.upload(add))

    def compute(self, x, scale, b, mean, var):
        cp = self.cp
        if x.ndim < 2:
            raise ValueError(f"X must have rank >= 2 (N, C, ...), got shape {x.shape}")
        stat_shape = (x.shape[1],) + (1,) * (x.ndim - 2) if self.spatial else x.shape[1:]
        xc = widen(x)
        cdt = xc.dtype
        if not self.training:
            if self.folded is not None:
                mul, add = self.folded
            else:
                mul = scale.astype(cdt, copy=False) / cp.sqrt(
                    var.astype(cdt, copy=False) + self.epsilon
                )
                add = b.astype(cdt, copy=False) - mean.astype(cdt, copy=False) * mul
            mul = mul.astype(cdt, copy=False).reshape(stat_shape)
            add = add.astype(cdt, copy=False).reshape(stat_shape)
            y = _fma(cp)(xc, mul, add)
            return (y.astype(x.dtype, copy=False),)
        axes = (0,) + tuple(range(2, x.ndim)) if self.spatial else (0,)
        acc = _F64 if cdt == _F64 else _F32
        cur_mean = xc.mean(axis=axes, dtype=acc, keepdims=True)
        diff = xc - cur_mean.astype(cdt)
        cur_var = (diff * diff).mean(axis=axes, dtype=acc, keepdims=True)
        sc = scale.astype(cdt, copy=False).reshape(stat_shape)
        bc = b.astype(cdt, copy=False).reshape(stat_shape)
        mul = sc / cp.sqrt(cur_var.astype(cdt) + self.epsilon)
        y = diff * mul + bc
        sdt = mean.dtype
        m = self.momentum
        cm = cur_mean.reshape(mean.shape)
        cv = cur_var.reshape(var.shape)
        run_mean = (mean.astype(acc) * m + cm * (1 - m)).astype(sdt)
        run_var = (var.astype(acc) * m + cv * (1 - m)).astype(sdt)
        outs: tuple[Any, ...] = (y.astype(x.dtype, copy=False), run_mean, run_var)
        if self.info.since_version < 14:
            inv_std = 1.0 / cp.sqrt(cv + self.epsilon)
            outs += (cm.astype(sdt), inv_std.astype(sdt))
        return outs


@registry.register("LayerNormalization", since=17, types={"T": FLOATS, "U": FLOATS})
class LayerNormalization(GpuKernel):
    """Normalize over axes [axis, rank); outputs Y and, when asked, Mean and InvStdDev."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", -1))
        self.epsilon = _epsilon(info)
        stash = int(info.attr("stash_type", 1))
        try:
            self.stat_dtype = np_dtype(stash)
        except TypeError:
            raise bad(info, f"stash_type={stash} is not an ONNX element type") from None
        if self.stat_dtype not in FLOATS:
            raise bad(info, f"stash_type={stash} is not float16, float or double")
        self.stash = _compute_dtype(self.stat_dtype)

    def compute(self, x, scale, b=None):
        cp = self.cp
        r = x.ndim
        axis = self.axis + r if self.axis < 0 else self.axis
        if not 0 <= axis < r:
            raise ValueError(f"axis {self.axis} is out of range for rank {r}")
        axes = tuple(range(axis, r))
        xs = x.astype(self.stash, copy=False)
        mean = xs.mean(axis=axes, keepdims=True)
        d = xs - mean
        var = (d * d).mean(axis=axes, keepdims=True)
        inv_std = 1.0 / cp.sqrt(var + self.epsilon)
        d *= inv_std
        normalized = d.astype(x.dtype, copy=False)
        cdt = _compute_dtype(x.dtype)
        y = normalized.astype(cdt, copy=False) * scale.astype(cdt, copy=False)
        if b is not None:
            y += b.astype(cdt, copy=False)
        return (
            y.astype(x.dtype, copy=False),
            mean.astype(self.stat_dtype, copy=False),
            inv_std.astype(self.stat_dtype, copy=False),
        )


@registry.register("InstanceNormalization", since=(1, 6, 22), types={"T": FLOATS})
class InstanceNormalization(GpuKernel):
    """Normalize each (n, c) slice over its spatial axes, then per-channel scale and bias."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.epsilon = _epsilon(info)

    def compute(self, x, scale, b):
        cp = self.cp
        if x.ndim < 3:
            raise ValueError(f"input must have rank >= 3 (N, C, D1...), got shape {x.shape}")
        xc = widen(x)
        cdt = xc.dtype
        axes = tuple(range(2, x.ndim))
        mean = xc.mean(axis=axes, keepdims=True)
        d = xc - mean
        var = (d * d).mean(axis=axes, keepdims=True)
        cs = (x.shape[1],) + (1,) * (x.ndim - 2)
        d *= scale.astype(cdt, copy=False).reshape(cs) / cp.sqrt(var + self.epsilon)
        d += b.astype(cdt, copy=False).reshape(cs)
        return (d.astype(x.dtype, copy=False),)
