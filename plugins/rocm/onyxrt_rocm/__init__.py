"""onyxrt-rocm: ``ROCMExecutionProvider``, AMD GPUs through CuPy's HIP build (hipBLAS via cupy.matmul).

The implementation is shared with the other GPU provider in onyxrt-gpu; this package
names the provider, the CuPy build it needs (cupy-rocm-7-0, a dependency) and the vendor.
The ROCm 7 libraries CuPy loads (the HIP runtime, hiprtc, hipBLAS) come with ROCm, not
from pip.
"""

from __future__ import annotations

__version__ = "0.1.0"
