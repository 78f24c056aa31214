"""Convolutions and pools, written once over an array namespace.

Conv, ConvInteger, ConvTranspose, MaxPool (with its Indices output), AveragePool, LpPool
and the global pools, with every ONNX version of each. The window attributes and
geometry (``kernel_shape``, ``strides``, ``dilations``, ``pads``, ``auto_pad``,
``ceil_mode``) come from :mod:`onyxrt.spatial`, shared with every provider's own kernels.

The array API standard has neither strided views nor ``pad``, so a window is read tap by
tap: the input is padded by setting it into a ``full`` array, and each kernel tap of a
strided, dilated window is one strided basic slice of it (``x[..., i::s, j::s]``). Conv
stacks the taps into a column matrix and runs one (grouped, batched) ``matmul``;
ConvTranspose is its adjoint, one ``matmul`` to per-tap columns then a strided add of each
tap into the output; the pools fold the taps with ``maximum``/``+``. float16/bfloat16 compute in float32 and round once;
ConvInteger computes exactly in float64 (int8 products summed far below 2**53).

Attribute errors are :class:`~onyxrt.errors.InvalidGraph` naming the node, raised when the
kernel is built; errors in the data (ranks, channel counts, a window that does not fit)
are ``ValueError`` from ``compute``, which the executor reports naming the node.

Known gaps: the column matrix holds every tap of an image at once (taps times the
input's size); a provider with strided views and native GEMMs overrides Conv and the
windowed pools (the CPU and GPU providers do).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt.spatial import SpatialAttrs, Window, read_spatial_attrs, window

from .library import OpKernel, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []


def _tap_slices(
    kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int], out: Sequence[int]
) -> list[tuple[Any, ...]]:
    """For each kernel tap (row-major), the index of the padded input it reads."""
    return [
        (Ellipsis,) + tuple(slice(t * d, t * d + (o - 1) * s + 1, s)
                            for t, s, d, o in zip(tap, strides, dilations, out))
        for tap in itertools.product(*(range(k) for k in kernel))
    ]


def _pad(xp: Any, x: Any, begin: Sequence[int], end: Sequence[int], value: Any) -> Any:
    """``x`` padded with ``value`` on its last ``len(begin)`` axes (``x`` itself if no pad):
    one ``full`` array with ``x`` set into it."""
    if not any(begin) and not any(end):
        return x
    nsp = len(begin)
    inner = x.shape[x.ndim - nsp:]
    out = xp.full(x.shape[:x.ndim - nsp] + tuple(n + b + e for n, b, e in zip(inner, begin, end)),
                  value, dtype=x.dtype)
    out[(Ellipsis,) + tuple(slice(b, b + n) for b, n in zip(begin, inner))] = x
    return out


def _matrix_transpose(xp: Any, a: Any) -> Any:
    """``a`` with its last two axes swapped, by stacking slices: ``permute_dims`` and ``mT``
    are missing from some CuPy releases and from the simulated CuPy of the GPU tests."""
    if a.shape[-2] <= a.shape[-1]:
        return xp.stack([a[..., i, :] for i in range(a.shape[-2])], axis=-1)
    return xp.stack([a[..., j] for j in range(a.shape[-1])], axis=-2)


def _as_dtype(xp: Any, x: Any, dtype: Any) -> Any:
    """``x`` in ``dtype`` (``x`` itself when it has it: ``astype`` would copy)."""
    return x if x.dtype == dtype else xp.astype(x, dtype)


def _spatial_axes(x: Any) -> tuple[int, ...]:
    if x.ndim < 2:
        raise ValueError(f"X must have rank >= 2 (N, C, spatial...), got shape {x.shape}")
    return tuple(range(2, x.ndim))


def _channel_bias(xp: Any, y: Any, b: Any) -> Any:
    """``y`` (N, M, *spatial) plus ``b`` (M values) per output channel."""
    m = y.shape[1]
    if math.prod(b.shape) != m:
        raise ValueError(f"B has {math.prod(b.shape)} values; the convolution has {m} output channels")
    return y + xp.reshape(xp.astype(b, y.dtype), (m,) + (1,) * (y.ndim - 2))


class _Windowed(OpKernel):
    """Base of the convolutions and windowed pools: the parsed window attributes, and the
    geometry of the last input shapes (a node sees the same shapes run after run)."""

    def __init__(self, info: KernelInfo, *, need_kernel: bool = False) -> None:
        super().__init__(info)
        self.attrs: SpatialAttrs = read_spatial_attrs(info, need_kernel=need_kernel)
        self.ceil_mode = bool(info.attr("ceil_mode", 0))
        self._last_geometry: tuple[Any, ...] | None = None

    def _geometry(
        self, x: Any, w: Any = None
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], Window]:
        """(kernel, strides, dilations, window) for input ``x`` (and weight ``w``)."""
        key = (x.shape, None if w is None else w.shape)
        last = self._last_geometry
        if last is not None and last[0] == key:
            return last[1]
        if x.ndim < 3:
            raise ValueError(f"X must have rank >= 3 (N, C, spatial...), got shape {x.shape}")
        kernel = None if w is None else self._kernel_shape(x, w)
        k, s, d, pb, pe = self.attrs.resolve(x.ndim - 2, kernel)
        win = window(x.shape[2:], k, s, d, pb, pe, self.attrs.auto_pad, self.ceil_mode)
        self._last_geometry = (key, (k, s, d, win))
        return k, s, d, win

    def _kernel_shape(self, x: Any, w: Any) -> tuple[int, ...]:
        """W's spatial shape, checked against the ``kernel_shape`` attribute when given."""
        if w.ndim != x.ndim:
            raise ValueError(f"W has rank {w.ndim}, X has rank {x.ndim}; they must match")
        kernel = tuple(int(k) for k in w.shape[2:])
        if self.attrs.kernel_shape is not None and self.attrs.kernel_shape != kernel:
            raise ValueError(f"kernel_shape {list(self.attrs.kernel_shape)} does not match "
                             f"W's spatial shape {list(kernel)}")
        return kernel

    def _taps(self, x: Any, k: Any, s: Any, d: Any, win: Window, fill: Any) -> list[Any]:
        """Each tap's input (N, C, *out): a strided slice of ``x`` padded with ``fill``."""
        xpad = _pad(self.xp, x, win.pads_begin, win.total_end, fill)
        return [xpad[index] for index in _tap_slices(k, s, d, win.out_shape)]

    def _fold(self, taps: list[Any], add: bool = True) -> Any:
        """The sum (else the maximum) of ``taps``."""
        acc = taps[0]
        for tap in taps[1:]:
            acc = acc + tap if add else self.xp.maximum(acc, tap)
        return acc


