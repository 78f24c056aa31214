"""Device helpers of the GPU's Conv, MaxPool and AveragePool fast paths: padding on the
spatial axes, the strided window view (im2col without a copy) the pools reduce over, and
Conv's column matrix (that view copied once, in the order the GEMM reads it). The window
geometry comes from :mod:`onyxrt.spatial` through the operator library's kernels they
subclass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onyxrt.spatial import prod

__all__ = ["pad_spatial", "reached_end", "windows", "columns", "prod"]


def pad_spatial(cp: Any, x: Any, begin: Sequence[int], end: Sequence[int], value: Any = 0) -> Any:
    """``x`` padded with ``value`` on its last ``len(begin)`` axes (``x`` itself if no pad)."""
    if not any(begin) and not any(end):
        return x
    nsp = len(begin)
    lead = x.shape[: x.ndim - nsp]
    sp = x.shape[x.ndim - nsp :]
    shape = lead + tuple(n + b + e for n, b, e in zip(sp, begin, end))
    # zeros is a memset on the device (no kernel to compile or launch); full is a kernel.
    out = cp.zeros(shape, dtype=x.dtype) if value == 0 else cp.full(shape, value, dtype=x.dtype)
    out[(Ellipsis,) + tuple(slice(b, b + n) for b, n in zip(begin, sp))] = x
    return out


def reached_end(
    sizes: Sequence[int],
    begin: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
) -> tuple[int, ...]:
    """The end padding the windows actually read, per spatial axis: often less than the
    declared pads (a stride-2 3x3 window with pads 1 over an even size never reaches its
    last padded row), so no memory is set that no window reads."""
    return tuple(
        max(0, (o - 1) * s + (k - 1) * d + 1 - n - b)
        for n, b, k, s, d, o in zip(sizes, begin, kernel, strides, dilations, out_shape)
    )


def windows(
    cp: Any,
    xp: Any,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
) -> Any:
    """The windows of padded ``xp`` (N, C, *P) as a strided view (N, C, *out, *kernel).

    No data moves: element ``[n, c, o..., k...]`` is ``xp[n, c, o*s + k*d ...]``.
    """
    lead_strides = xp.strides[:2]
    sp_strides = xp.strides[2:]
    shape = tuple(xp.shape[:2]) + tuple(out_shape) + tuple(kernel)
    strides_ = (
        tuple(lead_strides)
        + tuple(st * s for st, s in zip(sp_strides, strides))
        + tuple(st * d for st, d in zip(sp_strides, dilations))
    )
    return cp.lib.stride_tricks.as_strided(xp, shape=shape, strides=strides_)


def columns(
    cp: Any,
    xp: Any,
    groups: int,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out_shape: Sequence[int],
    *,
    group_major: bool,
) -> Any:
    """Conv's column matrix of padded ``xp`` (N, C, *P): one strided view, copied once.

    Rows are (C/groups, *kernel) as W flattens them, columns the window positions:
    ``(N, groups, C/groups * taps, L)``, or with ``group_major`` ``(groups, C/groups * taps,
    N * L)`` (the images side by side, so a grouped convolution of several images is one
    strided batch of GEMMs over the groups). Element ``[.., c, k..., .., o...]`` is
    ``xp[n, c, o*s + k*d ...]``.
    """
    n, c = xp.shape[:2]
    cg = c // groups
    sn, sc = xp.strides[:2]
    taps = tuple(st * d for st, d in zip(xp.strides[2:], dilations))
    steps = tuple(st * s for st, s in zip(xp.strides[2:], strides))
    rows = cg * prod(kernel)
    positions = prod(out_shape)
    if group_major:
        shape = (groups, cg, *kernel, n, *out_shape)
        strides_ = (cg * sc, sc, *taps, sn, *steps)
        final: tuple[int, ...] = (groups, rows, n * positions)
    else:
        shape = (n, groups, cg, *kernel, *out_shape)
        strides_ = (sn, cg * sc, sc, *taps, *steps)
        final = (n, groups, rows, positions)
    view = cp.lib.stride_tricks.as_strided(xp, shape=shape, strides=strides_)
    # reshape copies wherever merged axes have no single stride (overlapping or strided
    # windows): the one copy; windows that tile the input exactly stay a view.
    return view.reshape(final)
