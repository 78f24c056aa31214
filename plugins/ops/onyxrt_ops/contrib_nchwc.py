"""onnxruntime's blocked-layout operators (domain ``com.microsoft.nchwc``, version 1).

onnxruntime's highest optimization level rewrites CNNs into its NCHWc layout and a saved
optimized model keeps them: ReorderInput, Conv, MaxPool, AveragePool, GlobalMaxPool,
GlobalAveragePool, Upsample, ReorderOutput (float32 only, as onnxruntime registers them).

The layout: a blocked tensor has the shape (N, Cp, H, W) of an NCHW tensor whose channels
are zero-padded up to Cp, a multiple of the block size B, but its elements (row-major) are
those of (N, Cp/B, H, W, B) — the B channels of a pixel side by side. Here a blocked
tensor is a reshape/permute of its logical NCHW form (:func:`unblock`, :func:`block`), and
every operator computes on the logical form with the library's own kernels (Conv through
com.microsoft FusedConv for the fused activation and Sum, the pools of
:mod:`onyxrt_ops.spatial`), so the numbers are those of the standard operators.

Conv's weights are pre-reordered initializers in the file: (Op, Ip, KH, KW) in OIHWBiBo
order ((Op/B, Ip/B, KH, KW, Bi, Bo)) for a blocked input, OIHWBo ((Op/B, I, KH, KW, B))
for a plain NCHW input with fewer than B channels (a first layer) and for depthwise
filters (Ip = 1, ``group`` = Op, padded too). Padded output channels hold act(0) (0.5 for
Sigmoid, as in onnxruntime) and are multiplied by zero filters downstream.

The block size: MLAS's, 8 with AVX2 and 16 with AVX-512, of the machine that saved the
file — the file does not record it. Each node derives it from its own tensors where they
decide it (:meth:`_Blocked.block_size`: Op, Cp, the ``channels`` attribute must be
multiples of / close to B; a plain Conv input has fewer than B channels); where both 8 and
16 fit, it takes the block size onnxruntime itself would use on this machine (16 where the
CPU has AVX-512F, else 8; the environment variable ``ONYXRT_NCHWC_BLOCK`` overrides it for
files saved on another kind of machine). ReorderInput has nothing to derive it from.

Known gaps: Conv is 2-D only (as onnxruntime's); nothing else.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .contrib_misc import FusedConv
from .library import OpKernel, library
from .spatial import AveragePool as _AveragePool
from .spatial import MaxPool as _MaxPool

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

NCHWC = "com.microsoft.nchwc"
F32 = {"T": (np.float32,)}
UNARY = (("T",), ("T",))
BLOCK_SIZES = (8, 16)  # MLAS's NCHWc block sizes (AVX2, AVX-512)


@cache
def _cpu_block_size() -> int:
    try:
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:  # numpy < 2
        from numpy.core._multiarray_umath import __cpu_features__ as features
    return 16 if features.get("AVX512F") else 8


def host_block_size() -> int:
    """The block size onnxruntime would use here (``ONYXRT_NCHWC_BLOCK`` overrides it)."""
    env = os.environ.get("ONYXRT_NCHWC_BLOCK", "")
    return int(env) if env in ("8", "16") else _cpu_block_size()


def unblock(xp: Any, x: Any, b: int) -> Any:
    """Blocked (N, Cp, *spatial) → its logical NCHW form (N, Cp, *spatial)."""
    n, cp, *sp = x.shape
    r = len(sp)
    y = xp.reshape(x, (n, cp // b, *sp, b))
    y = xp.permute_dims(y, (0, 1, r + 2, *range(2, r + 2)))
    return xp.reshape(y, (n, cp, *sp))


def block(xp: Any, x: Any, b: int) -> Any:
    """Logical NCHW (N, Cp, *spatial), Cp a multiple of ``b`` → blocked."""
    n, cp, *sp = x.shape
    r = len(sp)
    y = xp.reshape(x, (n, cp // b, b, *sp))
    y = xp.permute_dims(y, (0, 1, *range(3, r + 3), 2))
    return xp.reshape(y, (n, cp, *sp))


def _pad_channels(xp: Any, x: Any, cp: int) -> Any:
    """``x`` (N, C, ...) with zero channels appended up to ``cp``."""
    if x.shape[1] == cp:
        return x
    zeros = xp.zeros((x.shape[0], cp - x.shape[1], *x.shape[2:]), dtype=x.dtype)
    return xp.concat([x, zeros], axis=1)


class _Blocked(OpKernel):
    """Mixin of the blocked operators: the block size a node's tensors allow."""

    def block_size(self, fits: Callable[[int], bool], what: str) -> int:
        """The block size for this call: this machine's where it ``fits``, else the only
        one of 8 and 16 that fits (a file saved on another kind of machine)."""
        host = host_block_size()
        if fits(host):
            return host
        fitting = [b for b in BLOCK_SIZES if fits(b)]
        if len(fitting) != 1:
            raise ValueError(f"{what}: fits no NCHWc block size (8 or 16)")
        return fitting[0]

    def check_blocked(self, x: Any, rank: int = 4) -> int:
        """The block size of the blocked input ``x`` (channels a multiple of it)."""
        if x.ndim != rank:
            raise ValueError(f"X must be a blocked rank-{rank} tensor, got shape {x.shape}")
        return self.block_size(lambda b: x.shape[1] % b == 0, f"X with {x.shape[1]} channels")


