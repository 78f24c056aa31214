"""CPU kernels: numpy fast paths of the indexing operators of the operator library
(:mod:`onyxrt_ops.indexing`, bound over numpy in ``kernels/__init__``).

Slice and OneHot come from the library unchanged (Slice with constant bounds 0.3 us
against 4.2 us before, its index built once per shape; with runtime bounds, and OneHot,
within 7% of the former kernels). The overrides below subclass the library's kernels
(attribute parsing, validation and shapes stay there) and replace a step each, where the
library's array-API form costs more on numpy. Figures: process time per call, before this
module / now / the library's kernel alone:

* index checks with numpy's array methods (``idx.min()`` costs a third of ``xp.min``):
  Gather, also taking N-d indices at once (int64 [3] shape, 0-d index: 5.3 / 4.1 /
  8.0 us; constant index 5.3 / 1.7 / 3.4 us; [30000, 256] embedding, [4, 128] indices:
  23.1 / 21.2 / 26.1 us), GatherElements, also with open-grid fancy indexing (half of
  ``np.take_along_axis``; [4, 5], [2, 5] indices: 8.8 / 9.3 / 13.1 us), GatherND ([4, 5],
  2 index pairs: 19.5 / 17.5 / 22.4 us);
* ScatterND, ScatterElements, Scatter — numpy's assignment and the unbuffered
  ``ufunc.at`` instead of the library's sort-and-merge ([64, 64] float32, 16 rows:
  12.2 / 10.6 / 37.8 us; ScatterElements [2, 64, 128]: 92 / 80 / 1256 us); reductions
  stay exact in update order;
* NonZero — numpy's ``nonzero`` into one array (``xp.stack`` alone costs as much as the
  rest: 3 elements 2.3 / 2.5 / 4.0 us), and string tensors, whose truth is Python's;
* Unique — ``np.lexsort`` and permutations inverted by assignment instead of sorts
  (10000 int64, sorted=0: 348 / 350 / 685 us; [1000, 4] along axis 0: 83 / 75 / 104 us).
  A 6-element Unique costs 14.2 / 16.5 us: the library's extra calls, kept (Unique is
  no per-inference shape computation);
* TensorScatter — the library writes one or two slices per batch, faster for the usual
  few batches ([1, 8, 128, 64] cache, one-step update: 20.5 → 9.2 us; [8, 2, 4]: 14.3 →
  10.9 us) but not for many ([64, 2, 4]: 15.2 → 68.8 us; [64, 8, 128, 64]: 501 → 544 us),
  where the override keeps numpy's indexed assignment (after the library's checks, which
  read the write indices as Python ints: 22.3 and 523 us).

CumProd comes from the library (:mod:`onyxrt_ops.reduction`), measured no slower
(``kernel.compute`` on float32, best of 7: [2, 8] 2.9 us before, 2.5 us from the library;
exclusive and reversed 11.8 → 8.0; [64, 1024] 221 → 220, exclusive and reversed 317 →
252).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt_ops import library

from . import registry
from ._backend import BACKEND

__all__ = ["Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter", "NonZero", "Unique"]

_BF16: np.dtype[Any] | None
try:  # ml_dtypes ships with onnx; numpy ufunc loops on bfloat16 are partial or slow
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    _BF16 = None


class _NumpyIndices:
    """Mixin: index checks with numpy's array methods (``idx.min()`` costs a third of
    ``xp.min(idx)``, which dominates on small inputs)."""

    def wrapped(self, indices: Any, dim: int, what: str) -> np.ndarray:
        idx = np.asarray(indices).astype(np.int64, copy=False)
        if idx.size == 0:
            return idx
        lo, hi = int(idx.min()), int(idx.max())
        if lo < -dim or hi >= dim:
            raise IndexError(f"{what} out of range: values span [{lo}, {hi}] for size {dim}")
        return idx if lo >= 0 else np.where(idx < 0, idx + dim, idx)

    def linear(self, indices: Any, dims: tuple[int, ...], what: str) -> np.ndarray:
        k = len(dims)
        idx = np.asarray(indices).astype(np.int64, copy=False)
        if k == 0:
            return np.zeros(idx.shape[:-1], dtype=np.int64)
        d = np.asarray(dims, dtype=np.int64)
        if idx.size and ((idx < -d) | (idx >= d)).any():
            raise IndexError(f"{what} out of range for dims {list(dims)}")
        idx = np.where(idx < 0, idx + d, idx)
        if k == 1:
            return idx[..., 0]
        return idx @ np.array([math.prod(dims[j + 1:]) for j in range(k)], dtype=np.int64)


@registry.register("Gather", since=(1, 11, 13))
class Gather(_NumpyIndices, library.kernel("Gather", 13, BACKEND)):
    """The library's Gather, with numpy's index checks and N-d ``take``."""

    def take(self, data: Any, idx: Any, axis: int) -> Any:
        return np.take(data, idx, axis=axis)

    def compute(self, data, indices):
        if self.const is not None and type(data) is np.ndarray:
            # Constant indices over a host array (a shape computation's or a classifier's
            # few values): the ndarray's take, without np.take's dispatch and the axis
            # helpers (3 -> ~1 us a node inside a run).
            axis = self.axis + data.ndim if self.axis < 0 else self.axis
            if 0 <= axis < data.ndim:
                return (data.take(self.checked_constant(data.shape[axis]), axis=axis),)
        return super().compute(data, indices)


@registry.register("GatherElements", since=(11, 13))
class GatherElements(_NumpyIndices, library.kernel("GatherElements", 13, BACKEND)):
    """The library's GatherElements, with numpy's index checks and fancy indexing."""

    def take_along(self, data: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
        # Open grids over idx's shape, idx itself on ``axis``: half np.take_along_axis's cost.
        grid = [np.arange(n).reshape([n if j == d else 1 for j in range(idx.ndim)])
                for d, n in enumerate(idx.shape)]
        grid[axis] = idx
        return data[tuple(grid)]


@registry.register("GatherND", since=(11, 12, 13))
class GatherND(_NumpyIndices, library.kernel("GatherND", 13, BACKEND)):
    """The library's GatherND, with numpy's index checks."""


_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


class _NumpyScatter(_NumpyIndices):
    """Mixin: :meth:`scatter` with numpy's assignment and ``ufunc.at``."""

    reduction: str

    def scatter(self, data: np.ndarray, lin: np.ndarray, updates: np.ndarray) -> np.ndarray:
        """A copy of ``data`` (rows, cols) with ``updates`` (n, cols) written at rows
        ``lin``: "none" lets the last duplicate win, like a sequential loop; reductions
        accumulate duplicates in order."""
        work = data.dtype
        if self.reduction != "none" and _BF16 is not None and data.dtype == _BF16:
            work = np.dtype(np.float32)
        out = np.array(data, dtype=work, copy=True, order="C")
        upd = updates.astype(work, copy=False)
        if self.reduction == "none":
            out[lin] = upd
        elif out.shape[1] == 1 or lin.size < 2:
            _UFUNCS[self.reduction].at(out, lin, upd)
        else:
            _reduce_rows(out, lin, upd, _UFUNCS[self.reduction])
        return out.astype(data.dtype, copy=False)


