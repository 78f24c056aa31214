"""CPU kernels: the string cases of comparisons and Where, which the operator library
(:mod:`onyxrt_ops.logical`, bound over numpy in ``kernels/__init__``) cannot express.

Every other comparison, And/Or/Xor/Not and Where come from the library: the former numpy
kernels were no faster (4-element float32 Less 1.03 us before, 0.78 us from the library;
[64, 1024] float32 within noise at ~7 us), so no numpy fast path is kept.

Overrides of library operators, each subclassing the library's kernel and registered
without type restrictions, so string tensors reach them:

* Equal-19 — strings compare by text (``b'x'`` equals ``'x'``); other types go to the
  library's kernel;
* Where — string X and Y (numpy's ``where`` selects object elements as any other), and
  a copy-and-overwrite path for numeric X and Y where one has the output's shape.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND

__all__ = ["Equal", "Where"]


def _text(x: np.ndarray) -> np.ndarray:
    """Decode bytes elements so b'x' and 'x' compare equal."""
    if x.dtype.kind == "S":
        return np.char.decode(x, "utf-8")
    if x.dtype.kind == "O" and any(isinstance(v, bytes) for v in x.ravel().tolist()):
        flat = [v.decode("utf-8") if isinstance(v, bytes) else v for v in x.ravel().tolist()]
        return np.array(flat, dtype=object).reshape(x.shape)
    return x


@registry.register("Equal", since=19)
class Equal(library.kernel("Equal", 19, BACKEND)):
    """C = (A == B); strings compare by text, other types as the library's Equal."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        types = [t.elem_type if t is not None else None for t in info.input_types[:2]]
        if types and all(t and t != TensorProto.STRING for t in types):
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