@library.define("ReorderInput", 1, domain=NCHWC, signature=UNARY, types=F32)
class ReorderInput(_Blocked):
    """NCHW (NHWC with ``channels_last``) → blocked, the channels zero-padded to a multiple
    of this machine's block size (the only source of it a ReorderInput has)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.channels_last = bool(info.attr("channels_last", 0))

    def compute(self, x):
        xp = self.xp
        if x.ndim != 4:
            raise ValueError(f"X must have rank 4, got shape {x.shape}")
        if self.channels_last:
            x = xp.permute_dims(x, (0, 3, 1, 2))
        b = host_block_size()
        return (block(xp, _pad_channels(xp, x, -(-x.shape[1] // b) * b), b),)


@library.define("ReorderOutput", 1, domain=NCHWC, signature=UNARY, types=F32)
class ReorderOutput(_Blocked):
    """Blocked → NCHW (NHWC with ``channels_last``) with ``channels`` channels."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.channels = int(info.attr("channels", 0))
        self.channels_last = bool(info.attr("channels_last", 0))
        if self.channels < 1:
            raise InvalidGraph(f"{self.where()}: channels={self.channels} must be >= 1")

    def compute(self, x):
        xp, c = self.xp, self.channels
        if x.ndim != 4:
            raise ValueError(f"X must be a blocked rank-4 tensor, got shape {x.shape}")
        cp = x.shape[1]
        b = self.block_size(lambda b: cp % b == 0 and 0 <= cp - c < b,
                            f"X with {cp} channels for channels={c}")
        y = unblock(xp, x, b)[:, :c, ...]
        return (xp.permute_dims(y, (0, 2, 3, 1)) if self.channels_last else y,)