# ---------------------------------------------------------------------- convolutions


class _Conv(_Windowed):
    """Base of the convolutions: ``group``, checked against W's first axis when W is a
    constant, and the convolution itself (:meth:`convolve`, which providers override)."""

    #: What W's first axis holds (``group`` divides it).
    w_channels = "output"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.group = int(info.attr("group", 1))
        if self.group < 1:
            raise InvalidGraph(f"node {info.node_name!r} ({info.op_type}): group={self.group} must be >= 1")
        w = info.constant(1)
        if isinstance(w, np.ndarray) and w.ndim >= 3 and w.shape[0] % self.group:
            raise InvalidGraph(f"node {info.node_name!r} ({info.op_type}): W has {w.shape[0]} "
                               f"{self.w_channels} channels, not divisible by group={self.group}")

    def convolve(self, x: Any, w: Any) -> Any:
        """conv(X, W) (N, M, *out) in X's dtype (X and W of one dtype): the taps stacked
        into a (N, group, C/group * taps, positions) column matrix, times W viewed as
        (group, M/group, C/group * taps)."""
        xp = self.xp
        k, s, d, win = self._geometry(x, w)
        n, c = x.shape[:2]
        m, g = w.shape[0], self.group
        if c % g:
            raise ValueError(f"X has {c} channels, not divisible by group={g}")
        if m % g:
            raise ValueError(f"W has {m} output channels, not divisible by group={g}")
        if w.shape[1] * g != c:
            raise ValueError(f"W expects {w.shape[1] * g} input channels (group={g}), X has {c}")
        out = win.out_shape
        ntaps = math.prod(k)
        cols = xp.stack(self._taps(x, k, s, d, win, 0), axis=2)  # (N, C, taps, *out)
        cols = xp.reshape(cols, (n, g, (c // g) * ntaps, math.prod(out)))
        y = xp.matmul(xp.reshape(w, (g, m // g, (c // g) * ntaps)), cols)
        return xp.reshape(y, (n, m) + out)


@library.define("Conv", (1, 11, 22))
class Conv(_Conv):
    """N-d convolution with groups, strides, dilations, pads/auto_pad and optional bias."""

    def compute(self, x, w, b=None):
        xw = self.widen(x)
        y = self.convolve(xw, _as_dtype(self.xp, self.widen(w), xw.dtype))
        if b is not None:
            y = _channel_bias(self.xp, y, b)
        return (self.narrow(y, x),)


@library.define("ConvInteger", 10)
class ConvInteger(_Conv):
    """Integer convolution of (x - x_zero_point) and (w - w_zero_point) into int32."""

    def compute(self, x, w, x_zero_point=None, w_zero_point=None):
        xp = self.xp
        f64 = self.backend.dtype(np.float64)
        xf = xp.astype(x, f64)
        if x_zero_point is not None:
            if math.prod(x_zero_point.shape) != 1:
                raise ValueError("x_zero_point must be a scalar (per-tensor)")
            xf = xf - xp.reshape(xp.astype(x_zero_point, f64), ())
        wf = xp.astype(w, f64)
        if w_zero_point is not None:
            size = math.prod(w_zero_point.shape)
            if size not in (1, w.shape[0]):
                raise ValueError(f"w_zero_point has {size} values; expected 1 or {w.shape[0]}")
            wf = wf - xp.reshape(xp.astype(w_zero_point, f64), (-1,) + (1,) * (w.ndim - 1))
        # Padding with x's zero point is padding with 0 once it is subtracted.
        y = self.convolve(xf, wf)
        return (xp.astype(xp.round(y), self.backend.dtype(np.int32)),)


@library.define("ConvTranspose", (1, 11, 22))
class ConvTranspose(_Conv):
    """Transposed N-d convolution (output_padding, output_shape, group, dilations, auto_pad).

    A constant W is packed once, when the kernel is built."""

    w_channels = "input"  # W is (C, M/group, *K)

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        op = info.attr("output_padding")
        self.output_padding = tuple(int(v) for v in op) if op is not None else None
        os_ = info.attr("output_shape")
        self.output_shape = tuple(int(v) for v in os_) if os_ is not None else None
        if self.output_padding is not None and any(v < 0 for v in self.output_padding):
            raise InvalidGraph(f"node {info.node_name!r} (ConvTranspose): output_padding "
                               f"{list(self.output_padding)} must be >= 0")
        self._last_plan: tuple[Any, ...] | None = None
        w = info.constant(1)
        self._packed = None
        if isinstance(w, np.ndarray) and w.ndim >= 3:
            self._packed = self.pack(self.xp.asarray(w))

    def pack(self, w: Any) -> Any:
        """W (C, M/g, *K) as (g, M/g * taps, C/g) in the compute dtype."""
        xp, g = self.xp, self.group
        wg = xp.reshape(self.widen(w), (g, w.shape[0] // g, -1))
        return _matrix_transpose(xp, wg)

    def out_geometry(
        self, in_shape: tuple[int, ...], kernel: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(strides, dilations, pads_begin, out_shape) for this input."""
        nsp = len(in_shape)
        k, s, d, pb, pe = self.attrs.resolve(nsp, kernel)
        opad = self.output_padding or (0,) * nsp
        if len(opad) != nsp:
            raise ValueError(f"output_padding has {len(opad)} values, expected {nsp}")
        full = tuple(st * (n - 1) + op + (kk - 1) * dd + 1
                     for n, kk, st, dd, op in zip(in_shape, k, s, d, opad))
        auto = self.attrs.auto_pad
        target: tuple[int, ...] | None = None
        if self.output_shape is not None:
            target = self.output_shape[-nsp:]
            if len(target) != nsp:
                raise ValueError(f"output_shape {list(self.output_shape)} has too few dims")
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            target = tuple(n * st for n, st in zip(in_shape, s))
        if target is not None:
            # SAME_UPPER puts the odd element of the total padding at the end.
            begin = tuple((f - t) // 2 if auto == "SAME_UPPER" else f - t - (f - t) // 2
                          for f, t in zip(full, target))
            return s, d, begin, tuple(target)
        if auto == "VALID":
            return s, d, (0,) * nsp, full
        out = tuple(f - b - e for f, b, e in zip(full, pb, pe))
        if any(o <= 0 for o in out):
            raise ValueError(f"ConvTranspose output shape {list(out)} is not positive")
        return s, d, tuple(pb), out

    def compute(self, x, w, b=None):
        xp = self.xp
        if x.ndim < 3 or w.ndim != x.ndim:
            raise ValueError(f"X {x.shape} and W {w.shape} must both have rank >= 3")
        n, c = x.shape[:2]
        g = self.group
        if w.shape[0] != c:
            raise ValueError(f"W has {w.shape[0]} input channels, X has {c}")
        if c % g:
            raise ValueError(f"X has {c} channels, not divisible by group={g}")
        size, dsts, crop = self._scatter_plan(x, w)
        xw = self.widen(x)
        wt = _as_dtype(xp, self._packed if self._packed is not None else self.pack(w), xw.dtype)
        m = w.shape[1] * g
        cols = xp.matmul(wt, xp.reshape(xw, (n, g, c // g, -1)))
        cols = xp.reshape(cols, (n, m, len(dsts)) + tuple(x.shape[2:]))
        buf = xp.zeros((n, m) + size, dtype=xw.dtype)
        for i, dst in enumerate(dsts):
            buf[dst] += cols[:, :, i, ...]
        y = buf[crop]
        if b is not None:
            y = _channel_bias(xp, y, b)
        return (self.narrow(y, x),)

    def _scatter_plan(self, x: Any, w: Any) -> tuple[tuple[int, ...], list[Any], Any]:
        """(buffer shape, each tap's index in it, the output's index in it) for these
        input shapes (cached for the last ones). The buffer covers both the full result
        and the requested output window (pads may be negative when output_shape asks for
        more)."""
        key = (x.shape, w.shape)
        if self._last_plan is None or self._last_plan[0] != key:
            kernel = self._kernel_shape(x, w)
            in_sp = tuple(int(v) for v in x.shape[2:])
            s, d, pb, out = self.out_geometry(in_sp, kernel)
            lo = tuple(min(0, p) for p in pb)
            span = tuple((ni - 1) * st + (kk - 1) * dd + 1 for ni, st, kk, dd in zip(in_sp, s, kernel, d))
            hi = tuple(max(sp, p + o) for sp, p, o in zip(span, pb, out))
            dsts = [(Ellipsis,) + tuple(slice(sl.start - low, sl.stop - low, sl.step)
                                        for sl, low in zip(index[1:], lo))
                    for index in _tap_slices(kernel, s, d, in_sp)]
            crop = (Ellipsis,) + tuple(slice(p - low, p - low + o) for p, low, o in zip(pb, lo, out))
            self._last_plan = (key, (tuple(h - low for h, low in zip(hi, lo)), dsts, crop))
        return self._last_plan[1]


# ---------------------------------------------------------------------------- pools


class _Pool(_Windowed):
    """Base of the windowed pools (``kernel_shape`` required)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info, need_kernel=True)

    def window_sums(self, x: Any) -> tuple[Any, tuple[int, ...], Window]:
        """The sum of each window of ``x`` (zero padding), the kernel and the window."""
        k, s, d, win = self._geometry(x)
        return self._fold(self._taps(x, k, s, d, win, 0)), k, win


@library.define("MaxPool", (1, 8, 10, 11, 12, 22))
class MaxPool(_Pool):
    """Max over each window; optional int64 Indices of the maxima (storage_order aware):
    the flat index in the unpadded input, row-major, or column-major over the spatial axes
    with storage_order=1; the first tap holding the maximum wins."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.storage_order = int(info.attr("storage_order", 0))
        if self.storage_order not in (0, 1):
            raise InvalidGraph(f"node {info.node_name!r} (MaxPool): storage_order="
                               f"{self.storage_order} must be 0 or 1")
        self.want_indices = len(info.output_names) > 1 and info.output_names[1] != ""

    def compute(self, x):
        xp = self.xp
        k, s, d, win = self._geometry(x)
        dt = self.backend.numpy_dtype(x.dtype)
        lowest = int(np.iinfo(dt).min) if dt.kind in "iu" else -math.inf
        taps = self._taps(x, k, s, d, win, lowest)
        if not self.want_indices:
            return (self._fold(taps, add=False),)
        # The input offset of the best tap from its window's origin, then the origins.
        i64 = self.backend.dtype(np.int64)
        in_sp = x.shape[2:]
        nsp = len(in_sp)
        steps = [math.prod(in_sp[i + 1:] if self.storage_order == 0 else in_sp[:i]) for i in range(nsp)]
        offsets = [sum(t * dd * st for t, dd, st in zip(tap, d, steps))
                   for tap in itertools.product(*(range(kk) for kk in k))]
        best = taps[0]
        offset = xp.zeros(best.shape, dtype=i64)
        for tap, off in zip(taps[1:], offsets[1:]):
            offset = xp.where(tap > best, xp.asarray(off, dtype=i64), offset)
            best = xp.maximum(best, tap)
        n, c = x.shape[:2]
        plane = xp.reshape(xp.arange(n * c, dtype=i64) * math.prod(in_sp), (n, c) + (1,) * nsp)
        offset = offset + plane
        for ax in range(nsp):
            start = xp.arange(win.out_shape[ax], dtype=i64) * s[ax] - win.pads_begin[ax]
            shape = [1] * (nsp + 2)
            shape[ax + 2] = win.out_shape[ax]
            offset = offset + xp.reshape(start * steps[ax], tuple(shape))
        return (best, offset)


@library.define("AveragePool", (1, 7, 10, 11, 19, 22))
class AveragePool(_Pool):
    """Mean over each window; count_include_pad chooses whether the declared pads count
    (the ceil_mode overhang never does)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.count_include_pad = bool(info.attr("count_include_pad", 0))
        self._counts: tuple[Any, Any] | None = None

    def compute(self, x):
        xw = self.widen(x)
        acc, k, win = self.window_sums(xw)
        if not win.padded or (self.count_include_pad and not any(win.extra_end)):
            return (self.narrow(acc / math.prod(k), x),)
        return (self.narrow(acc / self._count(xw), x),)

    def _count(self, x: Any) -> Any:
        """How many taps of each window count (per input shape and dtype, cached): the
        window sums of ones over the input (with count_include_pad, the declared pads)."""
        key = (x.shape, x.dtype)
        if self._counts is None or self._counts[0] != key:
            xp = self.xp
            k, s, d, win = self._geometry(x)
            in_sp = tuple(x.shape[2:])
            if self.count_include_pad:
                region = tuple(n + b + e for n, b, e in zip(in_sp, win.pads_begin, win.pads_end))
                ones = _pad(xp, xp.ones((1, 1) + region, dtype=x.dtype), (0,) * len(k), win.extra_end, 0)
            else:
                ones = _pad(xp, xp.ones((1, 1) + in_sp, dtype=x.dtype), win.pads_begin, win.total_end, 0)
            self._counts = (key, self._fold([ones[i] for i in _tap_slices(k, s, d, win.out_shape)]))
        return self._counts[1]


class _Lp(OpKernel):
    """Base of the Lp pools: the attribute ``p``, and the norm's steps chosen once for it
    (:attr:`abs_pow`: |x|**p, :attr:`root`: the p-th root; exact multiplies for p = 1, 2)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        p = info.attr("p", 2)
        if p is None or float(p) <= 0:
            raise InvalidGraph(f"node {info.node_name!r} ({info.op_type}): p={p} must be positive")
        xp, self.p = self.xp, float(p)
        if self.p == 1.0:
            self.abs_pow, self.root = xp.abs, _identity
        elif self.p == 2.0:
            self.abs_pow, self.root = _square, xp.sqrt
        else:
            self.abs_pow = lambda x: xp.abs(x) ** self.p
            self.root = lambda v: v ** (1.0 / self.p)


def _identity(x: Any) -> Any:
    return x


def _square(x: Any) -> Any:
    return x * x


@library.define("LpPool", (1, 2, 11, 18, 22))
class LpPool(_Pool, _Lp):
    """(sum over each window of |x|**p) ** (1/p); pads are zeros."""

    def compute(self, x):
        acc, _, _ = self.window_sums(self.abs_pow(self.widen(x)))
        return (self.narrow(self.root(acc), x),)


@library.define("GlobalMaxPool", (1, 22))
class GlobalMaxPool(OpKernel):
    """Max over all spatial axes, kept as size-1 dims."""

    def compute(self, x):
        # A rank-2 X reduces over no axis: a copy of X.
        return (self.xp.max(x, axis=_spatial_axes(x), keepdims=True),)


@library.define("GlobalAveragePool", (1, 22))
class GlobalAveragePool(OpKernel):
    """Mean over all spatial axes, kept as size-1 dims."""

    def compute(self, x):
        return (self.narrow(self.xp.mean(self.widen(x), axis=_spatial_axes(x), keepdims=True), x),)


@library.define("GlobalLpPool", (1, 2, 22))
class GlobalLpPool(_Lp):
    """(sum over all spatial axes of |x|**p) ** (1/p), kept as size-1 dims."""

    def compute(self, x):
        v = self.xp.sum(self.abs_pow(self.widen(x)), axis=_spatial_axes(x), keepdims=True)
        return (self.narrow(self.root(v), x),)
