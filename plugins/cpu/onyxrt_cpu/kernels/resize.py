"""CPU kernels: Resize and the deprecated Upsample.

Resizing is separable: every resized axis gets a 1-D table (source indices, and for
linear/cubic the weights of each tap) computed once per input shape and cached, then
the tables are applied axis by axis with ``np.take`` gathers and weighted sums. Nearest
resizing is one fancy-index gather over the resized axes. Works for any rank.
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.limits import check_allocation, output_of

from . import registry

_BF16: np.dtype[Any] | None
try:  # ml_dtypes ships with onnx
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    _BF16 = None

_COORD_MODES = {
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
    "tf_crop_and_resize",
}
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"}
_CACHE_SIZE = 16
# When a linear/cubic axis is applied as one dense (out, in) matmul instead of taps-many
# gathers and multiply-adds: on the innermost axis (where gathers are element-wise and slow)
# up to _DENSE_LAST inputs, elsewhere with >= 4 taps up to _DENSE_PER_TAP inputs per tap.
_DENSE_LAST = 256
_DENSE_PER_TAP = 64
_DENSE_MAX = 1 << 20


@dataclass(frozen=True)
class _AxisTable:
    """How one axis is resampled: ``idx`` (out,) for nearest or (out, taps) with ``w``."""

    idx: np.ndarray
    w: np.ndarray | None
    outside: np.ndarray | None  # (out,) bool: tf_crop_and_resize extrapolated positions
    #: (out, in) interpolation matrix, when applying it with one matmul beats the taps.
    dense: np.ndarray | None = None


@dataclass(frozen=True)
class _Plan:
    out_shape: tuple[int, ...]
    axes: tuple[tuple[int, _AxisTable], ...]  # only axes that actually change


def _bad(info: KernelInfo, msg: str) -> InvalidGraph:
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {msg}")


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic convolution kernel with coefficient ``a`` at distances ``d``."""
    t = np.abs(d)
    t2 = t * t
    t3 = t2 * t
    near = (a + 2.0) * t3 - (a + 3.0) * t2 + 1.0
    far = a * t3 - 5.0 * a * t2 + 8.0 * a * t - 4.0 * a
    return np.where(t <= 1.0, near, np.where(t < 2.0, far, 0.0))


def _linear(d: np.ndarray) -> np.ndarray:
    return np.maximum(0.0, 1.0 - np.abs(d))


def _is_identity(t: _AxisTable, n_in: int) -> bool:
    """Whether the table copies the axis unchanged (so it can be skipped)."""
    n_out = t.idx.shape[0]
    if n_out != n_in or t.outside is not None:
        return False
    ident = np.arange(n_in)
    if t.w is None:
        return bool(np.array_equal(t.idx, ident))
    hit = (t.idx == ident[:, None]) & (t.w == 1.0)
    return bool(hit.any(axis=1).all() and (t.w[~hit] == 0.0).all())


