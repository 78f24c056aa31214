"""Test support for the GPU providers: a strict simulated CuPy for machines without a GPU.

See :mod:`onyxrt_gpu.testing.simulated_cupy`.
"""

from __future__ import annotations

from .simulated_cupy import SimulatedCupy, install, simulated

__all__ = ["SimulatedCupy", "install", "simulated"]
