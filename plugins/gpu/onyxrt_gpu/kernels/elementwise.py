"""GPU kernels: elementwise arithmetic, math functions, comparisons, logic, Where, Cast,
Min and Max.

Binary operators broadcast like numpy from opset 7 on; older versions (Add-1/6, Pow-1,
Equal-1, ...) use ONNX's legacy ``broadcast``/``axis`` attributes (:func:`legacy_align`,
which only reshapes). Integer division truncates toward zero as in C. float16 math runs
natively except Erf, which CuPy evaluates in float32 (rounded back once).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.kernels import KernelInfo

from . import registry
from ._common import (
    BOOL,
    FLOATS,
    NUMERIC,
    SIGNED_INTS,
    TENSORS,
    GpuKernel,
    bad,
)

__all__ = ["legacy_align"]

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)


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


# -------------------------------------------------------------------- Add Sub Mul Div

_ARITH_VERSIONS = (1, 6, 7, 13, 14)
_ARITH_TYPES = {"T": NUMERIC}


class _Arith(_Binary):
    name = "add"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn = getattr(self.cp, self.name)

    def compute(self, a, b):
        b = self.align(a, b)
        return (_same_dtype(self.fn(a, b), a.dtype),)


@registry.register("Add", since=_ARITH_VERSIONS, types=_ARITH_TYPES)
class Add(_Arith):
    """C = A + B (integers wrap around)."""

    name = "add"


@registry.register("Sub", since=_ARITH_VERSIONS, types=_ARITH_TYPES)
class Sub(_Arith):
    """C = A - B (integers wrap around)."""

    name = "subtract"


@registry.register("Mul", since=_ARITH_VERSIONS, types=_ARITH_TYPES)
class Mul(_Arith):
    """C = A * B (integers wrap around)."""

    name = "multiply"


@registry.register("Div", since=_ARITH_VERSIONS, types=_ARITH_TYPES)
class Div(_Binary):
    """C = A / B; integer division truncates toward zero like C (x / 0 gives 0)."""

    def compute(self, a, b):
        cp = self.cp
        b = self.align(a, b)
        dt = a.dtype
        if dt.kind == "f":
            return (_same_dtype(cp.true_divide(a, b), dt),)
        q = cp.floor_divide(a, b)
        if dt.kind == "u":
            return (q,)
        # floor → trunc: add one where the division was inexact and the signs differ.
        inexact = cp.remainder(a, b) != 0
        q += (inexact & ((a < 0) != (b < 0))).astype(dt)
        return (q,)


# ------------------------------------------------------------------------------- Pow


@registry.register("Pow", since=(1, 7, 12, 13, 15),
                   types={"T": FLOATS | {np.dtype(np.int32), np.dtype(np.int64)}, "T1": NUMERIC})
class Pow(_Binary):
    """Z = X ** Y with the base's type; a constant exponent 2, 1 or 0.5 takes a fast path.

    Integer bases with integer exponents stay exact; a negative exponent gives what a C
    cast of the real power gives (1 for base 1, +-1 for base -1, else 0).
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        y = info.constant(1)
        self.const_exp: float | None = None
        if y is not None and np.size(y) == 1 and not self.legacy:
            self.const_exp = float(np.asarray(y).reshape(-1)[0])

    def compute(self, x, y):
        cp = self.cp
        dt = x.dtype
        e = self.const_exp
        if dt.kind == "f" and e is not None:
            if e == 2.0:
                return (x * x,)
            if e == 1.0:
                return (x.copy(),)
            if e == 0.5:
                return (cp.sqrt(x),)
        y = self.align(x, y)
        if dt.kind == "f":
            if y.dtype == dt:
                return (cp.power(x, y),)
            # Mixed types: compute in float64 and round once, like the CPU provider.
            return (cp.power(x.astype(_F64), y.astype(_F64)).astype(dt),)
        if y.dtype.kind == "f":
            return (cp.power(x.astype(_F64), y.astype(_F64)).astype(dt),)
        yi = y.astype(dt)
        if y.dtype.kind == "u" or y.dtype.kind == "b":
            return (cp.power(x, yi),)
        neg = yi < 0
        r = cp.power(x, cp.where(neg, 0, yi).astype(dt))
        odd = (cp.abs(yi) % 2).astype(bool)
        negres = cp.where(x == 1, 1, cp.where(x == -1, cp.where(odd, -1, 1), 0)).astype(dt)
        return (cp.where(neg, negres, r),)


# ------------------------------------------------------------------------ unary math


class _Unary(GpuKernel):
    name = "negative"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn = getattr(self.cp, self.name)

    def compute(self, x):
        return (_same_dtype(self.fn(x), x.dtype),)


def _unary(op: str, name: str, types: frozenset[np.dtype[Any]], doc: str) -> type[_Unary]:
    cls = type(op, (_Unary,), {"name": name, "__doc__": doc, "__module__": __name__})
    registry.register(op, since=(1, 6, 13), types={"T": types})(cls)
    return cls


Sqrt = _unary("Sqrt", "sqrt", FLOATS, "Y = sqrt(X); NaN for negative inputs.")
Neg = _unary("Neg", "negative", FLOATS | SIGNED_INTS, "Y = -X (integers wrap around).")
Reciprocal = _unary("Reciprocal", "reciprocal", FLOATS, "Y = 1 / X.")
Abs = _unary("Abs", "abs", NUMERIC, "Y = |X|.")
Exp = _unary("Exp", "exp", FLOATS, "Y = exp(X).")
Log = _unary("Log", "log", FLOATS, "Y = ln(X).")


def special() -> Any:
    """``cupyx.scipy.special`` of the CuPy in use (real or simulated)."""
    import importlib

    return importlib.import_module("cupyx.scipy.special")


@registry.register("Erf", since=(9, 13), types={"T": FLOATS})
class Erf(GpuKernel):
    """Y = erf(X) (``cupyx.scipy.special.erf``; float16 is computed in float32)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.erf = special().erf

    def compute(self, x):
        return (_same_dtype(self.erf(x), x.dtype),)


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


# --------------------------------------------------------------------------- Min, Max


class _Variadic(GpuKernel):
    name = "maximum"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn: Callable[..., Any] = getattr(self.cp, self.name)

    def compute(self, *inputs):
        arrays = [v for v in inputs if v is not None]
        if not arrays:
            raise ValueError(f"{self.info.op_type} needs at least one input")
        acc = arrays[0]
        for v in arrays[1:]:
            acc = self.fn(acc, v)
        return (_same_dtype(acc, arrays[0].dtype),)


_VARIADIC_VERSIONS = (1, 6, 8, 12, 13)


@registry.register("Max", since=_VARIADIC_VERSIONS, types={"T": NUMERIC})
class Max(_Variadic):
    """Elementwise maximum of all inputs (NaN propagates), broadcasting from opset 8."""

    name = "maximum"


@registry.register("Min", since=_VARIADIC_VERSIONS, types={"T": NUMERIC})
class Min(_Variadic):
    """Elementwise minimum of all inputs (NaN propagates), broadcasting from opset 8."""

    name = "minimum"
