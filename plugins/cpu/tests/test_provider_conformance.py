"""The CPU provider passes the core's provider conformance suite."""

from __future__ import annotations

from onyxrt.testing.provider_suite import ProviderConformance


class TestCPUProviderConformance(ProviderConformance):
    provider = "CPUExecutionProvider"
