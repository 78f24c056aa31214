"""GPU kernels: Conv and ConvTranspose.

Conv is im2col + one batched GEMM per group: the padded input's windows are a strided
view (``cupy.lib.stride_tricks.as_strided``, no copy), laid out once as a
``(N, group, C/group * taps, L)`` column matrix and multiplied by the weight viewed as
``(group, M/group, C/group * taps)``. A 1x1 convolution without padding is a plain
(batched) GEMM on the input itself; a depthwise convolution (one input channel per
group) accumulates its taps with multiply-adds instead of building columns. Column
matrices larger than a budget are built a few images at a time.

ConvTranspose is the adjoint: one GEMM from the input to per-tap columns, then a strided
add of each tap into the output (col2im). Its weight is repacked once at creation when
it is a constant. float16 ConvTranspose accumulates in float32.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo

from . import registry
from ._common import FLOATS, GpuKernel, bad, widen
from ._spatial import SpatialAttrs, Window, pad_spatial, prod, read_spatial_attrs, window, windows

__all__ = ["Conv", "ConvTranspose"]

#: Largest column matrix (bytes) built in one piece; bigger batches go image by image.
COLUMN_BUDGET = 256 << 20


def _group(info: KernelInfo) -> int:
    group = int(info.attr("group", 1))
    if group < 1:
        raise bad(info, f"group={group} must be >= 1")
    return group


def _kernel_shape(attrs: SpatialAttrs, w: Any) -> tuple[int, ...]:
    """W's spatial shape, checked against the ``kernel_shape`` attribute when given."""
    kernel = tuple(int(k) for k in w.shape[2:])
    if attrs.kernel_shape is not None and attrs.kernel_shape != kernel:
        raise ValueError(
            f"kernel_shape {list(attrs.kernel_shape)} does not match W's spatial "
            f"shape {list(kernel)}"
        )
    return kernel


