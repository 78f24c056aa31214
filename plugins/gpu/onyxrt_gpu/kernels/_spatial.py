"""Device helpers of the GPU's Conv, MaxPool and AveragePool fast paths: padding on the
spatial axes, and the strided window view (im2col without a copy) they reduce or
multiply over. The window geometry comes from :mod:`onyxrt.spatial` through the operator
library's kernels they subclass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from onyxrt.spatial import prod

__all__ = ["pad_spatial", "windows", "prod"]


def pad_spatial(cp: Any, x: Any, begin: Sequence[int], end: Sequence[int], value: Any = 0) -> Any:
    """``x`` padded with ``value`` on its last ``len(begin)`` axes (``x`` itself if no pad)."""
    if not any(begin) and not any(end):
        return x
    nsp = len(begin)
    lead = x.shape[: x.ndim - nsp]
    sp = x.shape[x.ndim - nsp :]
    shape = lead + tuple(n + b + e for n, b, e in zip(sp, begin, end))
    out = cp.full(shape, value, dtype=x.dtype)
    out[(Ellipsis,) + tuple(slice(b, b + n) for b, n in zip(begin, sp))] = x
    return out


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