@library.define("Conv", 1, domain=NCHWC, signature=(("T", "T", "T", "T"), ("T",)), types=F32)
class Conv(_Blocked, FusedConv):
    """act(Conv(X, W) + B + Sum) on blocked tensors (2-D): Conv's attributes plus
    FusedConv's ``activation``/``activation_params``; W pre-reordered (module docstring);
    X blocked, or plain NCHW with fewer channels than the block size; Sum blocked."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self._decoded: tuple[Any, int, Any] | None = None  # (W, block size, logical W)

    def compute(self, x, w, b=None, z=None):
        xp, g = self.xp, self.group
        if x.ndim != 4 or w.ndim != 4:
            raise ValueError(f"X {x.shape} and W {w.shape} must have rank 4")
        op, ip, cx = w.shape[0], w.shape[1], x.shape[1]
        depthwise = g > 1 and ip == 1 and g == op

        def fits(bs: int) -> bool:
            blocked = cx % bs == 0 and (depthwise or cx == ip * g)
            return op % bs == 0 and (blocked or (g == 1 and cx == ip < bs))

        bs = self.block_size(fits, f"W {tuple(w.shape)}, X with {cx} channels, group={g}")
        plain = g == 1 and cx < bs
        wl = self._logical_filters(w, bs, plain or depthwise)
        xl = x if plain else unblock(xp, x, bs)
        y = FusedConv.compute(self, xl, wl, b, None if z is None else unblock(xp, z, bs))[0]
        return (block(xp, y, bs),)

    def _logical_filters(self, w: Any, bs: int, bo_only: bool) -> Any:
        """W in OIHW order (decoded once per W and block size)."""
        last = self._decoded
        if last is not None and last[0] is w and last[1] == bs:
            return last[2]
        xp = self.xp
        op, ip, kh, kw = w.shape
        if bo_only:  # OIHWBo: (Op/B, I, KH, KW, Bo)
            wl = xp.permute_dims(xp.reshape(w, (op // bs, ip, kh, kw, bs)), (0, 4, 1, 2, 3))
        else:  # OIHWBiBo: (Op/B, Ip/B, KH, KW, Bi, Bo)
            wl = xp.permute_dims(xp.reshape(w, (op // bs, ip // bs, kh, kw, bs, bs)), (0, 5, 1, 4, 2, 3))
        wl = xp.reshape(wl, (op, ip, kh, kw))
        self._decoded = (w, bs, wl)
        return wl


class _Pool(_Blocked):
    """A pool of :mod:`onyxrt_ops.spatial` on the logical form of a blocked input."""

    def compute(self, x):
        bs = self.check_blocked(x)
        (y,) = super().compute(unblock(self.xp, x, bs))
        return (block(self.xp, y, bs),)


@library.define("MaxPool", 1, domain=NCHWC, signature=UNARY, types=F32)
class MaxPool(_Pool, _MaxPool):
    """MaxPool (one output) on a blocked tensor."""


@library.define("AveragePool", 1, domain=NCHWC, signature=UNARY, types=F32)
class AveragePool(_Pool, _AveragePool):
    """AveragePool (count_include_pad, ceil_mode) on a blocked tensor."""


class _GlobalPool(_Blocked):
    """A reduction over H and W of a blocked tensor: over the pixels of each block."""

    def reduce(self, x: Any, axis: int) -> Any:
        raise NotImplementedError

    def compute(self, x):
        bs = self.check_blocked(x)
        n, cp, h, w = x.shape
        y = self.reduce(self.xp.reshape(x, (n, cp // bs, h * w, bs)), 2)
        return (self.xp.reshape(y, (n, cp, 1, 1)),)


@library.define("GlobalMaxPool", 1, domain=NCHWC, signature=UNARY, types=F32)
class GlobalMaxPool(_GlobalPool):
    """Max over H and W of a blocked tensor, (N, Cp, 1, 1)."""

    def reduce(self, x, axis):
        return self.xp.max(x, axis=axis)


@library.define("GlobalAveragePool", 1, domain=NCHWC, signature=UNARY, types=F32)
class GlobalAveragePool(_GlobalPool):
    """Mean over H and W of a blocked tensor, (N, Cp, 1, 1)."""

    def reduce(self, x, axis):
        return self.xp.mean(x, axis=axis)


@library.define("Upsample", 1, domain=NCHWC, signature=UNARY, types=F32)
class Upsample(_Blocked):
    """Integer upsampling of H and W (``scales`` = [1, 1, sh, sw]) of a blocked tensor:
    ``mode`` nearest (an output pixel copies input pixel o // s) or linear, bilinear at
    positions by ``coordinate_transformation_mode`` (asymmetric o / s, align_corners,
    half_pixel clamped at 0), neighbours clamped to the last row/column."""

    MODES = ("asymmetric", "align_corners", "half_pixel")

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.scales = [int(v) for v in info.attr("scales", []) or []]
        if len(self.scales) != 4 or any(s < 1 for s in self.scales) or self.scales[:2] != [1, 1]:
            raise InvalidGraph(f"{self.where()}: scales {self.scales} must be 4 integers [1, 1, sh, sw] >= 1")
        mode = info.attr("mode", "nearest") or "nearest"
        if mode not in ("nearest", "linear"):
            raise InvalidGraph(f"{self.where()}: mode {mode!r} must be 'nearest' or 'linear'")
        self.nearest = mode == "nearest"
        self.transform = info.attr("coordinate_transformation_mode", "asymmetric") or "asymmetric"
        if self.transform not in self.MODES:
            raise InvalidGraph(f"{self.where()}: coordinate_transformation_mode {self.transform!r} "
                               f"must be one of {list(self.MODES)}")

    def positions(self, n_in: int, n_out: int, s: int) -> np.ndarray:
        """Each output row's source coordinate (float32, as onnxruntime computes it)."""
        o = np.arange(n_out, dtype=np.float32)
        if s == 1:
            return o
        if self.transform == "align_corners":
            return o * np.float32(n_in - 1) / np.float32(n_out - 1)
        if self.transform == "half_pixel":
            return np.maximum(np.float32(0), (o + np.float32(0.5)) / np.float32(s) - np.float32(0.5))
        return o / np.float32(s)

    def compute(self, x):
        xp = self.xp
        bs = self.check_blocked(x)
        y = unblock(xp, x, bs)
        for axis, s in ((2, self.scales[2]), (3, self.scales[3])):
            y = self._along(y, axis, s)
        return (block(xp, y, bs),)

    def _along(self, x: Any, axis: int, s: int) -> Any:
        """``x`` upsampled ``s`` times along ``axis`` (host index plans, device gathers)."""
        xp, n = self.xp, x.shape[axis]
        if s == 1:
            return x
        idx = xp.asarray
        i64 = self.backend.dtype(np.int64)
        if self.nearest:
            return xp.take(x, idx(np.arange(n * s) // s, dtype=i64), axis=axis)
        pos = self.positions(n, n * s, s)
        lo = np.minimum(np.floor(pos).astype(np.int64), n - 1)
        hi = np.minimum(lo + 1, n - 1)
        frac = pos - lo.astype(np.float32)
        shape = [1] * x.ndim
        shape[axis] = n * s
        f = xp.reshape(idx(frac, dtype=x.dtype), tuple(shape))
        a = xp.take(x, idx(lo, dtype=i64), axis=axis)
        b = xp.take(x, idx(hi, dtype=i64), axis=axis)
        return a + (b - a) * f

