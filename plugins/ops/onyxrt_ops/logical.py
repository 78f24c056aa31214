"""Comparisons, boolean logic and Where, written once over an array namespace.

Equal, Less, LessOrEqual, Greater, GreaterOrEqual; And, Or, Xor, Not; Where — every ONNX
version of each. Every output except Where's is bool.

Comparisons and And/Or/Xor before opset 7 use ONNX's legacy ``broadcast``/``axis``
attributes (:class:`~onyxrt_ops.elementwise.LegacyBinary`); later versions broadcast like
numpy. bfloat16 operands are compared in float32 (exact: every bfloat16 is a float32).

Left with the providers, not expressible with the standard's functions: strings. Equal-19
and Where take string tensors, which the standard has no dtype for; the operators here
are declared without them, so a backend refuses string nodes at capability time, and a
provider that holds strings (the CPU) registers its own kernel for them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from onyxrt.dtypes import ALL_TENSOR_TYPES
from onyxrt.kernels import KernelInfo

from .elementwise import Elementwise, LegacyBinary
from .library import dtype_name, library

#: Every element type but strings (the standard has no string dtype).
_NO_STRINGS = frozenset(np.dtype(t) for t in ALL_TENSOR_TYPES if np.dtype(t).kind not in "OSU")


class Compare(LegacyBinary):
    """C = fn(A, B) as bool: :attr:`function` names the namespace's function."""

    function = "equal"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn: Callable[[Any, Any], Any] = getattr(self.xp, self.function)
        self.bool = self.backend.dtype(np.bool_)

    def compute(self, a, b):
        if self.legacy:
            b = self.align(a, b)
        if dtype_name(a.dtype) == "bfloat16":
            a, b = self.widen(a), self.widen(b)
        return (self.result(self.fn(a, b), self.bool),)


def _binary(op: str, since: tuple[int, ...], function: str, doc: str) -> type[Compare]:
    cls = type(op, (Compare,), {"function": function, "__doc__": doc, "__module__": __name__})
    library.define(op, since, types={"T": _NO_STRINGS})(cls)
    return cls


Equal = _binary("Equal", (1, 7, 11, 13, 19), "equal", "C = (A == B).")
Less = _binary("Less", (1, 7, 9, 13), "less", "C = (A < B).")
LessOrEqual = _binary("LessOrEqual", (12, 16), "less_equal", "C = (A <= B).")
Greater = _binary("Greater", (1, 7, 9, 13), "greater", "C = (A > B).")
GreaterOrEqual = _binary("GreaterOrEqual", (12, 16), "greater_equal", "C = (A >= B).")
And = _binary("And", (1, 7), "logical_and", "C = A and B.")
Or = _binary("Or", (1, 7), "logical_or", "C = A or B.")
Xor = _binary("Xor", (1, 7), "logical_xor", "C = A xor B.")


@library.define("Not", 1)
class Not(Elementwise):
    """Y = not X."""

    def compute(self, x):
        return (self.result(self.xp.logical_not(x), x.dtype),)


@library.define("Where", (9, 16), types={"T": _NO_STRINGS})
class Where(Elementwise):
    """Output = X where condition is true, else Y (broadcasting all three), in X's type."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.bool = self.backend.dtype(np.bool_)

    def compute(self, condition, x, y):
        if condition.dtype != self.bool:
            condition = self.xp.astype(condition, self.bool)
        return (self.result(self.xp.where(condition, x, y), x.dtype),)
