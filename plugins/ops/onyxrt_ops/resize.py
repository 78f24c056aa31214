"""Resize (every version) and the deprecated Upsample, written once over an array namespace.

Resizing is separable: every resized axis gets a 1-D table — the source index of each
output position and, for linear/cubic, the weight of each tap — planned on the host with
numpy from the shapes and the scales/sizes/roi (steering inputs, kept in host memory) and
cached per input shape; the plan's tables are moved into the backend's arrays once. They
are applied axis by axis with ``xp.take`` gathers and weighted sums (nearest: one gather
per axis), or, where it is cheaper, as one dense (out, in) ``matmul``. Any rank; every
mode (nearest/linear/cubic), coordinate_transformation_mode, nearest_mode, antialias,
exclude_outside, extrapolation_value, keep_aspect_ratio_policy and axes.

Integer inputs are interpolated in float32 (float64 for 32/64-bit ints) and truncated
toward zero like onnxruntime; float16/bfloat16 in float32, rounded once.

Known gaps: strings are declared away (the standard has no string dtype): nearest resizing
of string tensors is the CPU provider's (its override registers every type).
"""

from __future__ import annotations

import contextlib
import math
from collections import OrderedDict
from typing import Any

import numpy as np

from onyxrt.dtypes import ALL_TENSOR_TYPES
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt.limits import check_allocation, output_of
from onyxrt.records import record

from .library import OpKernel, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

#: Every element type but strings (the standard has no string dtype).
_NO_STRINGS = frozenset(np.dtype(t) for t in ALL_TENSOR_TYPES if np.dtype(t).kind not in "OSU")
_COORD_MODES = {
    "half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize",
}  # fmt: skip
_NEAREST_MODES = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"}
_CACHE_SIZE = 16
# When a linear/cubic axis is applied as one dense (out, in) matmul instead of taps-many
# gathers and multiply-adds: on the innermost axis (where gathers are element-wise and slow)
# up to _DENSE_LAST inputs, elsewhere with >= 4 taps up to _DENSE_PER_TAP inputs per tap.
_DENSE_LAST = 256
_DENSE_PER_TAP = 64
_DENSE_MAX = 1 << 20


@record(frozen=True)
class _AxisTable:
    """How one axis is resampled (host arrays): ``idx`` (out,) for nearest or (out, taps)
    with weights ``w``; ``outside`` marks tf_crop_and_resize's extrapolated positions;
    ``dense`` is the (out, in) matrix where one matmul beats the taps."""

    idx: np.ndarray
    w: np.ndarray | None
    outside: np.ndarray | None
    dense: np.ndarray | None = None


@record(frozen=True)
class _Steps:
    """A plan's tables as backend arrays, in application order: per axis ``(axis, dense,
    [(index, weight)...])`` (nearest: one index, no weight; ``dense``: the (out, in) matrix
    and its transpose, or None), and the extrapolation mask."""

    axes: tuple[tuple[int, Any, tuple[tuple[Any, Any], ...]], ...]
    outside: Any


