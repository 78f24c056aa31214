"""Reductions, written once over an array namespace.

ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceSumSquare, ReduceL1,
ReduceL2, ReduceLogSum and ReduceLogSumExp; ArgMax and ArgMin; CumSum and CumProd; TopK —
every ONNX version of each.

Reduce* take their axes as an attribute in old versions and as an optional int64 input from
ReduceSum-13 and the other operators' version 18, where ``noop_with_empty_axes`` also
appears (with it, empty axes reduce nothing: only the elementwise part of the operator, such
as ReduceL1's absolute value, is applied). Constant axes (the attribute, or an initializer)
are normalized once per input rank. Reducing over an empty set gives the operation's
identity: 0 for sums, 1 for products, -inf or the dtype's minimum for max (+inf or its
maximum for min; False/True for bool), -inf for the log-sums, NaN for the mean (0 for an
integer mean).

float16/bfloat16 data are accumulated in float32 and rounded once at the end. Integer data
keep their type — sums wrap around on overflow, means truncate toward zero — and the
float-valued formulas (ReduceL2, ReduceLogSum, ReduceLogSumExp) are evaluated in float64 and
truncated back to the integer type. ArgMax/ArgMin return int64 indices of the first extreme
(the last with ``select_last_index``: the standard's argmax has no such option, so the axis
is flipped). CumSum's and CumProd's ``exclusive`` shifts the results by one, ``reverse``
runs them from the end. TopK orders equal values lower index first and NaN as the largest,
through the standard's ``argsort(..., stable=True)`` (descending as a stable sort of the
reversed axis read backwards, which keeps that tie order).

Attribute errors are :class:`~onyxrt.errors.InvalidGraph` naming the node; errors in the
data (an axis out of range, an axes input that is not 1-D integers) are ``ValueError``.

CumSum and CumProd call ``cumulative_sum``/``cumulative_prod`` (the standard's names), or
``cumsum``/``cumprod`` where a namespace predates them (CuPy before 14). CuPy's ``argsort``
takes no ``stable`` keyword (its sort is always stable), so TopK calls it without one there.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.float_errors import quiet_float_errors
from onyxrt.kernels import KernelInfo

from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_INTEGERS = frozenset(f"{s}int{bits}" for s in ("", "u") for bits in (8, 16, 32, 64))
_HALF = frozenset({"float16", "bfloat16"})

#: numpy reports IEEE exceptions as warnings; the IEEE results are the ONNX semantics
#: (a no-op inside a session's run, which ignores them already).
_quiet = quiet_float_errors


def _norm_axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{op}: axis {axis} is out of range for an input of rank {rank}")
    return axis + rank if axis < 0 else axis


def _array(kernel: OpKernel, y: Any, like: Any) -> Any:
    """``y`` as an array (numpy makes scalars of 0-d results) of ``like``'s dtype."""
    if y.ndim == 0:
        y = kernel.xp.asarray(y)
    return kernel.narrow(y, like)


# ----------------------------------------------------------------------------- Reduce*