@registry.register("Conv", since=(1, 11, 22), types={"T": FLOATS})
class Conv(GpuKernel):
    """N-d convolution with groups, strides, dilations, pads/auto_pad and optional bias."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.group = _group(info)
        self.attrs = read_spatial_attrs(info)
        w = info.constant(1)
        if isinstance(w, np.ndarray) and w.ndim >= 1 and w.shape[0] % self.group:
            raise bad(info, f"W has {w.shape[0]} output channels, not divisible by "
                            f"group={self.group}")

    def _geometry(self, x: Any, w: Any) -> tuple[Any, Any, Any, Window]:
        if x.ndim < 3:
            raise ValueError(f"X must have rank >= 3 (N, C, spatial...), got shape {x.shape}")
        if w.ndim != x.ndim:
            raise ValueError(f"W has rank {w.ndim}, X has rank {x.ndim}; they must match")
        kernel = _kernel_shape(self.attrs, w)
        k, s, d, pb, pe = self.attrs.resolve(x.ndim - 2, kernel)
        return k, s, d, window(x.shape[2:], k, s, d, pb, pe, self.attrs.auto_pad)

    def compute(self, x, w, b=None):
        cp = self.cp
        k, s, d, win = self._geometry(x, w)
        n, c = x.shape[:2]
        m = w.shape[0]
        g = self.group
        if c % g or m % g:
            raise ValueError(f"X has {c} channels and W {m} outputs: not divisible by group={g}")
        cg = c // g
        if w.shape[1] != cg:
            raise ValueError(f"W expects {w.shape[1] * g} input channels (group={g}), X has {c}")
        nsp = x.ndim - 2
        out = win.out_shape
        ntaps = prod(k)
        wr = w.reshape(g, m // g, cg * ntaps)
        if ntaps == 1 and not win.padded:
            # 1x1: a GEMM on the (strided) input itself.
            xs = x
            if any(st != 1 for st in s):
                xs = x[(slice(None), slice(None)) + tuple(slice(None, None, st) for st in s)]
            y = cp.matmul(wr, xs.reshape(n, g, cg, prod(out)))
        elif cg == 1 and g > 1:
            y = self._depthwise(x, w, k, s, d, win)
        else:
            y = self._im2col(x, wr, k, s, d, win)
        y = y.reshape((n, m) + out)
        if b is not None:
            y += b.reshape((-1,) + (1,) * nsp).astype(y.dtype, copy=False)
        return (y,)

    def _im2col(self, x: Any, wr: Any, k: Any, s: Any, d: Any, win: Window) -> Any:
        cp = self.cp
        n, c = x.shape[:2]
        g, _, kg = wr.shape
        nsp = len(k)
        out = win.out_shape
        L = prod(out)
        xp = pad_spatial(cp, x, win.pads_begin, win.total_end, 0)
        view = windows(cp, xp, k, s, d, out)  # (N, C, *out, *K)
        # Columns ordered (C, *K) x (*out), matching W's (C/g, *K) flattening.
        perm = (0, 1) + tuple(range(2 + nsp, 2 + 2 * nsp)) + tuple(range(2, 2 + nsp))
        per_image = c * prod(k) * L * x.dtype.itemsize
        nb = max(1, COLUMN_BUDGET // max(per_image, 1))
        if nb >= n:
            cols = view.transpose(perm).reshape(n, g, kg, L)
            return cp.matmul(wr, cols)
        y = cp.empty((n, g, wr.shape[1], L), dtype=x.dtype)
        for n0 in range(0, n, nb):
            part = view[n0 : n0 + nb]
            cols = part.transpose(perm).reshape(part.shape[0], g, kg, L)
            y[n0 : n0 + nb] = cp.matmul(wr, cols)
        return y

    def _depthwise(self, x: Any, w: Any, k: Any, s: Any, d: Any, win: Window) -> Any:
        """One input channel per group: multiply-add the taps (no column matrix)."""
        cp = self.cp
        n, g = x.shape[:2]
        nsp = len(k)
        mpg = w.shape[0] // g
        xp = pad_spatial(cp, x, win.pads_begin, win.total_end, 0)
        view = windows(cp, xp, k, s, d, win.out_shape)  # (N, G, *out, *K)
        wd = w.reshape(g, mpg, prod(k))
        lead = (slice(None), slice(None), None) + (slice(None),) * nsp
        acc = None
        for i, tap in enumerate(itertools.product(*(range(kk) for kk in k))):
            src = view[lead + tap]  # (N, G, 1, *out)
            wt = wd[:, :, i].reshape((g, mpg) + (1,) * nsp)
            if acc is None:
                acc = src * wt
            else:
                acc += src * wt
        return acc


def _pack_transpose_weight(w: Any, group: int) -> Any:
    """(C, M/g, *K) → (g, M/g * taps, C/g) (a transposed view; host or device)."""
    c = w.shape[0]
    return w.reshape(group, c // group, -1).transpose(0, 2, 1)


@registry.register("ConvTranspose", since=(1, 11, 22), types={"T": FLOATS})
class ConvTranspose(GpuKernel):
    """Transposed N-d convolution (output_padding, output_shape, group, dilations, auto_pad)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.group = _group(info)
        self.attrs = read_spatial_attrs(info)
        op = info.attr("output_padding")
        self.output_padding = tuple(int(v) for v in op) if op is not None else None
        os_ = info.attr("output_shape")
        self.output_shape = tuple(int(v) for v in os_) if os_ is not None else None
        if self.output_padding is not None and any(v < 0 for v in self.output_padding):
            raise bad(info, f"output_padding {list(self.output_padding)} must be >= 0")
        w = info.constant(1)
        self.packed = None
        if isinstance(w, np.ndarray) and w.ndim >= 3:
            if w.shape[0] % self.group:
                raise bad(info, f"W has {w.shape[0]} input channels, not divisible by "
                                f"group={self.group}")
            wc = w.astype(np.float32) if w.dtype == np.float16 else w
            self.packed = self.upload(np.ascontiguousarray(_pack_transpose_weight(wc, self.group)))

    def _out_geometry(
        self, in_shape: tuple[int, ...], kernel: tuple[int, ...]
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(strides, dilations, pads_begin, out_shape) for this input."""
        nsp = len(in_shape)
        k, s, d, pb, pe = self.attrs.resolve(nsp, kernel)
        opad = self.output_padding or (0,) * nsp
        if len(opad) != nsp:
            raise ValueError(f"output_padding has {len(opad)} values, expected {nsp}")
        full = tuple(
            st * (n - 1) + op + (kk - 1) * dd + 1
            for n, kk, st, dd, op in zip(in_shape, k, s, d, opad)
        )
        auto = self.attrs.auto_pad
        target: tuple[int, ...] | None = None
        if self.output_shape is not None:
            target = self.output_shape[-nsp:]
            if len(target) != nsp:
                raise ValueError(f"output_shape {list(self.output_shape)} has too few dims")
        elif auto in ("SAME_UPPER", "SAME_LOWER"):
            target = tuple(n * st for n, st in zip(in_shape, s))
        if target is not None:
            begin = []
            for f, t in zip(full, target):
                total = f - t
                half = total // 2
                begin.append(half if auto == "SAME_UPPER" else total - half)
            return s, d, tuple(begin), tuple(target)
        if auto == "VALID":
            return s, d, (0,) * nsp, full
        out = tuple(f - b - e for f, b, e in zip(full, pb, pe))
        if any(o <= 0 for o in out):
            raise ValueError(f"ConvTranspose output shape {list(out)} is not positive")
        return s, d, tuple(pb), out

    def compute(self, x, w, b=None):
        cp = self.cp
        if x.ndim < 3 or w.ndim != x.ndim:
            raise ValueError(f"X {x.shape} and W {w.shape} must both have rank >= 3")
        n, c = x.shape[:2]
        nsp = x.ndim - 2
        kernel = _kernel_shape(self.attrs, w)
        if w.shape[0] != c:
            raise ValueError(f"W has {w.shape[0]} input channels, X has {c}")
        g = self.group
        if c % g:
            raise ValueError(f"X has {c} channels, not divisible by group={g}")
        xc = widen(x)
        wt = self.packed if self.packed is not None else _pack_transpose_weight(widen(w), g)
        in_sp = tuple(int(v) for v in x.shape[2:])
        s, d, pb, out = self._out_geometry(in_sp, kernel)
        m = w.shape[1] * g
        cols = cp.matmul(wt, xc.reshape(n, g, c // g, prod(in_sp)))
        cols = cols.reshape((n, m, prod(kernel)) + in_sp)
        # Add each tap into a buffer covering both the full result and the requested
        # output window (pads may be negative when output_shape asks for more).
        lo = tuple(min(0, p) for p in pb)
        span = tuple((ni - 1) * st + (kk - 1) * dd + 1
                     for ni, st, kk, dd in zip(in_sp, s, kernel, d))
        hi = tuple(max(sp, p + o) for sp, p, o in zip(span, pb, out))
        buf = cp.zeros((n, m) + tuple(h - lw for h, lw in zip(hi, lo)), dtype=xc.dtype)
        lead = (slice(None), slice(None))
        for i, tap in enumerate(itertools.product(*(range(kk) for kk in kernel))):
            dst = tuple(
                slice(t * dd - lw, t * dd - lw + (ni - 1) * st + 1, st)
                for t, dd, lw, ni, st in zip(tap, d, lo, in_sp, s)
            )
            target = buf[lead + dst]
            target += cols[:, :, i]
        crop = tuple(slice(p - lw, p - lw + o) for p, lw, o in zip(pb, lo, out))
        y = buf[lead + crop]
        if b is not None:
            y = y + widen(b).reshape((-1,) + (1,) * nsp)
        return (cp.ascontiguousarray(y).astype(x.dtype, copy=False),)