class _ResizeBase(Kernel):
    """Shared machinery of Resize (all versions) and Upsample."""

    mode = "nearest"
    coord_mode = "asymmetric"
    nearest_mode = "simple"
    cubic_a = -0.75
    exclude_outside = False
    extrapolation = 0.0
    antialias = False
    axes_attr: list[int] | None = None
    keep_aspect = "stretch"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self._cache: OrderedDict[tuple[Any, ...], _Plan] = OrderedDict()

    def _check(self) -> None:
        info = self.info
        if self.mode not in ("nearest", "linear", "cubic"):
            raise _bad(info, f"unsupported mode {self.mode!r}")
        if self.coord_mode not in _COORD_MODES:
            raise _bad(info, f"unsupported coordinate_transformation_mode {self.coord_mode!r}")
        if self.nearest_mode not in _NEAREST_MODES:
            raise _bad(info, f"unsupported nearest_mode {self.nearest_mode!r}")
        if self.keep_aspect not in ("stretch", "not_larger", "not_smaller"):
            raise _bad(info, f"unsupported keep_aspect_ratio_policy {self.keep_aspect!r}")

    # ------------------------------------------------------------------ planning

    def _plan(
        self,
        shape: tuple[int, ...],
        scales: np.ndarray | None,
        sizes: np.ndarray | None,
        roi: np.ndarray | None,
        dtype: Any = np.float32,
    ) -> _Plan:
        key = (
            shape,
            None if scales is None else scales.tobytes(),
            None if sizes is None else sizes.tobytes(),
            None if roi is None else (roi.dtype.str, roi.tobytes()),
        )
        plan = self._cache.get(key)
        if plan is not None:
            # Runs of one session on several threads share this kernel: another thread may
            # have evicted the entry since the get, which costs only its place in the LRU.
            with contextlib.suppress(KeyError):
                self._cache.move_to_end(key)
            return plan
        plan = self._make_plan(shape, scales, sizes, roi, dtype)
        self._cache[key] = plan
        if len(self._cache) > _CACHE_SIZE:
            self._cache.popitem(last=False)
        return plan

    def _make_plan(
        self,
        shape: tuple[int, ...],
        scales: np.ndarray | None,
        sizes: np.ndarray | None,
        roi: np.ndarray | None,
        dtype: Any = np.float32,
    ) -> _Plan:
        rank = len(shape)
        if self.axes_attr is None:
            axes = list(range(rank))
        else:
            axes = []
            for a in self.axes_attr:
                if not -rank <= a < rank:
                    raise ValueError(f"axis {a} is out of range for rank {rank}")
                axes.append(a + rank if a < 0 else a)
            if len(set(axes)) != len(axes):
                raise ValueError(f"axes {self.axes_attr} repeat an axis of the rank-{rank} input")
        n = len(axes)
        if (scales is None) == (sizes is None):
            raise ValueError("exactly one of 'scales' and 'sizes' must be given")
        given = scales if scales is not None else sizes
        assert given is not None
        if given.size != n:
            what = "scales" if scales is not None else "sizes"
            raise ValueError(f"{what} has {given.size} values, expected {n} (input rank {rank})")
        out_shape = list(shape)
        scale_of = [1.0] * rank
        if scales is not None:
            sc = scales.astype(np.float32).reshape(-1)
            if (sc <= 0).any():
                raise ValueError(f"scales must be positive, got {sc.tolist()}")
            for i, a in enumerate(axes):
                # float32 product, as onnxruntime: 10 * 0.7f -> 7
                out_shape[a] = int(np.floor(np.float32(shape[a]) * sc[i]))
                scale_of[a] = float(sc[i])
        else:
            assert sizes is not None
            sz = [int(v) for v in sizes.reshape(-1)]
            if any(v < 0 for v in sz):
                raise ValueError(f"sizes must be non-negative, got {sz}")
            if self.keep_aspect == "stretch":
                for i, a in enumerate(axes):
                    out_shape[a] = sz[i]
                    scale_of[a] = sz[i] / shape[a] if shape[a] else 1.0
            else:
                ratios = [sz[i] / shape[a] for i, a in enumerate(axes) if shape[a]]
                common = (min if self.keep_aspect == "not_larger" else max)(ratios or [1.0])
                for a in axes:
                    out_shape[a] = int(np.floor(common * shape[a] + 0.5))
                    scale_of[a] = common
        # Before the per-axis tables, which are as long as the output axes.
        check_allocation(out_shape, dtype, output_of(self.info))
        starts = [0.0] * rank
        ends = [1.0] * rank
        if self.coord_mode == "tf_crop_and_resize":
            if roi is None or roi.size == 0:
                raise ValueError("coordinate_transformation_mode tf_crop_and_resize needs roi")
            r = roi.astype(np.float64).reshape(-1)
            if r.size != 2 * n:
                raise ValueError(f"roi has {r.size} values, expected {2 * n}")
            for i, a in enumerate(axes):
                starts[a] = float(r[i])
                ends[a] = float(r[n + i])
        tables = []
        for a in axes:
            t = self._axis_table(
                shape[a], out_shape[a], scale_of[a], starts[a], ends[a], a == rank - 1
            )
            if not _is_identity(t, shape[a]):
                tables.append((a, t))
        return _Plan(tuple(out_shape), tuple(tables))

    def _coords(self, n_in: int, n_out: int, scale: float, s: float, e: float) -> np.ndarray:
        """Source coordinate of every output position (float64, snapped to float32).

        ``scale`` is the float32 value given in ``scales``, or the exact ratio
        ``n_out / n_in`` for ``sizes``. Rounding the result to float32 absorbs the
        representation error of float32 scales, so ``3 / 0.6f`` is 5 (as in onnxruntime)
        while ``sizes`` keep exact ties (``2 * 7 / 4`` is 3.5); modes that do not divide by
        the scale are left in float64. As the spec (and onnx's
        reference) says, align_corners and tf_crop_and_resize use the unrounded resized
        length ``n_in * scale``; onnxruntime uses ``n_out``, they agree whenever
        ``n_in * scale`` is whole (always with ``sizes``).
        """
        o = np.arange(n_out, dtype=np.float64)
        span = n_in * scale - 1.0
        m = self.coord_mode
        if m == "half_pixel":
            x = (o + 0.5) / scale - 0.5
        elif m == "half_pixel_symmetric":
            adjustment = n_out / (n_in * scale)
            offset = n_in / 2.0 * (1.0 - adjustment)
            x = offset + (o + 0.5) / scale - 0.5
        elif m == "pytorch_half_pixel":
            x = (o + 0.5) / scale - 0.5 if n_out > 1 else np.zeros(n_out)
        elif m == "align_corners":
            return o * ((n_in - 1) / span) if n_out > 1 else np.zeros(n_out)
        elif m == "asymmetric":
            x = o / scale
        elif m == "tf_half_pixel_for_nn":
            x = (o + 0.5) / scale
        elif n_out > 1:  # tf_crop_and_resize
            return s * (n_in - 1) + o * ((e - s) * (n_in - 1) / span)
        else:
            return np.full(n_out, 0.5 * (s + e) * (n_in - 1))
        return x.astype(np.float32).astype(np.float64)

    def _axis_table(
        self, n_in: int, n_out: int, scale: float, s: float, e: float, last: bool = False
    ) -> _AxisTable:
        x = self._coords(n_in, n_out, scale, s, e)
        outside = None
        if self.coord_mode == "tf_crop_and_resize":
            mask = (x < 0) | (x > n_in - 1)
            outside = mask if mask.any() else None
        if n_in == 0:
            return _AxisTable(np.zeros(n_out, np.int64), None, outside)
        if self.mode == "nearest":
            nm = self.nearest_mode
            if nm == "simple":  # Upsample / Resize-10: floor upsampling, ceil downsampling
                nm = "ceil" if scale < 1.0 else "floor"
            if nm == "round_prefer_floor":
                r = np.ceil(x - 0.5)
            elif nm == "round_prefer_ceil":
                r = np.floor(x + 0.5)
            elif nm == "floor":
                r = np.floor(x)
            else:
                r = np.ceil(x)
            idx = np.clip(r, 0, n_in - 1).astype(np.int64)
            return _AxisTable(idx, None, outside)
        support = 1 if self.mode == "linear" else 2
        stretch = min(scale, 1.0) if self.antialias else 1.0
        base = np.floor(x).astype(np.int64)
        if stretch == 1.0:
            offs = np.arange(1 - support, support + 1, dtype=np.int64)
            j = base[:, None] + offs
        else:
            radius = support / stretch
            taps = int(np.ceil(2 * radius)) + 2
            lo = np.floor(x - radius).astype(np.int64)
            j = lo[:, None] + np.arange(taps, dtype=np.int64)
        d = (x[:, None] - j) * stretch
        w = _linear(d) if self.mode == "linear" else _cubic(d, self.cubic_a)
        normalize = stretch != 1.0
        if self.exclude_outside:
            w = np.where((j >= 0) & (j < n_in), w, 0.0)
            normalize = True
        if normalize:
            tot = w.sum(axis=1, keepdims=True)
            w = w / np.where(tot == 0.0, 1.0, tot)
        keep = np.any(w != 0.0, axis=0)  # drop taps that never contribute
        if not keep.all() and keep.any():
            j, w = j[:, keep], w[:, keep]
        j = np.clip(j, 0, n_in - 1)
        dense = None
        taps = j.shape[1]
        if n_in * n_out <= _DENSE_MAX and (
            (last and n_in <= _DENSE_LAST) or (taps >= 4 and n_in <= _DENSE_PER_TAP * taps)
        ):
            dense = np.zeros((n_out, n_in))
            np.add.at(dense, (np.arange(n_out)[:, None], j), w)
        return _AxisTable(j, w, outside, dense)

    # ------------------------------------------------------------------ execution

    def _resize(
        self,
        x: np.ndarray,
        scales: np.ndarray | None,
        sizes: np.ndarray | None,
        roi: np.ndarray | None,
    ) -> np.ndarray:
        x = np.asarray(x)
        plan = self._plan(x.shape, scales, sizes, roi, x.dtype)
        if not plan.axes:
            return x
        if any(d == 0 for d in plan.out_shape) or x.size == 0:
            return np.zeros(plan.out_shape, dtype=x.dtype)
        if self.mode == "nearest":
            y = self._nearest(x, plan)
        else:
            y = self._interpolate(x, plan)
        masks = [(a, t.outside) for a, t in plan.axes if t.outside is not None]
        if masks:
            full = np.zeros((1,) * y.ndim, dtype=bool)
            for a, m in masks:
                shp = [1] * y.ndim
                shp[a] = m.size
                full = full | m.reshape(shp)
            fill = np.asarray(self.extrapolation).astype(y.dtype) if y.dtype.kind != "O" else None
            y = np.where(full, fill if fill is not None else self.extrapolation, y)
        return y

    @staticmethod
    def _nearest(x: np.ndarray, plan: _Plan) -> np.ndarray:
        # One np.take per resized axis: much faster than one broadcast fancy index over
        # several axes, since each take copies whole contiguous inner runs.
        for a, t in _axis_order(plan, x.shape):
            x = np.take(x, t.idx, axis=a)
        return x

    @staticmethod
    def _interpolate(x: np.ndarray, plan: _Plan) -> np.ndarray:
        dt = x.dtype
        if dt == np.float64 or dt.kind in "iu" and dt.itemsize >= 4:
            work = np.dtype(np.float64)
        elif dt.kind in "iuf" or (_BF16 is not None and dt == _BF16):
            work = np.dtype(np.float32)
        else:
            raise TypeError(f"linear/cubic resize does not support dtype {dt}")
        y = x.astype(work, copy=False)
        finite: bool | None = None
        for a, t in _axis_order(plan, y.shape):
            assert t.w is not None
            if t.dense is not None:
                if finite is None:  # 0 * inf would smear NaN over a whole matmul row
                    finite = bool(np.isfinite(y).all())
                if finite:
                    y = _matmul_axis(y, a, t.dense.astype(work))
                    continue
            shp = [1] * y.ndim
            shp[a] = t.idx.shape[0]
            w = t.w.astype(work)
            acc = None
            for k in range(t.idx.shape[1]):
                g = np.take(y, t.idx[:, k], axis=a)
                np.multiply(g, w[:, k].reshape(shp), out=g)
                if acc is None:
                    acc = g
                else:
                    acc += g
            assert acc is not None
            y = acc
        if dt.kind in "iu":
            # Truncate toward zero like onnxruntime, after nudging away from zero by a few
            # ulps so that 127.99999 (rounding noise of an exact 128) stays 128.
            eps = 1e-5 if work == np.float32 else 1e-12
            y = np.trunc(y + np.copysign(np.maximum(np.abs(y), 1.0) * eps, y))
            info = np.iinfo(dt)
            y = np.clip(y, info.min, info.max)
        return y.astype(dt, copy=False)


