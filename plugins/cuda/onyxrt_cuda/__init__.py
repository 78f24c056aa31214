"""onyxrt-cuda: ``CUDAExecutionProvider``, NVIDIA GPUs through CuPy (cuBLAS via cupy.matmul).

The implementation is shared with the other GPU provider in onyxrt-gpu; this package
names the provider, the CuPy build it needs (cupy-cuda12x) and the vendor.
"""

from __future__ import annotations

__version__ = "0.1.0"
