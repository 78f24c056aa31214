"""The provider conformance suite holds a second-device provider to the same contract."""

from __future__ import annotations

import pytest

from onyxrt.testing.provider_suite import ProviderConformance


class TestToyDeviceConformance(ProviderConformance):
    provider = "ToyDeviceExecutionProvider"
    options = {"arena_extend_strategy": "kSameAsRequested"}

    @pytest.fixture(autouse=True)
    def _installed(self, toy_provider):
        yield

    def model(self):
        # The toy device runs Add, Mul and Relu; the rest of the model runs on CPU.
        return super().model()
