"""CPU kernels: reductions (Reduce*), ArgMax/ArgMin, CumSum and TopK.

Reduce* take their axes as an attribute in old versions and as an optional int64 input from
ReduceSum-13 and the other Reduce ops' version 18, where ``noop_with_empty_axes`` also
appears. Reducing over an empty set gives the operation's identity (0 for sums, 1 for
products, -inf or the dtype's minimum for max, -inf for the log-sums, NaN for the mean).

float16/bfloat16 data are accumulated in float32 and cast back; integer data keep their type
(sums wrap around on overflow) and float-valued formulas (ReduceL2, ReduceLogSum,
ReduceLogSumExp) are evaluated in float64 and truncated back to the integer type.
"""

from __future__ import annotations

import math

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry

_BF16 = np_dtype(TensorProto.BFLOAT16)
_HALF_TYPES = (np.dtype(np.float16), _BF16)


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _widen(x: np.ndarray) -> np.ndarray:
    """float16/bfloat16 → float32; other types unchanged."""
    return x.astype(np.float32) if x.dtype in _HALF_TYPES else x


def _as_float(x: np.ndarray) -> np.ndarray:
    """A float array for formulas that need one: half → float32, ints/bool → float64."""
    if x.dtype in _HALF_TYPES:
        return x.astype(np.float32)
    if x.dtype.kind != "f":
        return x.astype(np.float64)
    return x


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


# -------------------------------------------------------------------- Reduce*


