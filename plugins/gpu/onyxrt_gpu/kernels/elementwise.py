"""GPU kernels: comparisons, logic, Where and Cast.

Arithmetic, the math functions, Max/Min/Sum/Mean and the bitwise operators come from the
operator library (:mod:`onyxrt_ops.elementwise`), bound over CuPy in ``kernels/__init__``;
no CuPy-specific fast path is needed there (the library computes a constant exponent 2, 3
or 0.5 of Pow by multiplication or ``sqrt`` on every provider).

Binary operators broadcast like numpy from opset 7 on; older versions (Equal-1, ...) use
ONNX's legacy ``broadcast``/``axis`` attributes (:func:`legacy_align`, which only reshapes).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.kernels import KernelInfo

from . import registry
from ._common import (
    BOOL,
    NUMERIC,
    TENSORS,
    GpuKernel,
    bad,
)

__all__ = ["legacy_align"]



def legacy_align(a: Any, b: Any, broadcast: int, axis: int | None) -> Any:
    """Reshape ``b`` for the pre-opset-7 broadcasting rule (``broadcast``/``axis``).

    Without ``broadcast`` both shapes must be equal. With it, ``b`` is a scalar, a
    one-element tensor, or a contiguous run of ``a``'s dims starting at ``axis`` (suffix
    when unset). Only shapes are inspected; ``b`` is reshaped (a view).
    """
    if not broadcast:
        if tuple(a.shape) != tuple(b.shape):
            raise ValueError(
                f"shapes {a.shape} and {b.shape} differ and the 'broadcast' attribute is not "
                "set (this opset version only broadcasts with broadcast=1)"
            )
        return b
    if b.size == 1:
        return b.reshape(())
    if b.ndim > a.ndim:
        raise ValueError(f"cannot broadcast shape {b.shape} onto {a.shape}: rank is larger")
    start = a.ndim - b.ndim if axis is None else (axis + a.ndim if axis < 0 else axis)
    if start < 0 or start + b.ndim > a.ndim or tuple(a.shape[start : start + b.ndim]) != tuple(
        b.shape
    ):
        raise ValueError(
            f"cannot broadcast shape {b.shape} onto {a.shape} at axis {start} "
            "(legacy broadcasting needs a contiguous match)"
        )
    return b.reshape(tuple(b.shape) + (1,) * (a.ndim - start - b.ndim))


class _Binary(GpuKernel):
    """Two-input op; parses the legacy broadcast attributes of versions before 7."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.legacy = info.since_version < 7
        self.broadcast = int(info.attr("broadcast", 0))
        axis = info.attr("axis")
        self.axis = None if axis is None else int(axis)

    def align(self, a: Any, b: Any) -> Any:
        """``b`` reshaped for legacy broadcasting (old versions), else ``b``."""
        return legacy_align(a, b, self.broadcast, self.axis) if self.legacy else b


def _same_dtype(r: Any, dt: np.dtype[Any]) -> Any:
    return r if r.dtype == dt else r.astype(dt)


# ----------------------------------------------------------------- comparisons, logic


class _Compare(_Binary):
    name = "equal"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn = getattr(self.cp, self.name)

    def compute(self, a, b):
        return (self.fn(a, self.align(a, b)),)


def _compare(op: str, name: str, since: tuple[int, ...], types: Any, doc: str) -> type[_Compare]:
    cls = type(op, (_Compare,), {"name": name, "__doc__": doc, "__module__": __name__})
    registry.register(op, since=since, types={"T": types})(cls)
    return cls


Equal = _compare("Equal", "equal", (1, 7, 11, 13, 19), TENSORS, "C = (A == B).")
Less = _compare("Less", "less", (1, 7, 9, 13), NUMERIC, "C = (A < B).")
Greater = _compare("Greater", "greater", (1, 7, 9, 13), NUMERIC, "C = (A > B).")
And = _compare("And", "logical_and", (1, 7), BOOL, "C = A and B.")


@registry.register("Not", since=1, types={"T": BOOL})
class Not(GpuKernel):
    """Y = not X."""

    def compute(self, x):
        return (self.cp.logical_not(x),)


@registry.register("Where", since=(9, 16), types={"T": TENSORS})
class Where(GpuKernel):
    """Output = X where condition is true, else Y (numpy broadcasting of all three)."""

    def compute(self, condition, x, y):
        cp = self.cp
        if condition.dtype != np.bool_:
            condition = condition.astype(bool)
        return (_same_dtype(cp.where(condition, x, y), x.dtype),)


# -------------------------------------------------------------------------------- Cast


@registry.register("Cast", since=(1, 6, 9, 13, 19, 21, 23, 24, 25, 28),
                   types={"T1": TENSORS, "T2": TENSORS})
class Cast(GpuKernel):
    """Convert to the numeric (or bool) element type ``to``; floats truncate toward zero
    when cast to integers; anything nonzero is True."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        to = info.attr("to")
        if to is None:
            raise bad(info, "the required attribute 'to' is missing")
        if isinstance(to, str):  # Cast-1 names the type: 'FLOAT', 'INT64', ...
            try:
                to = TensorProto.DataType.Value(to.strip().upper())
            except ValueError:
                raise bad(info, f"unknown element type to={to!r}") from None
        try:
            self.to = np_dtype(int(to))
        except TypeError:
            raise bad(info, f"attribute to={to} is not a tensor element type") from None
        if self.to not in TENSORS:
            raise NotImplementedError(
                f"Cast to {self.to} is not supported on the GPU (numeric and bool types only)"
            )

    def compute(self, x):
        if x.dtype == self.to:
            return (x,)
        return (x.astype(self.to),)
