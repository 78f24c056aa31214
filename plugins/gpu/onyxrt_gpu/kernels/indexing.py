"""GPU kernels: the CuPy fast path of Gather, over the operator library's
(:mod:`onyxrt_ops.indexing`, bound over CuPy in ``kernels/__init__``).

Slice (a view of its input, its bounds read on the host), GatherElements, GatherND, the
scatters, OneHot, NonZero and Unique come from the library.

Gather subclasses the library's kernel and skips its index check: reading the indices'
minimum and maximum back would synchronize with the device on every call (an embedding
lookup), and ``cupy.take``, which takes indices of any rank, wraps negative indices itself
(out-of-range ones are not detected on the device). Constant indices are checked on the
host and uploaded once, when the kernel is built.
"""

from __future__ import annotations

from typing import Any

from onyxrt_ops import library

from . import registry
from ._common import BACKEND, INTS, TENSORS

__all__ = ["Gather"]


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