class Reduce(OpKernel):
    """Base of the Reduce* operators: axes, keepdims and empty sets. Subclasses give
    :meth:`reduce` (over a non-empty set) and :attr:`identity` (of an empty one)."""

    #: The first version that takes axes as an input.
    axes_input_since = 18
    #: The result of reducing an empty set.
    identity: float = 0
    #: Whether the formula can raise a floating-point exception on float data (overflow).
    inexact = True
    #: Whether integers are computed in float64 (so they can too: log 0, casting -inf).
    float_formula = False

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.keepdims = self.flag_attr("keepdims", 1)
        self.noop = False
        #: Host numpy: reductions call the ufunc's reduce directly (numpy's np.sum/np.prod
        #: wrappers cost more than the reduction itself on the small tensors of
        #: scikit-learn conversions).
        self._host = self.xp is np
        #: The axes when known at build time (the attribute, a constant input or none given),
        #: normalized once per input rank into ``by_rank``; by_rank None: read on every call.
        self.fixed: Any = None
        self.by_rank: dict[int, tuple[int, ...]] | None = {}
        if info.since_version >= self.axes_input_since:
            self.noop = self.flag_attr("noop_with_empty_axes", 0)
            self.fixed = info.constant(1)
            if self.fixed is None and info.has_input(1):
                self.by_rank = None
        else:
            self.fixed = info.attr("axes")
            if self.fixed is not None and (
                not isinstance(self.fixed, list) or not all(isinstance(a, int) for a in self.fixed)
            ):
                raise InvalidGraph(f"{self.where()}: attribute 'axes' must be a list of ints")

    def _values(self, axes: Any) -> list[int] | None:
        if axes is None or isinstance(axes, list):
            return axes
        arr = self.host(axes)
        if arr.ndim > 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError(f"{self.info.op_type}: 'axes' must be a 1-D int64 tensor, "
                             f"got {arr.dtype} of shape {arr.shape}")
        return [int(a) for a in arr.reshape(-1)]

    def _normalized(self, rank: int, values: list[int] | None) -> tuple[int, ...]:
        if not values:
            return () if self.noop else tuple(range(rank))
        for a in values:
            if not -rank <= a < max(rank, 1):
                raise ValueError(f"{self.info.op_type}: axis {a} is out of range for an input of rank {rank}")
        return tuple(sorted({a + rank if a < 0 else a for a in values})) if rank else ()

    def axes(self, rank: int, axes: Any) -> tuple[int, ...]:
        """The sorted non-negative axes to reduce; ``()``: none (noop_with_empty_axes)."""
        if self.by_rank is None:
            return self._normalized(rank, self._values(axes))
        found = self.by_rank.get(rank)
        if found is None:  # constant axes: normalized once per rank
            found = self.by_rank[rank] = self._normalized(rank, self._values(self.fixed))
        return found

    def reduce(self, x: Any, axes: tuple[int, ...], name: str) -> Any:
        """The reduction of non-empty ``x`` (of dtype ``name``) over ``axes``, keepdims as
        the attribute says."""
        raise NotImplementedError

    def empty(self, name: str) -> Any:
        """The identity for dtype ``name``, a scalar ``full`` takes with that dtype (or a
        float, truncated for an integer dtype)."""
        return self.identity

    def compute(self, data, axes=None):
        ax = self.axes(data.ndim, axes)
        name = dtype_name(data.dtype)
        if data.size == 0:
            shape = [1 if i in ax else n for i, n in enumerate(data.shape) if self.keepdims or i not in ax]
            return (self._fill(tuple(shape), self.empty(name), data.dtype, name),)
        if self.inexact and (self.float_formula or name not in _INTEGERS):
            with _quiet():
                return (_array(self, self.reduce(data, ax, name), data),)
        return (_array(self, self.reduce(data, ax, name), data),)

    def _fill(self, shape: tuple[int, ...], value: Any, dtype: Any, name: str) -> Any:
        xp = self.xp
        if isinstance(value, float) and name in _INTEGERS:
            # A float identity of an integer formula (log 0 = -inf), truncated as numbers are.
            with _quiet():
                return xp.astype(xp.full(shape, value, dtype=self.backend.dtype(np.float64)), dtype)
        return xp.full(shape, value, dtype=dtype)

    def sum(self, w: Any, axes: tuple[int, ...], keepdims: bool | None = None) -> Any:
        """Sum in ``w``'s own dtype (the standard widens small integers to int64), keeping
        the reduced axes as the attribute says unless ``keepdims`` is given."""
        keep = bool(self.keepdims) if keepdims is None else keepdims
        if self._host:
            return np.add.reduce(w, axis=axes, dtype=w.dtype, keepdims=keep)
        return self.xp.sum(w, axis=axes, dtype=w.dtype, keepdims=keep)

    def wide(self, x: Any, name: str) -> Any:
        """``x`` (of dtype ``name``) with half precision widened to float32."""
        return self.widen(x) if name in _HALF else x

    def as_float(self, x: Any, name: str) -> Any:
        """``x`` for float formulas: half → float32, integers → float64, floats as they are."""
        if name in _INTEGERS:
            return self.xp.astype(x, self.backend.dtype(np.float64))
        return self.wide(x, name)


