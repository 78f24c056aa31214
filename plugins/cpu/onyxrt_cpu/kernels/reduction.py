"""CPU kernels: TopK. The other reductions — Reduce*, ArgMax/ArgMin and CumSum — come
from the operator library (:mod:`onyxrt_ops.reduction`), bound over numpy in
``kernels/__init__``.

The library's kernels were measured no slower than the numpy kernels they replace
(``kernel.compute`` on float32 unless noted, thread CPU time, best of 25 interleaved
rounds): ReduceMean over the last axis of [2, 8] 6.4 us before, 5.7 us from the library
(constant axes input: 7.8 → 5.6; axes read at run time 7.8 → 8.0), of [1, 128, 768] 24.0
→ 23.1; ReduceSum [2, 8] 6.2 → 4.3 (int32 6.1 → 3.3); ReduceMax [2, 8] 6.4 → 3.2, [1, 128,
768] 15.7 → 16.7 (one ``np.max`` either way); ReduceLogSumExp [2, 8] 12.9 → 10.5; ArgMax
[2, 8] 3.7 → 1.8; CumSum [2, 8] 3.2 → 2.6, exclusive and reversed 9.3 → 7.2. Constant axes
are normalized once instead of on every call, and ``np.errstate`` (~1 us) is entered only
where a floating-point exception can arise. So no numpy override is kept.

TopK stays here: its order (sorted, equal values lower index first, NaN as the largest)
needs the standard's ``argsort(..., stable=True)``, which the GPU provider's CuPy lacks
(14.2's ``argsort`` takes no ``stable``; the simulated CuPy its tests run on has no
``argsort``), so the library cannot define it for every backend yet. Small k on a long axis takes ``argpartition`` (numpy only), redoing the rows where ties
at the k-th value make it ambiguous.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry

__all__ = ["TopK"]

_BF16 = np_dtype(TensorProto.BFLOAT16)
_HALF_TYPES = (np.dtype(np.float16), _BF16)


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _widen(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 → float32; other types unchanged."""
    return x.astype(np.float32) if x.dtype in _HALF_TYPES else x


def _int_attr(info: KernelInfo, name: str, default: int) -> int:
    value = info.attr(name, default)
    if not isinstance(value, (int, np.integer)):
        raise InvalidGraph(f"{_node(info)}: attribute {name!r} must be an int, got {value!r}")
    return int(value)


def _flag_attr(info: KernelInfo, name: str, default: int) -> bool:
    value = _int_attr(info, name, default)
    if value not in (0, 1):
        raise InvalidGraph(f"{_node(info)}: attribute {name!r} must be 0 or 1, got {value}")
    return bool(value)


def _norm_axis(op: str, axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {ndim}")
    return axis + ndim if axis < 0 else axis


def _scalar_int(op: str, name: str, value: object) -> int:
    arr = np.asarray(value)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise ValueError(
            f"{op}: input {name!r} must hold one integer, got {arr.dtype} of shape {arr.shape}"
        )
    return int(arr.reshape(-1)[0])


# ---------------------------------------------------------------------- TopK


@registry.register("TopK", since=(1, 10, 11, 24))
class TopK(Kernel):
    """The k largest (or smallest) values along axis and their int64 indices, sorted;
    equal values keep the lower index first."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = _int_attr(info, "axis", -1)
        self.largest = True
        if info.since_version >= 11:
            self.largest = _flag_attr(info, "largest", 1)
            _flag_attr(info, "sorted", 1)  # validated; results are always sorted
        self.k_attr: int | None = None
        if info.since_version < 10:
            if info.attr("k") is None:
                raise InvalidGraph(f"{_node(info)}: attribute 'k' is required")
            self.k_attr = _int_attr(info, "k", 0)

    def compute(self, x, k=None):
        x = np.asarray(x)
        if self.k_attr is not None:
            kk = self.k_attr
        else:
            if k is None:
                raise ValueError("TopK: input 'K' is required")
            kk = _scalar_int("TopK", "K", k)
        axis = _norm_axis("TopK", self.axis, x.ndim)
        n = x.shape[axis]
        if not 0 <= kk <= n:
            raise ValueError(f"TopK: k={kk} is out of range for axis {axis} of size {n}")
        if kk == 0 or x.size == 0:
            shape = x.shape[:axis] + (kk,) + x.shape[axis + 1 :]
            return (np.empty(shape, dtype=x.dtype), np.empty(shape, dtype=np.int64))
        # Work on 2D (rows, n) with the axis last.
        xm = np.moveaxis(x, axis, -1)
        lead = xm.shape[:-1]
        xm = xm.reshape(-1, n)
        keys = _widen(xm)
        if n >= 64 and kk <= n // 4:
            idx = _topk_partial(keys, kk, self.largest)
        else:
            idx = _sorted_order(keys, self.largest)[:, :kk]
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
