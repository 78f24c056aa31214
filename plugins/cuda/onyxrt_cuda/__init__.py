"""onyxrt-cuda: ``CUDAExecutionProvider``, NVIDIA GPUs through CuPy (cuBLAS via cupy.matmul).

The implementation is shared with the other GPU provider in onyxrt-gpu; this package
names the provider, the CuPy build it needs (a CUDA build) and the vendor. CuPy comes
through an extra matching the driver's CUDA major version, with the CUDA libraries it loads
(NVRTC, cuBLAS) from pip: ``pip install 'onyxrt-cuda[cuda12]'`` or ``'onyxrt-cuda[cuda13]'``.
Without it the provider is listed but not usable, and its probe says which extra to add.
"""

from __future__ import annotations

__version__ = "0.1.0"