def _matmul_axis(y: np.ndarray, a: int, w: np.ndarray) -> np.ndarray:
    """Apply the (out, in) matrix ``w`` along axis ``a`` of ``y`` with BLAS."""
    shape = y.shape
    n_in = shape[a]
    lead = math.prod(shape[:a])
    trail = math.prod(shape[a + 1 :])
    if trail == 1:
        out = y.reshape(lead, n_in) @ w.T
    else:
        out = np.matmul(w, y.reshape(lead, n_in, trail))
    return out.reshape(shape[:a] + (w.shape[0],) + shape[a + 1 :])


def _axis_order(plan: _Plan, shape: tuple[int, ...]) -> list[tuple[int, _AxisTable]]:
    """Resized axes, shrinking ones first (smaller intermediates), inner axes first on ties."""
    return sorted(plan.axes, key=lambda at: (at[1].idx.shape[0] / max(shape[at[0]], 1), -at[0]))


def _opt(v: Any) -> np.ndarray | None:
    """An optional 1-D input: ``None`` when absent or empty."""
    if v is None:
        return None
    a = np.asarray(v)
    return None if a.size == 0 else a


@registry.register("Resize", since=(11, 13, 18, 19))
class Resize(_ResizeBase):
    """Resize v11+: roi, scales or sizes; nearest/linear/cubic; all coordinate modes."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        v = info.since_version
        self.mode = info.attr("mode", "nearest")
        self.coord_mode = info.attr("coordinate_transformation_mode", "half_pixel")
        self.nearest_mode = info.attr("nearest_mode", "round_prefer_floor")
        self.cubic_a = float(info.attr("cubic_coeff_a", -0.75))
        self.exclude_outside = bool(info.attr("exclude_outside", 0))
        self.extrapolation = float(info.attr("extrapolation_value", 0.0))
        self.antialias = bool(info.attr("antialias", 0)) if v >= 18 else False
        axes = info.attr("axes") if v >= 18 else None
        self.axes_attr = None if axes is None else [int(a) for a in axes]
        if self.axes_attr is not None and len(set(self.axes_attr)) != len(self.axes_attr):
            raise _bad(info, f"repeated values in axes {self.axes_attr}")
        self.keep_aspect = (
            info.attr("keep_aspect_ratio_policy", "stretch") if v >= 18 else ("stretch")
        )
        if self.nearest_mode == "simple":
            raise _bad(info, "unsupported nearest_mode 'simple'")
        if self.coord_mode == "tf_half_pixel_for_nn" and v >= 13:
            raise _bad(info, "coordinate_transformation_mode tf_half_pixel_for_nn was removed")
        if self.coord_mode == "half_pixel_symmetric" and v < 19:
            raise _bad(info, "half_pixel_symmetric needs Resize version 19")
        self._check()

    def compute(self, x, roi=None, scales=None, sizes=None):
        scales_a = _opt(scales)
        sizes_a = _opt(sizes)
        return (self._resize(x, scales_a, sizes_a, _opt(roi)),)


@registry.register("Resize", since=10)
class Resize10(_ResizeBase):
    """Resize v10: scales input, nearest or linear, asymmetric coordinates."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.mode = info.attr("mode", "nearest")
        if self.mode not in ("nearest", "linear"):
            raise _bad(info, f"mode must be 'nearest' or 'linear', got {self.mode!r}")
        self._check()

    def compute(self, x, scales):
        return (self._resize(x, np.asarray(scales), None, None),)


