"""onyxrt-gpu: the one GPU implementation behind onyxrt-cuda and onyxrt-rocm.

CuPy offers the same API on NVIDIA (CUDA) and AMD (HIP) GPUs, so the kernels, the memory
arena, the transfers, the options and the probe are written once here; the two provider
packages only name their provider, their CuPy build and their vendor.

* ``cupy_loader.py`` — finding CuPy; the probe's exact reasons.
* ``provider.py``    — ``GPUExecutionProvider``, the shared provider class.
* ``kernels/``       — CuPy kernels, one module per op family.
* ``memory.py``      — onyxrt's arena over device memory, as CuPy's allocator.
* ``transfer.py``    — host ↔ device copies, counted.
* ``testing/``       — a strict simulated CuPy for machines without a GPU.
"""

from __future__ import annotations

__version__ = "0.1.0"
