"""CPU kernels: a numpy fast path of the library's TopK. The reductions — Reduce*,
ArgMax/ArgMin, CumSum, CumProd and TopK — come from the operator library
(:mod:`onyxrt_ops.reduction`), bound over numpy in ``kernels/__init__``.

The library's kernels were measured no slower than the numpy kernels they replace
(``kernel.compute`` on float32 unless noted, thread CPU time, best of 25 interleaved
rounds): ReduceMean over the last axis of [2, 8] 6.4 us before, 5.7 us from the library
(constant axes input: 7.8 → 5.6; axes read at run time 7.8 → 8.0), of [1, 128, 768] 24.0
→ 23.1; ReduceSum [2, 8] 6.2 → 4.3 (int32 6.1 → 3.3); ReduceMax [2, 8] 6.4 → 3.2, [1, 128,
768] 15.7 → 16.7 (one ``np.max`` either way); ReduceLogSumExp [2, 8] 12.9 → 10.5; ArgMax
[2, 8] 3.7 → 1.8; CumSum [2, 8] 3.2 → 2.6, exclusive and reversed 9.3 → 7.2. Constant axes
are normalized once instead of on every call, and ``np.errstate`` (~1 us) is entered only
where a floating-point exception can arise. So no numpy override is kept for those.

TopK keeps one for small k on a long axis (n >= 64, k <= n/4): ``argpartition`` (numpy
only) picks the candidates, redoing the rows where ties at the k-th value make it
ambiguous; the rest is the library's full stable sort.
(TopK ``kernel.compute`` on float32, best of 7: [2, 8] k=2 19.9 us before, 14.9 us now;
[8, 32] k=16 21.9 → 16.8; [64, 1024] k=512 3676 → 3652; through the override [1, 1000]
k=5 49.2 → 49.3, [64, 1024] k=10 568 → 568.)
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt_ops import library

from . import registry
from ._backend import BACKEND

__all__ = ["TopK"]

_HALF_TYPES = (np.dtype(np.float16), np_dtype(TensorProto.BFLOAT16))


def _widen(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 → float32; other types unchanged."""
    return x.astype(np.float32) if x.dtype in _HALF_TYPES else x


# ---------------------------------------------------------------------- TopK


@registry.register("TopK", since=(1, 10, 11, 24))
class TopK(library.kernel("TopK", 24, BACKEND)):
    """The library's TopK, with small k on a long axis by ``argpartition`` (numpy only)."""

    def compute(self, x, k=None):
        kk, axis = self.k_axis(x, k)
        n = x.shape[axis]
        if not (n >= 64 and 0 < kk <= n // 4 and x.size):
            return super().compute(x, k)
        # Work on 2D (rows, n) with the axis last.
        xm = np.moveaxis(x, axis, -1)
        lead = xm.shape[:-1]
        xm = xm.reshape(-1, n)
        idx = _topk_partial(_widen(xm), kk, self.largest)
        values = np.take_along_axis(xm, idx, axis=-1)
        values = np.moveaxis(values.reshape(lead + (kk,)), -1, axis)
        idx = np.moveaxis(idx.reshape(lead + (kk,)), -1, axis)
        return (np.ascontiguousarray(values), np.ascontiguousarray(idx, dtype=np.int64))


def _sorted_order(keys: np.ndarray, largest: bool) -> np.ndarray:
    """Indices sorting each row of ``keys`` (largest first or smallest first), equal keys in
    increasing index order."""
    if not largest:
        return np.argsort(keys, axis=-1, kind="stable")
    # A stable ascending sort of the reversed row, read backwards, orders values descending
    # with ties in increasing original index.
    n = keys.shape[-1]
    rev = np.argsort(keys[:, ::-1], axis=-1, kind="stable")
    return (n - 1) - rev[:, ::-1]


def _topk_partial(keys: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """Top-k indices per row for small k: argpartition, then order the k candidates.

    argpartition may pick any of several keys equal to the k-th value; rows where that
    matters (more such keys than picked, or a NaN threshold) are redone with a full sort.
    """
    n = keys.shape[-1]
    if largest:
        cand = np.argpartition(keys, n - k, axis=-1)[:, n - k :]
    else:
        cand = np.argpartition(keys, k - 1, axis=-1)[:, :k]
    cand.sort(axis=-1)  # increasing index, so the stable ordering below breaks ties by index
    cand_keys = np.take_along_axis(keys, cand, axis=-1)
    kth = (cand_keys.min(axis=-1) if largest else cand_keys.max(axis=-1))[:, None]
    picked = np.count_nonzero(cand_keys == kth, axis=-1)
    present = np.count_nonzero(keys == kth, axis=-1)
    redo = (present != picked) | (kth[:, 0] != kth[:, 0])
    idx = np.take_along_axis(cand, _sorted_order(cand_keys, largest), axis=-1)
    if redo.any():
        idx[redo] = _sorted_order(keys[redo], largest)[:, :k]
    return idx