@registry.register("Upsample", since=(7, 9, 10))
class Upsample(_ResizeBase):
    """Deprecated Upsample: scales attribute (v7) or input (v9/v10); nearest or linear."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        mode = info.attr("mode", "nearest")
        self.mode = "linear" if mode == "bilinear" else mode
        if self.mode not in ("nearest", "linear"):
            raise _bad(info, f"mode must be 'nearest' or 'linear', got {mode!r}")
        self.scales = None
        if info.since_version == 7:
            sc = info.attr("scales")
            if sc is None:
                raise _bad(info, "attribute 'scales' is required")
            if any(s < 1 for s in sc):
                raise _bad(info, f"scales must be >= 1, got {sc}")
            self.scales = np.asarray(sc, dtype=np.float32)
        self._check()

    def compute(self, x, scales=None):
        sc = self.scales if self.scales is not None else np.asarray(scales, dtype=np.float32)
        if sc is None:
            raise ValueError("Upsample needs scales")
        return (self._resize(x, sc, None, None),)


@registry.register("Upsample", since=1)
class Upsample1(Upsample):
    """Upsample v1 (experimental): 4-D NCHW with height_scale/width_scale attributes."""

    def __init__(self, info: KernelInfo) -> None:
        Kernel.__init__(self, info)
        self._cache = OrderedDict()
        mode = info.attr("mode", "nearest")
        self.mode = "linear" if mode == "bilinear" else mode
        if self.mode not in ("nearest", "linear"):
            raise _bad(info, f"mode must be 'nearest' or 'bilinear', got {mode!r}")
        h = info.attr("height_scale")
        w = info.attr("width_scale")
        if h is None or w is None:
            raise _bad(info, "attributes 'height_scale' and 'width_scale' are required")
        self.scales = np.asarray([1.0, 1.0, h, w], dtype=np.float32)
        self._check()

    def compute(self, x, scales=None):
        if np.ndim(x) != 4:
            raise ValueError(f"Upsample-1 takes a 4-D NCHW input, got rank {np.ndim(x)}")
        return super().compute(x)
