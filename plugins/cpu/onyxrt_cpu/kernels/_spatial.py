"""Spatial-window helpers of the CPU's conv and pool fast paths.

The window geometry (:func:`read_spatial_attrs`, :func:`window`) lives in
:mod:`onyxrt.spatial` and is re-exported here. This module holds the phase-split flat
layout (:class:`FlatPlan`) in which every tap is one contiguous slice (fast tap-by-tap
reductions for pools and depthwise conv), :func:`compute_dtype`, the float16/bfloat16 →
float32 compute rule that the linalg and normalization kernels share with conv and pool,
and :func:`scratch`, the per-thread work buffers of the convolution paths (im2col,
Winograd).
"""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np

from onyxrt.records import record
from onyxrt.spatial import Window, prod, read_spatial_attrs, window

__all__ = [
    "Window",
    "read_spatial_attrs",
    "window",
    "compute_dtype",
    "LOW_FLOATS",
    "BLOCK_BYTES",
    "FlatPlan",
    "flat_plan",
    "lead_blocks",
    "prod",
    "scratch",
]


def _low_float_dtypes() -> frozenset[np.dtype[Any]]:
    out = {np.dtype(np.float16)}
    try:
        import ml_dtypes

        out.add(np.dtype(ml_dtypes.bfloat16))
    except ImportError:  # pragma: no cover - ml_dtypes ships with onnx
        pass
    return frozenset(out)


LOW_FLOATS = _low_float_dtypes()