@library.define("ReduceSum", (1, 11, 13), host_inputs=(1,))
class ReduceSum(Reduce):
    """Sum over axes (axes an input from version 13)."""

    axes_input_since = 13

    def reduce(self, x, axes, name):
        return self.sum(self.wide(x, name), axes)


@library.define("ReduceMean", (1, 11, 13, 18), host_inputs=(1,))
class ReduceMean(Reduce):
    """Mean over axes; integer means truncate toward zero; an empty set gives NaN."""

    def empty(self, name):
        return 0 if name in _INTEGERS else math.nan

    def reduce(self, x, axes, name):
        n = math.prod([x.shape[a] for a in axes])
        s = self.sum(self.wide(x, name), axes)
        if name not in _INTEGERS:
            return s / n
        if name[0] == "u":
            return s // n
        q = self.xp.abs(s) // n
        return self.xp.where(s < 0, -q, q)


class ReduceExtreme(Reduce):
    """Max or min; bool as any/all (False < True); an empty set gives the identity."""

    largest = True
    inexact = False

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        xp = self.xp
        self.fn = xp.max if self.largest else xp.min
        self.bool_fn = xp.any if self.largest else xp.all
        if self._host:  # the ufuncs np.max/np.any wrap (NaN propagates alike)
            self.fn = (np.maximum if self.largest else np.minimum).reduce
            self.bool_fn = (np.logical_or if self.largest else np.logical_and).reduce

    def empty(self, name):
        if name == "bool":
            return not self.largest
        if name in _INTEGERS:
            info = np.iinfo(np.dtype(name))
            return info.min if self.largest else info.max
        return -math.inf if self.largest else math.inf

    def reduce(self, x, axes, name):
        fn = self.bool_fn if name == "bool" else self.fn
        return fn(self.wide(x, name), axis=axes, keepdims=bool(self.keepdims))


@library.define("ReduceMax", (1, 11, 12, 13, 18, 20), host_inputs=(1,))
class ReduceMax(ReduceExtreme):
    """Max over axes (bool from version 20, False < True)."""

    largest = True


@library.define("ReduceMin", (1, 11, 12, 13, 18, 20), host_inputs=(1,))
class ReduceMin(ReduceExtreme):
    """Min over axes (bool from version 20, False < True)."""

    largest = False


@library.define("ReduceProd", (1, 11, 13, 18), host_inputs=(1,))
class ReduceProd(Reduce):
    """Product over axes; an empty set gives 1."""

    identity = 1

    def reduce(self, x, axes, name):
        w = self.wide(x, name)
        if self._host:
            return np.multiply.reduce(w, axis=axes, dtype=w.dtype, keepdims=bool(self.keepdims))
        return self.xp.prod(w, axis=axes, dtype=w.dtype, keepdims=self.keepdims)


@library.define("ReduceL1", (1, 11, 13, 18), host_inputs=(1,))
class ReduceL1(Reduce):
    """Sum of absolute values over axes."""

    def reduce(self, x, axes, name):
        return self.sum(self.xp.abs(self.wide(x, name)), axes)


@library.define("ReduceL2", (1, 11, 13, 18), host_inputs=(1,))
class ReduceL2(Reduce):
    """Square root of the sum of squares over axes."""

    float_formula = True

    def reduce(self, x, axes, name):
        w = self.as_float(x, name)
        return self.xp.sqrt(self.sum(w * w, axes))


@library.define("ReduceSumSquare", (1, 11, 13, 18), host_inputs=(1,))
class ReduceSumSquare(Reduce):
    """Sum of squares over axes."""

    def reduce(self, x, axes, name):
        w = self.wide(x, name)
        return self.sum(w * w, axes)


@library.define("ReduceLogSum", (1, 11, 13, 18, 28), host_inputs=(1,))
class ReduceLogSum(Reduce):
    """log(sum(x)) over axes; an empty set gives -inf."""

    identity = -math.inf
    float_formula = True

    def reduce(self, x, axes, name):
        return self.xp.log(self.sum(self.as_float(x, name), axes))


