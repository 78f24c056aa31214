"""CPU kernels: Resize and Upsample come from the operator library
(:mod:`onyxrt_ops.resize`, bound over numpy in ``kernels/__init__``).

The library's kernels are the former numpy kernels written over the namespace (the same
cached per-axis tables, ``take`` gathers and BLAS matmuls), so no numpy fast path is kept:
Resize-19 2x upsampling of float32 [1, C, H, W], before -> from the library (noisy
2-core machine): [1,3,8,8] nearest 11.2 -> 8.9 us, linear 35.2 -> 30.4 us; [1,16,64,64]
nearest 184 -> 182 us, linear 9.1 -> 7.0 ms; [1,64,56,56] nearest 457 -> 361 us, linear
18.5 -> 18.8 ms (noise).

Overrides, each the library's kernel registered without type restrictions so that string
tensors (which the standard cannot hold) reach it: numpy's ``take`` gathers object
elements as any other, which is all nearest resizing of strings needs.
"""

from __future__ import annotations

from onyxrt_ops import library

from . import registry
from ._backend import BACKEND

__all__ = ["Resize", "Resize10", "Upsample", "Upsample1"]


@registry.register("Resize", since=(11, 13, 18, 19))
class Resize(library.kernel("Resize", 19, BACKEND)):
    """The library's Resize v11+, registered for every type (strings too)."""


@registry.register("Resize", since=10)
class Resize10(library.kernel("Resize", 10, BACKEND)):
    """The library's Resize v10, registered for every type (strings too)."""


@registry.register("Upsample", since=(7, 9, 10))
class Upsample(library.kernel("Upsample", 10, BACKEND)):
    """The library's Upsample v7-10, registered for every type (strings too)."""


@registry.register("Upsample", since=1)
class Upsample1(library.kernel("Upsample", 1, BACKEND)):
    """The library's Upsample v1, registered for every type (strings too)."""
