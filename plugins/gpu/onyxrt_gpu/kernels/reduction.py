"""GPU kernels: ReduceSum, ReduceMean, ReduceMax, ReduceMin and ArgMax.

Reduce* take their axes as an attribute in old versions and as an optional int64 input
from ReduceSum-13 and the other ops' version 18, where ``noop_with_empty_axes`` also
appears; axes are read on the host (constant axes once, at creation; the axes input is a
registered host input, so the plan keeps it in host memory). Reducing over an
empty set gives the operation's identity (0 for sums, NaN for the mean, -inf or the
dtype's minimum for max). float16 sums and means accumulate in float32; integer sums wrap
around and integer means truncate toward zero.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo

from . import registry
from ._common import BOOL, NUMERIC, GpuKernel, bad, host_array, norm_axis, widen

__all__ = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ArgMax"]


def _int_attr(info: KernelInfo, name: str, default: int) -> int:
    value = info.attr(name, default)
    if not isinstance(value, (int, np.integer)):
        raise bad(info, f"attribute {name!r} must be an int, got {value!r}")
    return int(value)


def _flag_attr(info: KernelInfo, name: str, default: int) -> bool:
    value = _int_attr(info, name, default)
    if value not in (0, 1):
        raise bad(info, f"attribute {name!r} must be 0 or 1, got {value}")
    return bool(value)


class _Reduce(GpuKernel):
    """Shared axes/keepdims handling; subclasses implement ``_reduce(x, axes, keepdims)``.

    ``axes`` given to ``_reduce`` is a tuple of non-negative axes, not empty (the
    ``noop_with_empty_axes`` case never reaches it).
    """

    #: The first since_version that takes axes as an input.
    axes_input_since = 18

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.keepdims = _flag_attr(info, "keepdims", 1)
        self.axes_as_input = info.since_version >= self.axes_input_since
        self.const_axes: list[int] | None = None
        if self.axes_as_input:
            self.noop = _flag_attr(info, "noop_with_empty_axes", 0)
            c = info.constant(1)
            if c is not None:
                self.const_axes = self._axes_values(c)
        else:
            self.noop = False
            axes = info.attr("axes")
            if axes is not None and (
                not isinstance(axes, list) or not all(isinstance(a, int) for a in axes)
            ):
                raise bad(info, "attribute 'axes' must be a list of ints")
            self.const_axes = axes

    def _axes_values(self, axes: Any) -> list[int]:
        arr = host_array(axes)
        if arr.ndim > 1 or (arr.size and arr.dtype.kind not in "iu"):
            raise ValueError(
                f"{self.info.op_type}: 'axes' must be a 1-D int64 tensor, "
                f"got {arr.dtype} of shape {arr.shape}"
            )
        return [int(a) for a in arr.reshape(-1)]

    def _axes(self, ndim: int, axes: Any) -> tuple[int, ...]:
        if self.const_axes is not None or not self.axes_as_input:
            values = self.const_axes
        else:
            values = None if axes is None else self._axes_values(axes)
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

    def _reduce(self, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
        raise NotImplementedError

    def _empty(self, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
        """The result of reducing over an empty set of elements (the identity)."""
        raise NotImplementedError

    def compute(self, data, axes=None):
        x = data
        ax = self._axes(x.ndim, axes)
        if not ax and (self.noop or x.ndim == 0):
            return (x.copy(),)
        if x.size == 0 or any(x.shape[a] == 0 for a in ax):
            y = self._empty(x, ax, self.keepdims)
        else:
            y = self._reduce(x, ax, self.keepdims)
        return (y.astype(x.dtype, copy=False),)

    def _out_shape(self, x: Any, axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
        if keepdims:
            return tuple(1 if i in axes else n for i, n in enumerate(x.shape))
        return tuple(n for i, n in enumerate(x.shape) if i not in axes)


@registry.register("ReduceSum", since=(1, 11, 13), types={"T": NUMERIC},
                   host_inputs=(1,))
class ReduceSum(_Reduce):
    """Sum over axes (axes an input from version 13)."""

    axes_input_since = 13

    def _reduce(self, x, axes, keepdims):
        if x.dtype.kind in "iub":
            return x.sum(axis=axes, keepdims=keepdims, dtype=x.dtype)
        return widen(x).sum(axis=axes, keepdims=keepdims)

    def _empty(self, x, axes, keepdims):
        return self.cp.zeros(self._out_shape(x, axes, keepdims), dtype=x.dtype)


@registry.register("ReduceMean", since=(1, 11, 13, 18), types={"T": NUMERIC},
                   host_inputs=(1,))
class ReduceMean(_Reduce):
    """Mean over axes; integer means truncate toward zero; an empty set gives NaN."""

    def _reduce(self, x, axes, keepdims):
        cp = self.cp
        n = math.prod(x.shape[a] for a in axes)
        if x.dtype.kind in "iu":
            s = x.sum(axis=axes, keepdims=keepdims, dtype=x.dtype)
            if x.dtype.kind == "u":
                return s // n
            q = cp.abs(s) // n
            return cp.where(s < 0, -q, q)
        w = widen(x)
        return w.sum(axis=axes, keepdims=keepdims) / n

    def _empty(self, x, axes, keepdims):
        shape = self._out_shape(x, axes, keepdims)
        if x.dtype.kind in "iu":
            return self.cp.zeros(shape, dtype=x.dtype)
        return self.cp.full(shape, np.nan, dtype=x.dtype)


class _ReduceExtreme(_Reduce):
    """Max or min; an empty set gives the identity (-inf/dtype min, or +inf/dtype max)."""

    largest = True

    def _reduce(self, x, axes, keepdims):
        if self.largest:
            return x.max(axis=axes, keepdims=keepdims)
        return x.min(axis=axes, keepdims=keepdims)

    def _empty(self, x, axes, keepdims):
        dt = x.dtype
        if dt.kind == "b":
            fill: Any = not self.largest
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            fill = info.min if self.largest else info.max
        else:
            fill = -np.inf if self.largest else np.inf
        return self.cp.full(self._out_shape(x, axes, keepdims), fill, dtype=dt)


@registry.register("ReduceMax", since=(1, 11, 12, 13, 18, 20), types={"T": NUMERIC | BOOL},
                   host_inputs=(1,))
class ReduceMax(_ReduceExtreme):
    """Max over axes (bool from version 20, False < True)."""

    largest = True


@registry.register("ReduceMin", since=(1, 11, 12, 13, 18, 20), types={"T": NUMERIC | BOOL},
                   host_inputs=(1,))
class ReduceMin(_ReduceExtreme):
    """Min over axes (bool from version 20, False < True)."""

    largest = False


@registry.register("ArgMax", since=(1, 11, 12, 13), types={"T": NUMERIC})
class ArgMax(GpuKernel):
    """Index (int64) of the first, or with select_last_index the last, maximum along axis."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = _int_attr(info, "axis", 0)
        self.keepdims = _flag_attr(info, "keepdims", 1)
        self.select_last = info.since_version >= 12 and _flag_attr(info, "select_last_index", 0)

    def compute(self, data):
        cp = self.cp
        x = data
        axis = norm_axis(self.axis, x.ndim)
        n = x.shape[axis]
        if n == 0:
            raise ValueError(f"ArgMax: cannot reduce over axis {axis} of size 0")
        if self.select_last:
            idx = (n - 1) - cp.flip(x, axis).argmax(axis=axis)
        else:
            idx = x.argmax(axis=axis)
        idx = idx.astype(cp.int64, copy=False)
        if self.keepdims:
            idx = cp.expand_dims(idx, axis)
        return (idx,)
