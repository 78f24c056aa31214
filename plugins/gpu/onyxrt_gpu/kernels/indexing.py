"""GPU kernels: the CuPy fast paths of Gather, GatherElements and GatherND, over the
operator library's (:mod:`onyxrt_ops.indexing`, bound over CuPy in ``kernels/__init__``).

Slice (a view of its input, its bounds read on the host), the scatters, OneHot, NonZero
and Unique come from the library.

The three gathers subclass the library's kernels and skip its index check: reading the
indices' minimum and maximum back would synchronize with the device on every call (an
embedding lookup; torch exports of BERT compute position ids with GatherElements), and a
read back cannot be part of a CUDA graph. Negative indices are wrapped on the device;
out-of-range ones are not detected there (as in onnxruntime's CUDA kernels; CuPy's indexing
wraps them, so no memory outside the tensor is read). Constant indices are checked on the
host and uploaded once, when the kernel is built.
"""

from __future__ import annotations

import math
from typing import Any

from onyxrt_ops import library

from . import registry
from ._common import BACKEND, INTS, TENSORS

__all__ = ["Gather", "GatherElements", "GatherND"]


@registry.register("Gather", since=(1, 11, 13), types={"T": TENSORS, "Tind": INTS})
class Gather(library.kernel("Gather", 13, BACKEND)):
    """The library's Gather without the host-side index check; host indices at run time
    are copied to the device (a transfer)."""

    def wrapped(self, indices: Any, dim: int, what: str) -> Any:
        return self.xp.asarray(indices)

    def wrap_constant(self, dim: int) -> Any:
        return self.const_indices  # uploaded once, when built

    def take(self, data: Any, idx: Any, axis: int) -> Any:
        cp = self.xp.module  # CuPy itself, whose take takes indices of any rank
        return cp.take(data, idx, axis=axis)


#: GatherElements' index types (the standard's: int32, int64).
_INDICES = frozenset(t for t in INTS if t.itemsize >= 4 and t.kind == "i")


def _wrapped_on_device(xp: Any, i64: Any, indices: Any, dim: int) -> Any:
    """int64 ``indices`` with negatives counted back from ``dim``, on the device (no check)."""
    idx = xp.asarray(indices)
    if idx.dtype != i64:
        idx = xp.astype(idx, i64)
    return xp.where(idx < 0, idx + dim, idx)


@registry.register("GatherElements", since=(11, 13), types={"T": TENSORS, "Tind": _INDICES})
class GatherElements(library.kernel("GatherElements", 13, BACKEND)):
    """The library's GatherElements without the host-side index check."""

    def wrapped(self, indices: Any, dim: int, what: str) -> Any:
        return _wrapped_on_device(self.xp, self.i64, indices, dim)


@registry.register("GatherND", since=(11, 12, 13), types={"T": TENSORS})
class GatherND(library.kernel("GatherND", 13, BACKEND)):
    """The library's GatherND without the host-side index check."""

    def linear(self, indices: Any, dims: tuple[int, ...], what: str) -> Any:
        # Column by column with the dims and strides as scalars: no upload, no read back.
        xp = self.xp
        idx = xp.astype(xp.asarray(indices), self.i64)
        lin = xp.zeros(idx.shape[:-1], dtype=self.i64)
        for j, dim in enumerate(dims):
            column = _wrapped_on_device(xp, self.i64, idx[..., j], dim)
            lin = lin + column * math.prod(dims[j + 1:])
        return lin