def _reduce_rows(out: np.ndarray, lin: np.ndarray, upd: np.ndarray, ufunc: np.ufunc) -> None:
    """``ufunc.at(out, lin, upd)`` for whole rows, much faster than ``ufunc.at`` on 2-D.

    Updates are applied in rounds: round r applies every target row's r-th update (in
    index order), so each row is reduced in the exact order of a sequential loop while each
    round is one vectorized gather-compute-scatter.
    """
    order = np.argsort(lin, kind="stable")
    sl = lin[order]
    first = np.ones(sl.size, dtype=bool)
    first[1:] = sl[1:] != sl[:-1]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    rank = np.arange(sl.size) - starts[group]  # occurrence number of each sorted update
    by_rank = order[np.argsort(rank, kind="stable")]
    bounds = np.concatenate([[0], np.cumsum(np.bincount(rank))])
    for r in range(bounds.size - 1):
        sel = by_rank[bounds[r] : bounds[r + 1]]
        rows = lin[sel]
        out[rows] = ufunc(out[rows], upd[sel])


@registry.register("ScatterND", since=(11, 13, 16, 18))
class ScatterND(_NumpyScatter, library.kernel("ScatterND", 18, BACKEND)):
    """The library's ScatterND, scattering with numpy."""


@registry.register("ScatterElements", since=(11, 13, 16, 18))
class ScatterElements(_NumpyScatter, library.kernel("ScatterElements", 18, BACKEND)):
    """The library's ScatterElements, scattering with numpy."""


@registry.register("Scatter", since=(9, 11))
class Scatter(_NumpyScatter, library.kernel("Scatter", 11, BACKEND)):
    """The library's deprecated Scatter, scattering with numpy."""


@registry.register("NonZero", since=(9, 13))
class NonZero(library.kernel("NonZero", 13, BACKEND)):
    """The library's NonZero computed with numpy (``xp.stack`` alone costs as much as the
    rest); string tensors are tested with Python's truth."""

    def compute(self, x):
        if x.dtype.kind == "O":
            mask = np.vectorize(bool, otypes=[bool])(x) if x.size else np.zeros(x.shape, bool)
        else:
            mask = x if x.dtype == np.bool_ else (x.astype(np.float32) if x.dtype == _BF16 else x) != 0
        if x.ndim == 0:
            return (np.zeros((1, int(bool(mask))), dtype=np.int64),)
        return (np.array(np.nonzero(mask), dtype=np.int64).reshape(x.ndim, -1),)


@registry.register("Unique", since=(11, 28))
class Unique(library.kernel("Unique", 11, BACKEND)):
    """The library's Unique, with numpy's lexsort and permutations inverted by assignment
    instead of a sort."""

    def order(self, keys: np.ndarray) -> np.ndarray:
        return np.lexsort(keys.T[::-1]) if keys.size else np.arange(keys.shape[0])

    def invert(self, permutation: np.ndarray) -> np.ndarray:
        inverse = np.empty_like(permutation)
        inverse[permutation] = np.arange(permutation.size, dtype=permutation.dtype)
        return inverse


# ------------------------------------------------------------- TensorScatter


@registry.register("TensorScatter", since=24)
class TensorScatter(library.kernel("TensorScatter", 24, BACKEND)):
    """The library's TensorScatter, with more than 8 batches written by one indexed
    assignment instead of a slice assignment per batch."""

    def compute(self, past, update, write_indices=None):
        if past.ndim < 1 or past.shape[0] <= 8:
            return super().compute(past, update, write_indices)
        ax, starts = self.windows(past, update, write_indices)
        pos = np.asarray(starts)[:, None] + np.arange(update.shape[ax])  # (batch, seq_len)
        pos %= max(past.shape[ax], 1)  # only circular windows wrap; linear ones were checked
        out = past.copy()
        # A view of ``out`` with the batch dim first and the sequence dim second (the dims
        # between them move behind it); writing into the view writes into ``out``.
        np.moveaxis(out, ax, 1)[np.arange(past.shape[0])[:, None], pos] = np.moveaxis(update, ax, 1)
        return (out,)