@record(frozen=True)
class _Plan:
    out_shape: tuple[int, ...]
    axes: tuple[tuple[int, _AxisTable], ...]  # only axes that actually change
    steps: _Steps | None = None


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys cubic convolution kernel with coefficient ``a`` at distances ``d``."""
    t = np.abs(d)
    t2 = t * t
    t3 = t2 * t
    near = (a + 2.0) * t3 - (a + 3.0) * t2 + 1.0
    far = a * t3 - 5.0 * a * t2 + 8.0 * a * t - 4.0 * a
    return np.where(t <= 1.0, near, np.where(t < 2.0, far, 0.0))


def _is_identity(t: _AxisTable, n_in: int) -> bool:
    """Whether the table copies the axis unchanged (so it can be skipped)."""
    if t.idx.shape[0] != n_in or t.outside is not None:
        return False
    ident = np.arange(n_in)
    if t.w is None:
        return bool(np.array_equal(t.idx, ident))
    hit = (t.idx == ident[:, None]) & (t.w == 1.0)
    return bool(hit.any(axis=1).all() and (t.w[~hit] == 0.0).all())


def _axis_order(plan: _Plan, shape: tuple[int, ...]) -> list[tuple[int, _AxisTable]]:
    """Resized axes, shrinking ones first (smaller intermediates), inner axes first on ties."""
    return sorted(plan.axes, key=lambda at: (at[1].idx.shape[0] / max(shape[at[0]], 1), -at[0]))


class ResizeBase(OpKernel):
    """Shared machinery of Resize (all versions) and Upsample: subclasses set the mode
    attributes in ``__init__`` and call :meth:`check`, then :meth:`resize`."""

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

    def bad(self, msg: str) -> InvalidGraph:
        """An InvalidGraph error naming the node."""
        return InvalidGraph(f"node {self.info.node_name!r} ({self.info.op_type}): {msg}")

    def check(self) -> None:
        """Refuse unknown mode attributes (InvalidGraph)."""
        if self.mode not in ("nearest", "linear", "cubic"):
            raise self.bad(f"unsupported mode {self.mode!r}")
        if self.coord_mode not in _COORD_MODES:
            raise self.bad(f"unsupported coordinate_transformation_mode {self.coord_mode!r}")
        if self.nearest_mode not in _NEAREST_MODES:
            raise self.bad(f"unsupported nearest_mode {self.nearest_mode!r}")
        if self.keep_aspect not in ("stretch", "not_larger", "not_smaller"):
            raise self.bad(f"unsupported keep_aspect_ratio_policy {self.keep_aspect!r}")

    def opt(self, v: Any) -> np.ndarray | None:
        """An optional 1-D steering input on the host: ``None`` when absent or empty."""
        if v is None:
            return None
        a = self.host(v)
        return None if a.size == 0 else a

    # ------------------------------------------------------------------ planning

    def _plan(self, shape: tuple[int, ...], scales: np.ndarray | None, sizes: np.ndarray | None,
              roi: np.ndarray | None, dtype: np.dtype[Any], work: Any) -> _Plan:
        key = (shape, None if scales is None else scales.tobytes(),
               None if sizes is None else sizes.tobytes(),
               None if roi is None else (roi.dtype.str, roi.tobytes()), work)
        plan = self._cache.get(key)
        if plan is not None:
            # Runs of one session on several threads share this kernel: another thread may
            # have evicted the entry since the get, which costs only its place in the LRU.
            with contextlib.suppress(KeyError):
                self._cache.move_to_end(key)
            return plan
        plan = self._make_plan(shape, scales, sizes, roi, dtype)
        plan = _Plan(plan.out_shape, plan.axes, self._steps(plan, shape, work))
        self._cache[key] = plan
        if len(self._cache) > _CACHE_SIZE:
            with contextlib.suppress(KeyError):  # another thread emptied it meanwhile
                self._cache.popitem(last=False)
        return plan

    def _steps(self, plan: _Plan, shape: tuple[int, ...], work: Any) -> _Steps:
        """The plan's tables moved into the backend's arrays (weights in ``work``)."""
        xp = self.xp
        i64 = self.backend.dtype(np.int64)
        steps = []
        for a, t in _axis_order(plan, shape):
            shp = [1] * len(shape)
            shp[a] = t.idx.shape[0]
            if t.w is None:
                steps.append((a, None, ((xp.asarray(t.idx, dtype=i64), None),)))
                continue
            dense = None if t.dense is None else (xp.asarray(t.dense, dtype=work),
                                                  xp.asarray(np.ascontiguousarray(t.dense.T), dtype=work))
            taps = tuple((xp.asarray(np.ascontiguousarray(t.idx[:, k]), dtype=i64),
                          xp.asarray(t.w[:, k].reshape(shp), dtype=work)) for k in range(t.idx.shape[1]))
            steps.append((a, dense, taps))
        outside = None
        masks = [(a, t.outside) for a, t in plan.axes if t.outside is not None]
        if masks:
            full = np.zeros((1,) * len(shape), dtype=bool)
            for a, m in masks:
                shp = [1] * len(shape)
                shp[a] = m.size
                full = full | m.reshape(shp)
            outside = xp.asarray(full)
        return _Steps(tuple(steps), outside)

    def _make_plan(self, shape: tuple[int, ...], scales: np.ndarray | None,
                   sizes: np.ndarray | None, roi: np.ndarray | None, dtype: np.dtype[Any]) -> _Plan:
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
            t = self._axis_table(shape[a], out_shape[a], scale_of[a], starts[a], ends[a], a == rank - 1)
            if not _is_identity(t, shape[a]):
                tables.append((a, t))
        return _Plan(tuple(out_shape), tuple(tables))

    def _coords(self, n_in: int, n_out: int, scale: float, s: float, e: float) -> np.ndarray:
        """Source coordinate of every output position (float64, snapped to float32).

        ``scale`` is the float32 value given in ``scales``, or the exact ratio
        ``n_out / n_in`` for ``sizes``. Rounding the result to float32 absorbs the
        representation error of float32 scales, so ``3 / 0.6f`` is 5 (as in onnxruntime)
        while ``sizes`` keep exact ties (``2 * 7 / 4`` is 3.5); modes that do not divide by
        the scale are left in float64. As the spec (and onnx's reference) says,
        align_corners and tf_crop_and_resize use the unrounded resized length
        ``n_in * scale``; onnxruntime uses ``n_out``, they agree whenever ``n_in * scale``
        is whole (always with ``sizes``).
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

    def _axis_table(self, n_in: int, n_out: int, scale: float, s: float, e: float,
                    last: bool = False) -> _AxisTable:
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
            r = {"round_prefer_floor": lambda: np.ceil(x - 0.5),
                 "round_prefer_ceil": lambda: np.floor(x + 0.5),
                 "floor": lambda: np.floor(x), "ceil": lambda: np.ceil(x)}[nm]()
            return _AxisTable(np.clip(r, 0, n_in - 1).astype(np.int64), None, outside)
        support = 1 if self.mode == "linear" else 2
        stretch = min(scale, 1.0) if self.antialias else 1.0
        if stretch == 1.0:
            j = np.floor(x).astype(np.int64)[:, None] + np.arange(1 - support, support + 1)
        else:
            radius = support / stretch
            taps = int(np.ceil(2 * radius)) + 2
            j = np.floor(x - radius).astype(np.int64)[:, None] + np.arange(taps)
        d = (x[:, None] - j) * stretch
        w = np.maximum(0.0, 1.0 - np.abs(d)) if self.mode == "linear" else _cubic(d, self.cubic_a)
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

    def resize(self, x: Any, scales: np.ndarray | None, sizes: np.ndarray | None,
               roi: np.ndarray | None) -> Any:
        """``x`` resized (scales/sizes/roi on the host)."""
        xp = self.xp
        dt = self.backend.numpy_dtype(x.dtype)
        if self.mode == "nearest":
            work = None
        elif dt == np.float64 or dt.kind in "iu" and dt.itemsize >= 4:
            work = self.backend.dtype(np.float64)
        elif dt.kind in "iuf" or dt.name == "bfloat16":
            work = self.backend.dtype(np.float32)
        else:
            raise TypeError(f"linear/cubic resize does not support dtype {dt}")
        plan = self._plan(tuple(x.shape), scales, sizes, roi, dt, work)
        if not plan.axes:
            return x
        if any(d == 0 for d in plan.out_shape) or math.prod(x.shape) == 0:
            return xp.zeros(plan.out_shape, dtype=x.dtype)
        assert plan.steps is not None
        y = self._nearest(x, plan.steps) if work is None else self._interpolate(x, plan.steps, work, dt)
        if plan.steps.outside is not None:
            fill = self.extrapolation if dt.kind == "O" else xp.asarray(self.extrapolation, dtype=y.dtype)
            y = xp.where(plan.steps.outside, fill, y)
        return y

    def _nearest(self, x: Any, steps: _Steps) -> Any:
        # One take per resized axis: much faster than one broadcast fancy index over
        # several axes, since each take copies whole contiguous inner runs.
        for a, _, ((idx, _),) in steps.axes:
            x = self.xp.take(x, idx, axis=a)
        return x

    def _interpolate(self, x: Any, steps: _Steps, work: Any, dt: np.dtype[Any]) -> Any:
        xp = self.xp
        y = xp.astype(x, work) if x.dtype != work else x
        finite: bool | None = None
        for a, dense, taps in steps.axes:
            if dense is not None:
                if finite is None:  # 0 * inf would smear NaN over a whole matmul row
                    finite = bool(xp.all(xp.isfinite(y)))
                if finite:
                    y = self._matmul_axis(y, a, *dense)
                    continue
            acc = None
            for idx, w in taps:
                g = xp.take(y, idx, axis=a)
                g *= w
                if acc is None:
                    acc = g
                else:
                    acc += g
            y = acc
        if dt.kind in "iu":
            # Truncate toward zero like onnxruntime, after nudging away from zero by a few
            # ulps so that 127.99999 (rounding noise of an exact 128) stays 128.
            eps = 1e-5 if work == self.backend.dtype(np.float32) else 1e-12
            y = xp.trunc(y + xp.copysign(xp.maximum(xp.abs(y), 1.0) * eps, y))
            info = np.iinfo(dt)
            y = xp.clip(y, float(info.min), float(info.max))
        return y if y.dtype == x.dtype else xp.astype(y, x.dtype)

    def _matmul_axis(self, y: Any, a: int, dense: Any, dense_t: Any) -> Any:
        """Apply the (out, in) matrix ``dense`` (``dense_t`` its transpose) along axis ``a``."""
        xp = self.xp
        shape = tuple(y.shape)
        n_in = shape[a]
        lead, trail = math.prod(shape[:a]), math.prod(shape[a + 1 :])
        if trail == 1:
            out = xp.reshape(y, (lead, n_in)) @ dense_t
        else:
            out = xp.matmul(dense, xp.reshape(y, (lead, n_in, trail)))
        return xp.reshape(out, shape[:a] + (dense_t.shape[1],) + shape[a + 1 :])


@library.define("Resize", (11, 13, 18, 19), types={"T1": _NO_STRINGS}, host_inputs=(1, 2, 3))
class Resize(ResizeBase):
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
            raise self.bad(f"repeated values in axes {self.axes_attr}")
        self.keep_aspect = info.attr("keep_aspect_ratio_policy", "stretch") if v >= 18 else "stretch"
        if self.nearest_mode == "simple":
            raise self.bad("unsupported nearest_mode 'simple'")
        if self.coord_mode == "tf_half_pixel_for_nn" and v >= 13:
            raise self.bad("coordinate_transformation_mode tf_half_pixel_for_nn was removed")
        if self.coord_mode == "half_pixel_symmetric" and v < 19:
            raise self.bad("half_pixel_symmetric needs Resize version 19")
        self.check()

    def compute(self, x, roi=None, scales=None, sizes=None):
        return (self.resize(x, self.opt(scales), self.opt(sizes), self.opt(roi)),)


@library.define("Resize", 10, types={"T": _NO_STRINGS}, host_inputs=(1,))
class Resize10(ResizeBase):
    """Resize v10: scales input, nearest or linear, asymmetric coordinates."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.mode = info.attr("mode", "nearest")
        if self.mode not in ("nearest", "linear"):
            raise self.bad(f"mode must be 'nearest' or 'linear', got {self.mode!r}")
        self.check()

    def compute(self, x, scales):
        return (self.resize(x, self.host(scales), None, None),)


@library.define("Upsample", (7, 9, 10), types={"T": _NO_STRINGS}, host_inputs=(1,))
class Upsample(ResizeBase):
    """Deprecated Upsample: scales attribute (v7) or input (v9/v10); nearest or linear."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        mode = info.attr("mode", "nearest")
        self.mode = "linear" if mode == "bilinear" else mode
        if self.mode not in ("nearest", "linear"):
            raise self.bad(f"mode must be 'nearest' or 'linear', got {mode!r}")
        self.scales = None
        if info.since_version == 7:
            sc = info.attr("scales")
            if sc is None:
                raise self.bad("attribute 'scales' is required")
            if any(s < 1 for s in sc):
                raise self.bad(f"scales must be >= 1, got {sc}")
            self.scales = np.asarray(sc, dtype=np.float32)
        self.check()

    def compute(self, x, scales=None):
        if self.scales is None and scales is None:
            raise ValueError("Upsample needs scales")
        sc = self.scales if self.scales is not None else self.host(scales).astype(np.float32)
        return (self.resize(x, sc, None, None),)


@library.define("Upsample", 1, types={"T": _NO_STRINGS})
class Upsample1(ResizeBase):
    """Upsample v1 (experimental): 4-D NCHW with height_scale/width_scale attributes."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        mode = info.attr("mode", "nearest")
        self.mode = "linear" if mode == "bilinear" else mode
        if self.mode not in ("nearest", "linear"):
            raise self.bad(f"mode must be 'nearest' or 'bilinear', got {mode!r}")
        h, w = info.attr("height_scale"), info.attr("width_scale")
        if h is None or w is None:
            raise self.bad("attributes 'height_scale' and 'width_scale' are required")
        self.scales = np.asarray([1.0, 1.0, h, w], dtype=np.float32)
        self.check()

    def compute(self, x):
        if x.ndim != 4:
            raise ValueError(f"Upsample-1 takes a 4-D NCHW input, got rank {x.ndim}")
        return (self.resize(x, self.scales, None, None),)
