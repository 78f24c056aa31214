"""CPU kernels: comparisons, boolean logic and Where.

Comparisons and And/Or/Xor before opset 7 use ONNX's legacy ``broadcast``/``axis``
attributes (see :func:`onyxrt_cpu.kernels.elementwise.legacy_align`); later versions
broadcast like numpy. Every output except Where's is bool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onyxrt.kernels import Kernel, KernelInfo

from . import registry
from .elementwise import legacy_align

_NATIVE = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def _comparable(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Operands numpy compares directly: bfloat16/float8 widen to float32, text to str."""
    if a.dtype.kind == "V" and a.dtype not in _NATIVE:
        a = a.astype(np.float32)
    if b.dtype.kind == "V" and b.dtype not in _NATIVE:
        b = b.astype(np.float32)
    if a.dtype.kind in "OS" or b.dtype.kind in "OS":
        a, b = _text(a), _text(b)
    return a, b


def _text(x: np.ndarray) -> np.ndarray:
    """Decode bytes elements so b'x' and 'x' compare equal."""
    if x.dtype.kind == "S":
        return np.char.decode(x, "utf-8")
    if x.dtype.kind == "O" and any(isinstance(v, bytes) for v in x.ravel().tolist()):
        flat = [v.decode("utf-8") if isinstance(v, bytes) else v for v in x.ravel().tolist()]
        return np.array(flat, dtype=object).reshape(x.shape)
    return x


class _Binary(Kernel):
    """Two-input elementwise op with legacy broadcasting before opset 7."""

    ufunc: Callable[..., Any] = np.equal

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.legacy = info.since_version < 7
        self.broadcast = int(info.attr("broadcast", 0))
        axis = info.attr("axis")
        self.axis = None if axis is None else int(axis)

    def compute(self, a, b):
        a = np.asarray(a)
        b = np.asarray(b)
        if self.legacy:
            b = legacy_align(a, b, self.broadcast, self.axis)
        a, b = _comparable(a, b)
        r = self.ufunc(a, b)
        return (np.asarray(r, dtype=bool),)


@registry.register("Equal", since=(1, 7, 11, 13, 19))
class Equal(_Binary):
    """C = (A == B); strings compare by text."""

    ufunc = np.equal


@registry.register("Less", since=(1, 7, 9, 13))
class Less(_Binary):
    """C = (A < B)."""

    ufunc = np.less


@registry.register("LessOrEqual", since=(12, 16))
class LessOrEqual(_Binary):
    """C = (A <= B)."""

    ufunc = np.less_equal


@registry.register("Greater", since=(1, 7, 9, 13))
class Greater(_Binary):
    """C = (A > B)."""

    ufunc = np.greater


@registry.register("GreaterOrEqual", since=(12, 16))
class GreaterOrEqual(_Binary):
    """C = (A >= B)."""

    ufunc = np.greater_equal


@registry.register("And", since=(1, 7))
class And(_Binary):
    """C = A and B."""

    ufunc = np.logical_and


@registry.register("Or", since=(1, 7))
class Or(_Binary):
    """C = A or B."""

    ufunc = np.logical_or


@registry.register("Xor", since=(1, 7))
class Xor(_Binary):
    """C = A xor B."""

    ufunc = np.logical_xor


@registry.register("Not", since=1)
class Not(Kernel):
    """Y = not X."""

    def compute(self, x):
        return (np.asarray(np.logical_not(np.asarray(x)), dtype=bool),)


@registry.register("Where", since=(9, 16))
class Where(Kernel):
    """Output = X where condition is true, else Y (numpy broadcasting of all three)."""

    def compute(self, condition, x, y):
        c = np.asarray(condition)
        if c.dtype != np.bool_:
            c = c.astype(bool)
        x = np.asarray(x)
        y = np.asarray(y)
        r = np.asarray(np.where(c, x, y))
        if r.dtype != x.dtype:
            r = r.astype(x.dtype)
        return (r,)