class _Reduce(Kernel):
    """Shared axes/keepdims handling; subclasses implement ``_reduce(x, axes, keepdims)``.

    ``axes`` passed to ``_reduce`` is a tuple of non-negative axes; ``()`` means the
    ``noop_with_empty_axes`` case (the elementwise part of the op, nothing reduced).
    """

    #: The first since_version that takes axes as an input.
    axes_input_since = 18

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.keepdims = _flag_attr(info, "keepdims", 1)
        self.axes_as_input = info.since_version >= self.axes_input_since
        if self.axes_as_input:
            self.noop = _flag_attr(info, "noop_with_empty_axes", 0)
            self.attr_axes: list[int] | None = None
        else:
            self.noop = False
            axes = info.attr("axes")
            if axes is not None and (
                not isinstance(axes, list) or not all(isinstance(a, int) for a in axes)
            ):
                raise InvalidGraph(f"{_node(info)}: attribute 'axes' must be a list of ints")
            self.attr_axes = axes

    def _axes(self, ndim: int, axes: object) -> tuple[int, ...]:
        if not self.axes_as_input:
            values = self.attr_axes
        elif axes is None:
            values = None
        else:
            arr = np.asarray(axes)
            if arr.ndim > 1 or (arr.size and arr.dtype.kind not in "iu"):
                raise ValueError(
                    f"{self.info.op_type}: 'axes' must be a 1-D int64 tensor, "
                    f"got {arr.dtype} of shape {arr.shape}"
                )
            values = [int(a) for a in arr.reshape(-1)]
        if not values:
            return () if self.noop else tuple(range(ndim))
        norm = set()
        for a in values:
            if not -ndim <= a < max(ndim, 1):
                raise ValueError(
                    f"{self.info.op_type}: axis {a} is out of range for an input of rank {ndim}"
                )
            norm.add(a + ndim if a < 0 else a)
        if ndim == 0:
            return ()
        return tuple(sorted(norm))

    def _reduce(self, x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
        raise NotImplementedError

    def compute(self, data, axes=None):
        x = np.asarray(data)
        ax = self._axes(x.ndim, axes)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            y = self._reduce(x, ax, self.keepdims)
        return (np.asarray(y).astype(x.dtype, copy=False),)


def _count(x: np.ndarray, axes: tuple[int, ...]) -> int:
    return math.prod(x.shape[a] for a in axes)


def _int_sum(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)


@registry.register("ReduceSum", since=(1, 11, 13))
class ReduceSum(_Reduce):
    """Sum over axes (axes an input from version 13)."""

    axes_input_since = 13

    def _reduce(self, x, axes, keepdims):
        if x.dtype.kind in "iub":
            return _int_sum(x, axes, keepdims)
        return np.sum(_widen(x), axis=axes, keepdims=keepdims)


@registry.register("ReduceMean", since=(1, 11, 13, 18))
class ReduceMean(_Reduce):
    """Mean over axes; integer means truncate toward zero; an empty set gives NaN."""

    def _reduce(self, x, axes, keepdims):
        n = _count(x, axes)
        if x.dtype.kind in "iu":
            s = _int_sum(x, axes, keepdims)
            if n == 0:
                return np.zeros_like(s)
            q = np.abs(s) // x.dtype.type(n) if x.dtype.kind == "i" else s // x.dtype.type(n)
            return np.where(s < 0, -q, q) if x.dtype.kind == "i" else q
        w = _widen(x)
        return np.sum(w, axis=axes, keepdims=keepdims) / w.dtype.type(n)


class _ReduceExtreme(_Reduce):
    """Max or min; an empty set gives the identity (-inf/dtype min, or +inf/dtype max)."""

    func = staticmethod(np.max)
    largest = True

    def _reduce(self, x, axes, keepdims):
        w = _widen(x)
        if w.dtype.kind == "b":
            initial = not self.largest
        elif w.dtype.kind in "iu":
            info = np.iinfo(w.dtype)
            initial = info.min if self.largest else info.max
        else:
            initial = -np.inf if self.largest else np.inf
        return self.func(w, axis=axes, keepdims=keepdims, initial=initial)


@registry.register("ReduceMax", since=(1, 11, 12, 13, 18, 20))
class ReduceMax(_ReduceExtreme):
    """Max over axes (bool from version 20, False < True)."""

    func = staticmethod(np.max)
    largest = True


@registry.register("ReduceMin", since=(1, 11, 12, 13, 18, 20))
class ReduceMin(_ReduceExtreme):
    """Min over axes (bool from version 20, False < True)."""

    func = staticmethod(np.min)
    largest = False


@registry.register("ReduceProd", since=(1, 11, 13, 18))
class ReduceProd(_Reduce):
    """Product over axes; an empty set gives 1."""

    def _reduce(self, x, axes, keepdims):
        if x.dtype.kind in "iu":
            return np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
        return np.prod(_widen(x), axis=axes, keepdims=keepdims)


@registry.register("ReduceL1", since=(1, 11, 13, 18))
class ReduceL1(_Reduce):
    """Sum of absolute values over axes."""

    def _reduce(self, x, axes, keepdims):
        if x.dtype.kind in "iu":
            return _int_sum(np.abs(x), axes, keepdims)
        return np.sum(np.abs(_widen(x)), axis=axes, keepdims=keepdims)


@registry.register("ReduceL2", since=(1, 11, 13, 18))
class ReduceL2(_Reduce):
    """Square root of the sum of squares over axes."""

    def _reduce(self, x, axes, keepdims):
        w = _as_float(x)
        return np.sqrt(np.sum(w * w, axis=axes, keepdims=keepdims))


@registry.register("ReduceSumSquare", since=(1, 11, 13, 18))
class ReduceSumSquare(_Reduce):
    """Sum of squares over axes."""

    def _reduce(self, x, axes, keepdims):
        if x.dtype.kind in "iu":
            return _int_sum(x * x, axes, keepdims)
        w = _widen(x)
        return np.sum(w * w, axis=axes, keepdims=keepdims)


@registry.register("ReduceLogSum", since=(1, 11, 13, 18, 28))
class ReduceLogSum(_Reduce):
    """log(sum(x)) over axes; an empty set gives -inf."""

    def _reduce(self, x, axes, keepdims):
        return np.log(np.sum(_as_float(x), axis=axes, keepdims=keepdims))


@registry.register("ReduceLogSumExp", since=(1, 11, 13, 18, 28))
class ReduceLogSumExp(_Reduce):
    """log(sum(exp(x))) over axes, shifted by the max for stability; an empty set gives -inf."""

    def _reduce(self, x, axes, keepdims):
        w = _as_float(x)
        m = np.max(w, axis=axes, keepdims=True, initial=-np.inf)
        m = np.where(np.isfinite(m), m, 0)
        y = np.log(np.sum(np.exp(w - m), axis=axes, keepdims=True)) + m
        return y if keepdims else np.squeeze(y, axis=axes)


# --------------------------------------------------------------- ArgMax/Min


class _ArgReduce(Kernel):
    """Index (int64) of the first, or with select_last_index the last, extreme along axis."""

    func = staticmethod(np.argmax)

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = _int_attr(info, "axis", 0)
        self.keepdims = _flag_attr(info, "keepdims", 1)
        self.select_last = info.since_version >= 12 and _flag_attr(info, "select_last_index", 0)

    def compute(self, data):
        x = _widen(np.asarray(data))
        op = self.info.op_type
        axis = _norm_axis(op, self.axis, x.ndim)
        n = x.shape[axis]
        if n == 0:
            raise ValueError(f"{op}: cannot reduce over axis {axis} of size 0")
        if self.select_last:
            idx = (n - 1) - self.func(np.flip(x, axis), axis=axis)
        else:
            idx = self.func(x, axis=axis)
        idx = np.asarray(idx, dtype=np.int64)
        if self.keepdims:
            idx = np.expand_dims(idx, axis)
        return (idx,)


@registry.register("ArgMax", since=(1, 11, 12, 13))
class ArgMax(_ArgReduce):
    """Index of the maximum along axis."""

    func = staticmethod(np.argmax)


@registry.register("ArgMin", since=(1, 11, 12, 13))
class ArgMin(_ArgReduce):
    """Index of the minimum along axis."""

    func = staticmethod(np.argmin)


# -------------------------------------------------------------------- CumSum


@registry.register("CumSum", since=(11, 14))
class CumSum(Kernel):
    """Cumulative sum along a runtime axis; ``exclusive`` shifts by one, ``reverse`` flips."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.exclusive = _flag_attr(info, "exclusive", 0)
        self.reverse = _flag_attr(info, "reverse", 0)

    def compute(self, x, axis):
        x = np.asarray(x)
        ax = _norm_axis("CumSum", _scalar_int("CumSum", "axis", axis), x.ndim)
        w = _widen(x)
        if self.reverse:
            w = np.flip(w, ax)
        cs = np.cumsum(w, axis=ax, dtype=w.dtype)
        if self.exclusive:
            shifted = np.zeros_like(cs)
            dst = [slice(None)] * x.ndim
            src = [slice(None)] * x.ndim
            dst[ax] = slice(1, None)
            src[ax] = slice(None, -1)
            shifted[tuple(dst)] = cs[tuple(src)]
            cs = shifted
        if self.reverse:
            cs = np.flip(cs, ax)
        return (np.ascontiguousarray(cs).astype(x.dtype, copy=False),)


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
