"""The GPU providers' kernels (CUDA and ROCm share them): one module per operator family,
all in one registry, written against CuPy.

Importing this package imports every family module, whose decorators fill ``registry``.
Kernels get CuPy from :func:`onyxrt_gpu.cupy_loader.cupy_module` when they are built, so
the same code runs on the real CuPy (CUDA or HIP build) and on the simulated one.
"""

from __future__ import annotations

from onyxrt.kernels import KernelRegistry

registry = KernelRegistry("GPU (CUDA/ROCm)")

# Family modules register themselves on import; the order does not matter.
from . import (  # noqa: E402,F401
    activation,
    conv,
    elementwise,
    fused,
    linalg,
    normalization,
    pool,
    reduction,
    shape,
)

__all__ = ["registry"]
