"""ROCMExecutionProvider under the simulated CuPy: the shared GPU provider tests and the conformance suite."""

from __future__ import annotations

from onyxrt_gpu.testing.provider_tests import GPUConformance, GPUProviderTests


class TestROCMProvider(GPUProviderTests):
    provider = "ROCMExecutionProvider"
    hip = True


class TestROCMConformance(GPUConformance):
    provider = "ROCMExecutionProvider"
    hip = True
