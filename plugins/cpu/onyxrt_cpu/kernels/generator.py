"""CPU generators: Bernoulli. Constant, ConstantOfShape, EyeLike, Range, RandomNormal,
RandomUniform, their ``*Like`` forms and Multinomial are the operator library's
(:mod:`onyxrt_ops.generator`), bound over numpy in ``kernels/__init__``; their generator is
``numpy.random.default_rng`` seeded as before, so a seed gives the numbers it always gave.

Bernoulli is not in the library: its ONNX node cases expect numpy's legacy global stream,
which the seeded generator does not reproduce (they fail here as before), and the library's
conformance run must pass every case of the operators it defines.

The library's kernels were timed against the CPU's former ones (``kernel.compute``, best of
9): ConstantOfShape, Range, Constant, the random draws and Multinomial within ±3% (a small
RandomNormal +8%: 2.9 µs vs 2.7 µs), EyeLike 0.6–0.9× (one strided write instead of a
fancy-index scatter), a [256, 256] float64 RandomUniform 0.3× (no float64 → float64 copy).
"""

from __future__ import annotations

import threading

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES, INT_TYPES
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.seeding import default_seed
from onyxrt_ops.generator import dtype_attr, seed_to_int

from . import registry


@registry.register("Bernoulli", since=(15, 22))
class Bernoulli(Kernel):
    """1 with probability ``p`` (the input element), else 0; dtype defaults to the input's.
    Seeded as the library's random operators are (:mod:`onyxrt_ops.generator`)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        seed = info.attr("seed")
        self._rng = np.random.default_rng(default_seed() if seed is None else seed_to_int(seed))
        self._lock = threading.Lock()
        self.dtype = dtype_attr(self, FLOAT_TYPES | INT_TYPES | {np.dtype(np.bool_)})

    def compute(self, p):
        p = np.asarray(p)
        with self._lock:
            u = self._rng.random(p.shape)
        return ((u < p.astype(np.float64)).astype(p.dtype if self.dtype is None else self.dtype),)
