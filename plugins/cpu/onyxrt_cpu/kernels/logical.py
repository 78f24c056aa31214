"""CPU kernels: comparisons, boolean logic and Where.

Comparisons and And/Or/Xor before opset 7 use ONNX's legacy ``broadcast``/``axis``
attributes (see :func:`onyxrt_cpu.kernels.elementwise.legacy_align`); later versions
broadcast like numpy. Every output except Where's is bool.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onyxrt.kernels import Kernel

from . import registry
from .elementwise import _LegacyBinary

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


class _Binary(_LegacyBinary):
    """Two-input elementwise op with legacy broadcasting before opset 7; bool output."""

    ufunc: Callable[..., Any] = np.equal

    def compute(self, a, b):
        a = np.asarray(a)
        b = self._align(a, np.asarray(b))
        a, b = _comparable(a, b)
        r = self.ufunc(a, b)
        return (np.asarray(r, dtype=bool),)


def _binary(
    name: str, since: tuple[int, ...], ufunc: Callable[..., Any], doc: str
) -> type[_Binary]:
    cls = type(name, (_Binary,), {"ufunc": ufunc, "__doc__": doc, "__module__": __name__})
    registry.register(name, since=since)(cls)
    return cls


Equal = _binary("Equal", (1, 7, 11, 13, 19), np.equal, "C = (A == B); strings compare by text.")
Less = _binary("Less", (1, 7, 9, 13), np.less, "C = (A < B).")
LessOrEqual = _binary("LessOrEqual", (12, 16), np.less_equal, "C = (A <= B).")
Greater = _binary("Greater", (1, 7, 9, 13), np.greater, "C = (A > B).")
GreaterOrEqual = _binary("GreaterOrEqual", (12, 16), np.greater_equal, "C = (A >= B).")
And = _binary("And", (1, 7), np.logical_and, "C = A and B.")
Or = _binary("Or", (1, 7), np.logical_or, "C = A or B.")
Xor = _binary("Xor", (1, 7), np.logical_xor, "C = A xor B.")


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
