"""CPU overrides of the library's convolutions (:mod:`onyxrt_ops.spatial`): Conv,
subclassing the library's kernel (attributes parsed and checked once, there; ConvInteger
is in :mod:`.quantization`, beside QLinearConv whose integer kernels it shares). ConvTranspose comes from the library: its matmul + strided scatter-add is this
module's former kernel written over the namespace, with its geometry cached per input
shape (4x64x28x28 input, 4x4 stride 2: 3.48 ms before, 3.42 ms from the library;
1x4x6x6, 3x3: 56 us before, 25 us).

Conv runs as im2col + one GEMM per group: each kernel tap's strided box of the input is
copied into a ``(C * taps, L)`` column matrix (padding positions are filled in thin
stripes, the padded input is never built) and multiplied by the weight prepacked as
``(group, M/group, C/group * taps)``, straight into the output. Column matrices live in a
reusable per-thread scratch buffer; images with few output positions are stacked side by
side into one wider GEMM. A 1x1, stride-1, unpadded conv needs no columns: it is one 2-D
matmul per image. Depthwise convs (one input channel per group) accumulate the taps with
vectorized multiply-adds (compiled where they can); 3x3 stride-1 float32 convs without
groups run Winograd (``winograd``) when the compiled kernels are on.
The library's portable Conv (taps stacked by ``xp.stack``, one matmul) is 3x slower on a
1x16x8x8 input with 3x3 filters (85 vs 28 us) and 7x on 1x64x56x56 (17.8 vs 2.5 ms).
ConvInteger's fallback (no VNNI, a weight zero point fed at run time) runs its float64
convolution through :func:`conv_forward` (2x64x28x28 uint8, 3x3: 1.86 ms; the library's
2.05 ms). float16/bfloat16 compute in float32.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from .. import native
from . import registry, winograd
from ._backend import BACKEND
from ._spatial import Window, compute_dtype, flat_plan, lead_blocks, prod, scratch

__all__ = ["Conv", "add_channel_bias", "conv_forward", "pack_conv_weight"]


def _same_array(a: np.ndarray, b: np.ndarray | None) -> bool:
    """Whether ``a`` holds exactly the constant ``b`` (cheap identity check first)."""
    if b is None:
        return False
    if a is b:
        return True
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))


class _PrepackedWeight:
    """W (input 1) packed once by ``pack`` when it is a constant.

    :meth:`get` returns the prepacked weight while ``compute`` is given that same W in the
    same compute dtype, and packs the W it is given otherwise.
    """

    def __init__(
        self,
        info: KernelInfo,
        group: int,
        pack: Callable[[np.ndarray, int, np.dtype[Any]], np.ndarray],
    ) -> None:
        self.group = group
        self.pack = pack
        self.src = info.constant(1)
        self.packed: np.ndarray | None = None
        if isinstance(self.src, np.ndarray) and self.src.ndim >= 3:
            # The library's Conv has checked W against group already.
            self.packed = pack(self.src, group, compute_dtype(self.src.dtype))

    def get(self, w: np.ndarray, cdt: np.dtype[Any]) -> np.ndarray:
        if self.packed is not None and self.packed.dtype == cdt and _same_array(w, self.src):
            return self.packed
        return self.pack(w, self.group, cdt)


# Filters packed for the compiled GEMM (native.gemm), by the packed weight array they come
# from: a Conv keeps that array for its lifetime, and the entry goes when it does.
_gemm_filters: dict[int, tuple[weakref.ref[np.ndarray], native.PackedMatrix]] = {}

# Where the compiled GEMM is used for convolutions, from measurements in the models
# here: from 512 output positions per GEMM (N = 784 and more: 10-60% faster alone;
# N = 196: 5-30% slower, its 32-column tiles leaving more of the last one empty) and a
# depth (K = C * taps) of 16: MobileNetV2's K = 16-27 convolutions ran as fast as on
# OpenBLAS once the epilogue was fused into the tiles; below that a tile's few steps of
# k cost less than storing it, and nothing was measured.
MIN_GEMM_POSITIONS = 512
MIN_GEMM_DEPTH = 16


def _packed_filters(wp: np.ndarray) -> native.PackedMatrix | None:
    """``wp`` (1, M, K) packed as the left operand of the compiled GEMM (cached)."""
    key = id(wp)
    hit = _gemm_filters.get(key)
    if hit is not None and hit[0]() is wp:
        return hit[1]
    packed = native.pack_gemm_a(wp[0])
    if packed is not None:

        def forget(_: object) -> None:
            _gemm_filters.pop(key, None)

        _gemm_filters[key] = (weakref.ref(wp, forget), packed)
    return packed


def _compiled_gemm_wins(wp: np.ndarray, positions: int) -> bool:
    """Whether a convolution GEMM of packed weights ``wp`` (g, M/g, K) over ``positions``
    columns goes to the compiled GEMM (see MIN_GEMM_POSITIONS)."""
    return (
        native.GEMM_PREFERRED
        and wp.shape[0] == 1
        and wp.dtype == np.float32
        and positions >= MIN_GEMM_POSITIONS
        and wp.shape[2] >= MIN_GEMM_DEPTH
    )


def _filters_times(
    wp: np.ndarray,
    cols: np.ndarray,
    out: np.ndarray,
    compiled: bool,
    finish: tuple[Any, ...] | None = None,
) -> bool:
    """``out = wp @ cols`` for packed weights ``wp`` (g, M/g, K) and ``cols`` (g, K, N):
    through the compiled GEMM (filters packed once) when ``compiled``, which also applies
    ``finish`` = (bias, z as out[0]'s shape, act, p0, p1) tile by tile; else one BLAS
    matmul. Returns whether ``finish`` was applied."""
    if compiled:
        filters = _packed_filters(wp)
        bias, z, act, p0, p1 = finish if finish is not None else (None, None, native.ACT_NONE, 0, 0)
        if filters is not None and native.gemm(filters, cols[0], out[0], bias, None, z, act, p0, p1):
            return finish is not None
    np.matmul(wp, cols, out=out)
    return False


def pack_conv_weight(w: np.ndarray, group: int, dtype: np.dtype[Any]) -> np.ndarray:
    """(M, C/g, *K) → contiguous (g, M/g, C/g * prod(K)) in ``dtype``."""
    m = w.shape[0]
    if m % group:
        raise ValueError(f"W has {m} output channels, not divisible by group={group}")
    return np.ascontiguousarray(w.reshape(group, m // group, -1), dtype=dtype)


def conv_forward(
    x: np.ndarray,
    wp: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    win: Window,
    pad_value: Any = 0,
) -> np.ndarray:
    """Convolve ``x`` (N, C, *S) with packed weights ``wp`` (g, M/g, C/g*taps).

    ``x`` and ``wp`` share the compute dtype; returns (N, M, *out) in that dtype, always a
    freshly allocated C-contiguous array (callers add bias and residuals to it in place).
    """
    return conv_forward_finished(x, wp, kernel, strides, dilations, win, pad_value)[0]


def conv_forward_finished(
    x: np.ndarray,
    wp: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    win: Window,
    pad_value: Any = 0,
    finish: tuple[Any, ...] | None = None,
) -> tuple[np.ndarray, bool]:
    """:func:`conv_forward`, then ``finish`` = (bias, z, act, p0, p1) of
    :func:`native.epilogue` applied image by image (plane by plane for depthwise) while
    the output is still in cache, when the compiled code can take it; the flag says
    whether it was applied (if not, the caller applies it to the whole output)."""
    if len(kernel) == 1:
        return _as_two_dimensional(x, wp, kernel, strides, dilations, win, pad_value, finish)
    n, c = x.shape[:2]
    group, m_per_g, k_per_g = wp.shape
    if c % group:
        raise ValueError(f"X has {c} channels, not divisible by group={group}")
    c_per_g = c // group
    ntaps = prod(kernel)
    if c_per_g * ntaps != k_per_g:
        raise ValueError(
            f"W expects {k_per_g // ntaps * group} input channels (group={group}), X has {c}"
        )
    out = win.out_shape
    m = group * m_per_g
    y = np.empty((n, m) + out, dtype=x.dtype)
    if n == 0 or prod(out) == 0:
        return y, False
    if finish is not None and not (
        x.dtype == np.float32 and native.ENABLED and native.epilogue_ready(y.shape, *finish[:2])
    ):
        finish = None
    L = prod(out)
    if ntaps == 1 and not win.padded and all(s == 1 for s in strides):
        # 1x1 stride-1 conv: X itself is the column matrix, one matmul per image (a 2-D
        # matmul when group == 1, which numpy hands straight to BLAS). Stacking images
        # into one GEMM would cost two transposing copies: measured slower here.
        compiled = _compiled_gemm_wins(wp, L)
        for i in range(n):
            image_finish = _image_finish(finish, i, m, L)
            if not _filters_times(wp, x[i].reshape(group, c_per_g, L),
                                  y[i].reshape(group, m_per_g, L), compiled, image_finish):
                _finish_images(y, finish, i, i + 1)
        return y, finish is not None
    if c_per_g == 1 and group > 1 and ntaps > 1:
        if pad_value == 0 and native.depthwise2d(
            np.ascontiguousarray(x), wp, y, kernel, strides, win.pads_begin, dilations, finish
        ):
            return y, finish is not None
        _depthwise(x, wp, kernel, strides, dilations, win, pad_value, y)
        return y, False
    for n0, n1, r0, r1 in _chunks(n, c * ntaps, out, x.dtype.itemsize):
        # An image made in one piece can be finished by the compiled GEMM as it goes.
        whole = n1 - n0 == 1 and r0 == 0 and r1 == out[0]
        applied = _conv_chunk(x, wp, kernel, strides, dilations, win, pad_value, y, n0, n1, r0,
                              r1, _image_finish(finish, n0, m, L) if whole else None)
        if r1 == out[0] and not applied:  # images [n0, n1) are complete
            _finish_images(y, finish, n0, n1)
    return y, finish is not None


def _as_two_dimensional(
    x: np.ndarray,
    wp: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    win: Window,
    pad_value: Any,
    finish: tuple[Any, ...] | None,
) -> tuple[np.ndarray, bool]:
    """A 1-D convolution as a 2-D one over a height of 1 (views, no copies): the compiled
    im2col, depthwise and GEMM-epilogue paths are 2-D, and the generic im2col loops over
    taps in Python — one iteration per tap, 512 of them for an STFT front end's filters."""
    lifted = Window((1,) + win.out_shape, (0,) + win.pads_begin, (0,) + win.pads_end,
                    (0,) + win.extra_end)
    if finish is not None and finish[1] is not None:
        finish = (finish[0], finish[1][:, :, None], *finish[2:])
    y, finished = conv_forward_finished(
        x[:, :, None], wp, (1,) + kernel, (1,) + strides, (1,) + dilations, lifted, pad_value, finish
    )
    return y.reshape(y.shape[:2] + win.out_shape), finished


def _image_finish(
    finish: tuple[Any, ...] | None, i: int, m: int, positions: int
) -> tuple[Any, ...] | None:
    """``finish`` for image ``i`` alone: its residual as a (M, positions) matrix."""
    if finish is None:
        return None
    bias, z, act, p0, p1 = finish
    return (bias, None if z is None else z[i].reshape(m, positions), act, p0, p1)


def _finish_images(y: np.ndarray, finish: tuple[Any, ...] | None, n0: int, n1: int) -> None:
    """The epilogue on images [n0, n1) of ``y`` (nothing when ``finish`` is None)."""
    if finish is None:
        return
    bias, z, act, p0, p1 = finish
    native.epilogue(y[n0:n1], bias, None if z is None else z[n0:n1], act, p0, p1)


# Column matrices are built in chunks of at most this many bytes (bounded memory, cache
# reuse); each thread that runs convs keeps one such buffer alive (see ``_spatial.scratch``).
_COLS_BUDGET = 1 << 24
# Images whose column matrix has fewer columns than this are stacked side by side into one
# GEMM (BLAS, threaded especially, runs short products well below its peak, and the
# columns are copied anyway); larger ones run one by one.
_STACK_BELOW = 1024

def _chunks(
    n: int, k: int, out: tuple[int, ...], itemsize: int
) -> Iterator[tuple[int, int, int, int]]:
    """(n0, n1, r0, r1): images [n0, n1) and first-axis output rows [r0, r1) per chunk.

    An image's column matrix has ``k`` rows and ``prod(out)`` columns. Small images are
    stacked (up to the budget), large ones go one at a time, and an image whose columns
    exceed the budget is cut into runs of output rows.
    """
    L = prod(out)
    image_bytes = k * L * itemsize
    if image_bytes <= _COLS_BUDGET:
        nb = max(1, min(n, _COLS_BUDGET // image_bytes)) if L < _STACK_BELOW else 1
        for n0 in range(0, n, nb):
            yield n0, min(n, n0 + nb), 0, out[0]
        return
    rb = max(1, _COLS_BUDGET // (image_bytes // out[0]))
    for n0 in range(n):
        for r0 in range(0, out[0], rb):
            yield n0, n0 + 1, r0, min(out[0], r0 + rb)


def _conv_chunk(
    x: np.ndarray,
    wp: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    win: Window,
    pad_value: Any,
    y: np.ndarray,
    n0: int,
    n1: int,
    r0: int,
    r1: int,
    finish: tuple[Any, ...] | None = None,
) -> bool:
    """Images [n0, n1), output rows [r0, r1) of ``y``: im2col, then one (grouped) GEMM.
    ``finish`` (for one image) is applied when the compiled GEMM can; returns whether."""
    c = x.shape[1]
    group, m_per_g, k_per_g = wp.shape
    nb = n1 - n0
    sub = (r1 - r0,) + win.out_shape[1:]
    ls = prod(sub)
    cols = scratch("cols", (c, prod(kernel), nb) + sub, x.dtype)
    xb = x[n0:n1]
    if pad_value != 0 or not native.im2col2d(
        xb, cols, kernel, win.out_shape, strides, win.pads_begin, dilations, r0
    ):
        _im2col(xb, kernel, strides, dilations, win, pad_value, r0, cols)
    cols = cols.reshape(group, k_per_g, nb * ls)
    rest = ls // sub[0]
    if nb == 1:
        # Straight into this image's rows of the output (a BLAS-able strided view).
        dst = y[n0].reshape(group, m_per_g, -1)[:, :, r0 * rest : r1 * rest]
        return _filters_times(wp, cols, dst, _compiled_gemm_wins(wp, ls), finish)
    prod_ = scratch("gemm", (group, m_per_g, nb * ls), x.dtype)
    _filters_times(wp, cols, prod_, _compiled_gemm_wins(wp, nb * ls))
    # (M, images, L) → (images, M, L): the one extra pass that stacking images costs.
    y[n0:n1].reshape(nb, group * m_per_g, ls)[...] = prod_.reshape(-1, nb, ls).transpose(1, 0, 2)
    return False


def _im2col(
    xb: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    win: Window,
    pad_value: Any,
    r0: int,
    cols: np.ndarray,
) -> None:
    """Fill ``cols`` (C, taps, nb, *sub) with the taps of images ``xb`` (nb, C, *S).

    ``sub`` is the chunk's output block: first-axis rows from ``r0``, all of the others.
    Each tap is one strided copy of the input box it reads; output positions whose input
    falls in the padding get ``pad_value`` by a few thin stripe fills, so the padded
    input is never materialized.
    """
    in_shape = xb.shape[2:]
    sub = cols.shape[3:]
    lead = (slice(None), slice(None))
    src_all = xb.transpose((1, 0) + tuple(range(2, xb.ndim)))  # (C, nb, *S) view
    for i, tap in enumerate(itertools.product(*(range(k) for k in kernel))):
        dst = cols[:, i]
        box_dst: list[slice] = []
        box_src: list[slice] = []
        for a, (t, s, d, pb, size, o) in enumerate(
            zip(tap, strides, dilations, win.pads_begin, in_shape, sub, strict=True)
        ):
            # Output o (global o + first) reads input o*s + shift; keep 0 <= that < size.
            first = r0 if a == 0 else 0
            shift = t * d - pb + first * s
            lo = min(o, max(0, -(shift // s) if shift < 0 else 0))
            hi = max(lo, min(o, (size - 1 - shift) // s + 1)) if size > shift else lo
            if lo > 0:
                dst[lead + (slice(None),) * a + (slice(0, lo),)] = pad_value
            if hi < o:
                dst[lead + (slice(None),) * a + (slice(hi, None),)] = pad_value
            box_dst.append(slice(lo, hi))
            start = lo * s + shift
            box_src.append(slice(start, start + (hi - lo - 1) * s + 1, s))
        if all(b.stop > b.start for b in box_dst):
            dst[lead + tuple(box_dst)] = src_all[lead + tuple(box_src)]


# Depthwise blocks are larger than the pools' (BLOCK_BYTES): measured, fewer and longer
# multiply-adds win more in per-call overhead than they lose in cache misses.
_DEPTHWISE_BLOCK_BYTES = 1 << 21


def _depthwise(
    x: np.ndarray,
    wp: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    win: Window,
    pad_value: Any,
    y: np.ndarray,
) -> None:
    """Conv with one input channel per group into ``y``: multiply-add tap by tap.

    Blocks of (image, channel) rows are laid out with a :class:`~._spatial.FlatPlan`, so
    every tap is a contiguous slice and each multiply-add runs over a long inner loop while
    the block stays in cache.
    """
    n = x.shape[0]
    group, m_per_g, ntaps = wp.shape
    out = win.out_shape
    wd = wp.reshape(group, m_per_g, ntaps, 1)
    yg = y.reshape((n, group, m_per_g) + out)
    plan = flat_plan(x.shape[2:], win.pads_begin, kernel, strides, dilations, out)
    lq = plan.lq
    row_bytes = plan.row_bytes(x.dtype.itemsize) + 2 * m_per_g * lq * x.dtype.itemsize
    for ns, cs in lead_blocks(n, group, row_bytes, _DEPTHWISE_BLOCK_BYTES):
        flat = plan.layout(x[ns, cs], pad_value)[:, :, None]  # (n_b, c_b, 1, phases, F)
        wb = wd[cs]
        acc = np.empty(flat.shape[:2] + (m_per_g, lq), dtype=x.dtype)
        tmp = np.empty_like(acc)
        for i in range(ntaps):
            src = plan.tap(flat, i)
            if i == 0:
                np.multiply(src, wb[:, :, i], out=acc)
            else:
                np.multiply(src, wb[:, :, i], out=tmp)
                acc += tmp
        yg[ns, cs] = plan.view(acc)


@registry.register("Conv", since=(1, 11, 22))
class Conv(library.kernel("Conv", 22, BACKEND)):
    """N-d convolution with groups, strides, dilations, pads/auto_pad and optional bias:
    the CPU's im2col/GEMM, depthwise and Winograd paths (weights packed once)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self._w = _PrepackedWeight(info, self.group, pack_conv_weight)
        # (packed weights, their Winograd transform), made on first use.
        self._winograd: tuple[np.ndarray, np.ndarray] | None = None
        wp = self._w.packed
        if wp is not None and _compiled_gemm_wins(wp, MIN_GEMM_POSITIONS):
            # The compiled GEMM's filter panels at creation, not in the first run (a log-mel
            # front end's 514 x 512 filters: 3 ms of a 4.3 ms first run, 1.5 ms after).
            # Shapes whose products turn out narrower than MIN_GEMM_POSITIONS never read
            # them; those keep a second copy of the weights for the session's life.
            _packed_filters(wp)

    def compute(self, x, w, b=None):
        finish = None if b is None else (b.astype(np.float32, copy=False), None, native.ACT_NONE, 0.0, 0.0)
        y, finished = self._convolve(x, w, finish)
        if b is not None and not finished:
            add_channel_bias(y, b)
        return (y.astype(x.dtype, copy=False),)

    def _convolve(
        self, x: np.ndarray, w: np.ndarray, finish: tuple[Any, ...] | None = None
    ) -> tuple[np.ndarray, bool]:
        """conv(X, W) in the compute dtype, in a fresh buffer, and whether ``finish``
        (bias, residual, activation code, p0, p1 of :func:`native.epilogue`) was applied
        too, image by image while the output is in cache; when it was not, the caller
        applies it."""
        k, s, d, win = self._geometry(x, w)
        cdt = compute_dtype(x.dtype)
        xc = x.astype(cdt, copy=False)
        wp = self._w.get(w, cdt)
        if winograd.applicable(xc, wp, k, s, d):
            if self._winograd is None or self._winograd[0] is not wp:
                self._winograd = (wp, winograd.transform_filters(wp))
            return winograd.convolve(xc, self._winograd[1], win.out_shape, win.pads_begin, finish)
        return conv_forward_finished(xc, wp, k, s, d, win, 0, finish)


def add_channel_bias(y: np.ndarray, b: np.ndarray) -> None:
    """y (N, M, *spatial) += b (M values) per output channel, in place."""
    m = y.shape[1]
    if b.size != m:
        raise ValueError(f"B has {b.size} values; the convolution has {m} output channels")
    b = b.astype(y.dtype, copy=False)
    if not native.epilogue(y, b, None):
        # (N, M, L) + (M, 1): one broadcast whose inner loop runs over all of a channel's
        # positions (over (M, 1, 1) it would run over rows as short as 7 elements).
        rows = y.reshape(y.shape[0], m, -1)
        rows += b.reshape(m, 1)
