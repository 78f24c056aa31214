"""CUDAExecutionProvider under the simulated CuPy: the shared GPU provider tests and the conformance suite."""

from __future__ import annotations

from onyxrt_gpu.testing.provider_tests import GPUConformance, GPUProviderTests


class TestCUDAProvider(GPUProviderTests):
    provider = "CUDAExecutionProvider"
    hip = False


class TestCUDAConformance(GPUConformance):
    provider = "CUDAExecutionProvider"
    hip = False