@library.define("ReduceLogSumExp", (1, 11, 13, 18, 28), host_inputs=(1,))
class ReduceLogSumExp(ReduceLogSum):
    """log(sum(exp(x))) over axes, shifted by the max for stability; an empty set gives -inf."""

    def reduce(self, x, axes, name):
        xp = self.xp
        w = self.as_float(x, name)
        # (over host numpy, the ufunc np.max wraps: the same reduction)
        m = np.maximum.reduce(w, axis=axes, keepdims=True) if self._host else xp.max(w, axis=axes, keepdims=True)
        m = xp.where(xp.isfinite(m), m, 0.0)  # all -inf (or inf, NaN): no shift
        y = xp.log(self.sum(xp.exp(w - m), axes, keepdims=True)) + m
        return y if self.keepdims else xp.squeeze(y, axis=axes)


# --------------------------------------------------------------------------- ArgMax/Min


class ArgReduce(OpKernel):
    """Index (int64) of the first, or with select_last_index the last, extreme along axis."""

    function = "argmax"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = self.int_attr("axis", 0)
        self.keepdims = self.flag_attr("keepdims", 1)
        self.select_last = info.since_version >= 12 and self.flag_attr("select_last_index", 0)
        self.fn = getattr(self.xp, self.function)
        self.int64 = self.backend.dtype(np.int64)

    def compute(self, data):
        xp = self.xp
        x = self.widen(data)
        axis = _norm_axis(self.info.op_type, self.axis, x.ndim)
        n = x.shape[axis]
        if n == 0:
            raise ValueError(f"{self.info.op_type}: cannot reduce over axis {axis} of size 0")
        if not self.select_last and type(x) is np.ndarray and xp is np:
            # (the ndarray's method: np.argmax's dispatch wrapper is a third of a
            # classifier's label step)
            idx = np.asarray(getattr(x, self.function)(axis=axis, keepdims=bool(self.keepdims)))
            return (idx if idx.dtype == np.int64 else idx.astype(np.int64),)
        if self.select_last:
            idx = (n - 1) - self.fn(xp.flip(x, axis=axis), axis=axis, keepdims=self.keepdims)
        else:
            idx = self.fn(x, axis=axis, keepdims=self.keepdims)
        if idx.ndim == 0:
            idx = xp.asarray(idx)
        return (idx if idx.dtype == self.int64 else xp.astype(idx, self.int64),)


@library.define("ArgMax", (1, 11, 12, 13))
class ArgMax(ArgReduce):
    """Index of the maximum along axis."""

    function = "argmax"


@library.define("ArgMin", (1, 11, 12, 13))
class ArgMin(ArgReduce):
    """Index of the minimum along axis."""

    function = "argmin"


# ---------------------------------------------------------------------- CumSum CumProd


class Cumulative(OpKernel):
    """A running sum or product along a runtime axis; ``exclusive`` shifts it by one (the
    vacated end holds the identity), ``reverse`` runs it from the end. :attr:`functions`
    name the standard's function and numpy's (CuPy before 14, the simulated CuPy)."""

    functions = ("cumulative_sum", "cumsum")
    identity = 0

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.exclusive = self.flag_attr("exclusive", 0)
        self.reverse = self.flag_attr("reverse", 0)
        self.scan = getattr(self.xp, self.functions[0], None) or getattr(self.xp, self.functions[1])

    def compute(self, x, axis):
        xp = self.xp
        op = self.info.op_type
        arr = self.host(axis)
        if arr.size != 1 or arr.dtype.kind not in "iu":
            raise ValueError(f"{op}: input 'axis' must hold one integer, got {arr.dtype} of shape {arr.shape}")
        ax = _norm_axis(op, int(arr.reshape(-1)[0]), x.ndim)
        w = self.widen(x)
        if self.reverse:
            cs = xp.flip(self.scan(xp.flip(w, axis=ax), axis=ax, dtype=w.dtype), axis=ax)
        else:
            cs = self.scan(w, axis=ax, dtype=w.dtype)
        if self.exclusive and cs.shape[ax]:
            # Each value moves one place on (back, reversed); the vacated end holds the identity.
            head = (slice(None),) * ax
            dst, src = (slice(None, -1), slice(1, None)) if self.reverse else (slice(1, None), slice(None, -1))
            out = xp.full(cs.shape, self.identity, dtype=cs.dtype)
            out[head + (dst, ...)] = cs[head + (src, ...)]
            cs = out
        elif self.reverse:
            return (xp.astype(cs, x.dtype, copy=True),)  # a contiguous copy of the flipped view
        return (self.narrow(cs, x),)


