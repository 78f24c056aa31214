"""CPU kernels: the string cases of comparisons and Where, which the operator library
(:mod:`onyxrt_ops.logical`, bound over numpy in ``kernels/__init__``) cannot express, and
the comparisons of two numbers as one ufunc.

And/Or/Xor/Not come from the library. The comparisons (Equal, Greater, GreaterOrEqual,
Less, LessOrEqual) subclass the library's kernels: where both operands have one numpy
number type, known when the node is built (opset 7 on), ``compute`` is the ufunc alone —
the library's per-call legacy, bfloat16 and result-type checks were half of a small
comparison's time (a [1, 1] float32 Greater inside a run 1.1 → 0.56 µs; skl2onnx's
IsolationForest has 100 such nodes: 670 → 602 µs a run). Other types go to the library's
compute.

Overrides of library operators, each registered without type restrictions, so string
tensors reach them:

* Equal — strings compare by text (``b'x'`` equals ``'x'``);
* Where — string X and Y (numpy's ``where`` selects object elements as any other), and
  a copy-and-overwrite path for numeric X and Y where one has the output's shape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND
from .elementwise import _rank_aligned, _ufunc_compute, _ufunc_single_output

__all__ = ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Where"]


def _text(x: np.ndarray) -> np.ndarray:
    """Decode bytes elements so b'x' and 'x' compare equal."""
    if x.dtype.kind == "S":
        return np.char.decode(x, "utf-8")
    if x.dtype.kind == "O" and any(isinstance(v, bytes) for v in x.ravel().tolist()):
        flat = [v.decode("utf-8") if isinstance(v, bytes) else v for v in x.ravel().tolist()]
        return np.array(flat, dtype=object).reshape(x.shape)
    return x


def _numeric_pair(info: KernelInfo) -> bool:
    """Both operands of one numpy number type (bool, integers, IEEE floats — not strings or
    bfloat16), known when the node is built, and numpy's broadcasting (opset 7 on)."""
    types = [t.elem_type if t is not None else None for t in info.input_types[:2]]
    return (info.since_version >= 7 and len(types) == 2 and bool(types[0]) and types[0] == types[1]
            and types[0] not in (TensorProto.STRING, TensorProto.BFLOAT16)
            and np_dtype(types[0]).kind in "biuf")


def _fast_comparison(op: str, versions: tuple[int, ...], ufunc: Any, doc: str) -> type:
    """The library's ``op`` kernel whose compute is the ufunc alone for a numeric pair
    (:func:`_numeric_pair`): its per-call legacy, bfloat16 and result-type checks are most
    of a small comparison's time (a [N, 1] Greater in an IsolationForest conversion, one of
    100 such nodes)."""
    base = library.kernel(op, versions[-1], BACKEND)

    def __init__(self: Any, info: KernelInfo) -> None:
        base.__init__(self, info)
        if _numeric_pair(info):  # (comparisons raise no floating-point errors, NaN included)
            self.compute = _rank_aligned(_ufunc_compute(ufunc, 2, quiet=False), info)
            self.single_output = _ufunc_single_output(ufunc, 2, info)

    cls = type(op, (base,), {"__init__": __init__, "__doc__": doc, "__module__": __name__})
    return registry.register(op, since=versions)(cls)


Greater = _fast_comparison("Greater", (1, 7, 9, 13), np.greater, "C = (A > B) (one ufunc for numbers).")
Less = _fast_comparison("Less", (1, 7, 9, 13), np.less, "C = (A < B) (one ufunc for numbers).")
GreaterOrEqual = _fast_comparison("GreaterOrEqual", (12, 16), np.greater_equal,
                                  "C = (A >= B) (one ufunc for numbers).")
LessOrEqual = _fast_comparison("LessOrEqual", (12, 16), np.less_equal, "C = (A <= B) (one ufunc for numbers).")


@registry.register("Equal", since=(1, 7, 11, 13, 19))
class Equal(library.kernel("Equal", 19, BACKEND)):
    """C = (A == B); strings compare by text, other types as the library's Equal (one
    ufunc for numbers)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        types = [t.elem_type if t is not None else None for t in info.input_types[:2]]
        if _numeric_pair(info):
            self.compute = _rank_aligned(_ufunc_compute(np.equal, 2, quiet=False), info)  # type: ignore[method-assign]
            self.single_output = _ufunc_single_output(np.equal, 2, info)
        elif types and all(t and t != TensorProto.STRING for t in types):
            # Known not to be strings when built: the library's compute, without the check.
            self.compute = super().compute  # type: ignore[method-assign]

    def compute(self, a, b):
        if a.dtype.kind in "OSU" or b.dtype.kind in "OSU":
            return (np.asarray(np.equal(_text(a), _text(b)), dtype=bool),)
        return super().compute(a, b)


@registry.register("Where", since=(9, 16))
class Where(library.kernel("Where", 16, BACKEND)):
    """Output = X where condition is true, else Y (numpy broadcasting of all three); the
    library's Where, registered for every type so that string X and Y run too. Where one
    of X and Y already has the output's shape (a mask over attention scores, a NaN guard
    after a softmax) and both have one numeric type, the output is a copy of it with the
    other written under the (broadcast) condition: [1, 12, 128, 128] float32 with a scalar
    48 us against numpy's ``where`` 136; with 4-byte elements, a full-shaped condition and
    the other operand one value, one compiled pass (:func:`native.where_scalar`)."""

    def compute(self, condition, x, y):
        if (isinstance(x, np.ndarray) and isinstance(y, np.ndarray) and x.dtype == y.dtype
                and x.dtype.kind in "biuf" and condition.dtype == np.bool_):
            if condition.size <= 64 and x.size <= 64 and y.size <= 64:
                return (np.where(condition, x, y),)  # a few values: numpy's call is the cheapest
            fast = native.where_scalar(condition, x, y)
            if fast is not None:
                return (fast,)
            shape = np.broadcast_shapes(condition.shape, x.shape, y.shape)
            if y.shape == shape or x.shape == shape:
                # a copy of the full-shaped operand, the other written where it is chosen
                full, other, mask = (y, x, condition) if y.shape == shape else (x, y, np.logical_not(condition))
                out = full.copy()
                np.copyto(out, other, where=mask)
                return (out,)
        return super().compute(condition, x, y)