def compute_dtype(dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype to compute in: float32 for float16/bfloat16, the dtype itself otherwise."""
    return np.dtype(np.float32) if np.dtype(dtype) in LOW_FLOATS else np.dtype(dtype)


# Users of FlatPlan work on blocks of (image, channel) rows of about this many bytes, so the
# phase copy, the tap loop and the accumulator stay in cache.
BLOCK_BYTES = 1 << 20


@record(frozen=True)
class FlatPlan:
    """A layout of a padded input in which every kernel tap is one contiguous slice.

    The (implicitly) padded input is split into stride phases (phase ``a`` of an axis holds
    padded positions ``a, a+s, a+2s, ...``), so a tap reads a *stride-1* window of one
    phase; each phase is stored flat with a fixed pitch, which turns that window into a
    contiguous 1-D slice of length :attr:`lq`. Results computed tap by tap on this pitch
    grid have a few junk positions per row, dropped by :meth:`view`. Build plans with
    :func:`flat_plan` (cached per geometry), then lay out blocks of rows with
    :meth:`layout`.
    """

    in_shape: tuple[int, ...]
    out: tuple[int, ...]
    grid: tuple[int, ...]  # shape of one phase; outputs live on (out[0], *grid[1:])
    strides: tuple[int, ...]
    copies: tuple[tuple[tuple[Any, ...], tuple[slice, ...]], ...]  # (phase+dst, src) slices
    tap_slices: tuple[tuple[int, int], ...]  # per tap (row-major): (phase, offset)
    lq: int  # length of each tap slice

    def layout(self, x: np.ndarray, fill: Any = 0) -> np.ndarray:
        """``x`` (*lead, *in_shape) → (*lead, n_phases, F), padding filled with ``fill``."""
        nsp = len(self.in_shape)
        lead = x.shape[: x.ndim - nsp]
        phases = np.full(lead + self.strides + self.grid, fill, dtype=x.dtype)
        keep = (Ellipsis,)
        for dst, src in self.copies:
            phases[keep + dst] = x[keep + src]
        return phases.reshape(lead + (prod(self.strides), prod(self.grid)))

    def tap(self, flat: np.ndarray, i: int) -> np.ndarray:
        """Tap ``i``'s input for every grid output: a (*lead, lq) view of ``flat``."""
        phase, off = self.tap_slices[i]
        return flat[..., phase, off : off + self.lq]

    def view(self, values: np.ndarray) -> np.ndarray:
        """(*lead, lq) grid values → a (*lead, *out) view without the junk positions."""
        lead = values.shape[:-1]
        g = values.reshape(lead + (self.out[0],) + self.grid[1:])
        return g[(Ellipsis,) + tuple(slice(0, o) for o in self.out[1:])]

    def row_bytes(self, itemsize: int) -> int:
        """Bytes of one laid-out (image, channel) row."""
        return prod(self.strides) * prod(self.grid) * itemsize


@functools.lru_cache(maxsize=256)
def flat_plan(
    in_shape: tuple[int, ...],
    pads_begin: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    dilations: tuple[int, ...],
    out: tuple[int, ...],
) -> FlatPlan:
    """The :class:`FlatPlan` of a window over inputs of spatial shape ``in_shape``."""
    nsp = len(kernel)
    # Tap t on an axis reads phase (t*d) % s at shift (t*d) // s: output o reads o + shift.
    grid_l = [
        o + ((k - 1) * d) // s for o, k, d, s in zip(out, kernel, dilations, strides, strict=True)
    ]
    grid_l[0] += 1  # the flat windows of the last rows run up to one row past the end
    grid = tuple(grid_l)
    copies = []
    for phase in itertools.product(*(range(s) for s in strides)):
        dst: list[slice] = []
        src: list[slice] = []
        for a, s, pb, n, g in zip(phase, strides, pads_begin, in_shape, grid, strict=True):
            # Phase position j holds padded position a + s*j, i.e. input index a + s*j - pb.
            j0 = max(0, -(-(pb - a) // s))
            j1 = min(g, -(-(n + pb - a) // s))
            if j1 <= j0:
                break
            dst.append(slice(j0, j1))
            start = a + s * j0 - pb
            src.append(slice(start, start + s * (j1 - j0 - 1) + 1, s))
        else:
            copies.append((phase + tuple(dst), tuple(src)))
    pitch = [prod(grid[k + 1 :]) for k in range(nsp)]
    tap_slices = []
    for tap in itertools.product(*(range(k) for k in kernel)):
        pos = [t * d for t, d in zip(tap, dilations, strict=True)]
        ph = 0
        for p, s in zip(pos, strides, strict=True):
            ph = ph * s + p % s
        off = sum((p // s) * pt for p, s, pt in zip(pos, strides, pitch, strict=True))
        tap_slices.append((ph, off))
    return FlatPlan(
        tuple(in_shape),
        tuple(out),
        grid,
        tuple(strides),
        tuple(copies),
        tuple(tap_slices),
        out[0] * prod(grid[1:]),
    )


def lead_blocks(
    n: int, c: int, row_bytes: int, budget: int | None = None
) -> Iterator[tuple[slice, slice]]:
    """(images, channels) slices covering an (n, c) lead in blocks of about ``budget``
    (default :data:`BLOCK_BYTES`) bytes, given ``row_bytes`` per (image, channel) row."""
    budget = BLOCK_BYTES if budget is None else budget
    row_bytes = max(1, row_bytes)
    if c * row_bytes <= budget:
        nb = max(1, budget // (c * row_bytes))
        for n0 in range(0, n, nb):
            yield slice(n0, n0 + nb), slice(None)
        return
    cb = max(1, budget // row_bytes)
    for n0 in range(n):
        for c0 in range(0, c, cb):
            yield slice(n0, n0 + 1), slice(c0, c0 + cb)


_local = threading.local()


def scratch(name: str, shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A reusable per-thread buffer of ``shape`` (undefined contents) for role ``name``.

    Reusing it spares the page faults of a fresh multi-megabyte allocation on every call;
    being per thread, kernels running concurrently never share one.
    """
    nbytes = prod(shape) * dtype.itemsize
    buf = getattr(_local, name, None)
    if buf is None or buf.nbytes < nbytes:
        buf = np.empty(nbytes, dtype=np.uint8)
        setattr(_local, name, buf)
    return buf[:nbytes].view(dtype).reshape(shape)