@library.define("CumSum", (11, 14), host_inputs=(1,))
class CumSum(Cumulative):
    """Cumulative sum along a runtime axis; ``exclusive`` shifts by one, ``reverse`` runs
    from the end."""


@library.define("CumProd", 26, host_inputs=(1,))
class CumProd(Cumulative):
    """Cumulative product along a runtime axis (integers wrap around); ``exclusive`` shifts
    by one, ``reverse`` runs from the end."""

    functions = ("cumulative_prod", "cumprod")
    identity = 1


# -------------------------------------------------------------------------------- TopK


def _stable_argsort(xp: Any, x: Any, axis: int) -> Any:
    """A stable ascending argsort along ``axis``."""
    try:
        return xp.argsort(x, axis=axis, stable=True)
    except TypeError:  # CuPy has no ``stable`` keyword: its sorts are always stable
        return xp.argsort(x, axis=axis)


@library.define("TopK", (1, 10, 11, 24), host_inputs=(1,))
class TopK(OpKernel):
    """The k largest (or smallest) values along axis and their int64 indices, sorted;
    equal values keep the lower index first, NaN counts as the largest value."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = self.int_attr("axis", -1)
        self.largest = True
        if info.since_version >= 11:
            self.largest = self.flag_attr("largest", 1)
            self.flag_attr("sorted", 1)  # validated; results are always sorted
        self.k_attr: int | None = None
        if info.since_version < 10:
            if info.attr("k") is None:
                raise InvalidGraph(f"{self.where()}: attribute 'k' is required")
            self.k_attr = self.int_attr("k", 0)

    def k_axis(self, x: Any, k: Any) -> tuple[int, int]:
        """(k, the normalized axis), checked against ``x``."""
        if self.k_attr is not None:
            kk = self.k_attr
        else:
            if k is None:
                raise ValueError("TopK: input 'K' is required")
            arr = self.host(k)
            if arr.size != 1 or arr.dtype.kind not in "iu":
                raise ValueError(f"TopK: input 'K' must hold one integer, got {arr.dtype} of shape {arr.shape}")
            kk = int(arr.reshape(-1)[0])
        axis = _norm_axis("TopK", self.axis, x.ndim)
        if not 0 <= kk <= x.shape[axis]:
            raise ValueError(f"TopK: k={kk} is out of range for axis {axis} of size {x.shape[axis]}")
        return kk, axis

    def order(self, keys: Any, axis: int) -> Any:
        """Indices sorting ``keys`` along ``axis`` (largest first when :attr:`largest`),
        equal keys in increasing index order."""
        xp = self.xp
        if not self.largest:
            return _stable_argsort(xp, keys, axis)
        # A stable ascending sort of the reversed axis, read backwards, orders the values
        # descending with ties in increasing original index (and NaN, sorted last, first).
        rev = _stable_argsort(xp, xp.flip(keys, axis=axis), axis)
        return (keys.shape[axis] - 1) - xp.flip(rev, axis=axis)

    def compute(self, x, k=None):
        xp = self.xp
        kk, axis = self.k_axis(x, k)
        i64 = self.backend.dtype(np.int64)
        if kk == 0 or math.prod(x.shape) == 0:
            shape = x.shape[:axis] + (kk,) + x.shape[axis + 1 :]
            return xp.empty(shape, dtype=x.dtype), xp.empty(shape, dtype=i64)
        head = (slice(None),) * axis
        idx = xp.astype(self.order(self.widen(x), axis)[head + (slice(0, kk), ...)], i64, copy=True)
        return xp.take_along_axis(x, idx, axis=axis), idx
