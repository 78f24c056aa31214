"""docs/operators.md is generated from the kernel registries and must be current."""

from __future__ import annotations

from pathlib import Path

import pytest

from onyxrt.testing.operator_table import HEADER, provider_section, registry_providers, render

DOC = Path(__file__).resolve().parents[1] / "docs" / "operators.md"


def _cpu_registry_complete() -> bool:
    """Whether the CPU provider registered every kernel it has: the NCHWc ones only where
    the compiled module is on and the CPU has AVX-512 (or ONYXRT_CPU_NCHWC=1)."""
    from onyxrt_cpu import native

    return native.NCHWC_ENABLED


# The table lists everything the CPU provider can register, as CI's `nox -s tests` (which
# sets ONYXRT_CPU_NCHWC=1) generates and checks it.
@pytest.mark.skipif(not _cpu_registry_complete(), reason="the CPU provider's NCHWc kernels are off "
                    "here (no AVX-512 or no compiled module); set ONYXRT_CPU_NCHWC=1 to check the table")
def test_operator_table_is_current_for_every_installed_registry():
    text = DOC.read_text()
    assert text.startswith(HEADER)
    providers = registry_providers()
    assert any(name == "CPUExecutionProvider" for name, _ in providers)
    rendered = render(providers)
    for section in rendered[len(HEADER):].split("\n## ")[1:]:
        assert "## " + section.strip() in text, (
            "docs/operators.md is stale: run python -m onyxrt.testing.operator_table --write"
        )


def test_section_lists_versions_and_types():
    (name, registry), *_ = [p for p in registry_providers() if p[0] == "CPUExecutionProvider"]
    section = provider_section(name, registry)
    assert "| Conv | ai.onnx | 1, 11, 22 |" in section
    assert "| LabelEncoder | ai.onnx.ml |" in section


def test_every_onnxruntime_cpu_operator_beyond_onnx_is_run_or_has_a_reason():
    """docs/operators.md's last section: each operator onnxruntime's CPU provider registers in
    com.microsoft, com.microsoft.nchwc and ai.onnx.ml (and the old experimental default-domain
    ones) has a kernel in some installed onyxrt provider, or a reason in NOT_YET — and no
    reason is left for an operator that has a kernel now."""
    from onyxrt.testing.operator_table import NOT_YET, ort_cpu_kernels

    have = {(d.domain, d.op_type) for _, registry in registry_providers() for d in registry.definitions()}
    listed = [tuple(key.split("::")) for key in ort_cpu_kernels()["kernels"]]
    assert len(listed) >= 100
    unexplained = [f"{d}::{op}" for d, op in listed if (d, op) not in have and (d, op) not in NOT_YET]
    assert not unexplained, f"no kernel and no reason in NOT_YET: {unexplained}"
    stale = [f"{d}::{op}" for d, op in NOT_YET if (d, op) in have]
    assert not stale, f"NOT_YET lists operators that have a kernel now: {stale}"
    assert set(NOT_YET) <= set(listed)


def test_the_onnxruntime_snapshot_is_the_pinned_wheels():
    """ort_cpu_kernels.json is what the installed (pinned) onnxruntime registers; refresh it
    with --snapshot-onnxruntime when the pin moves."""
    import onnxruntime

    from onyxrt.testing.operator_table import ort_cpu_kernels, snapshot_onnxruntime

    snapshot = ort_cpu_kernels()
    assert snapshot["onnxruntime"] == onnxruntime.__version__
    assert snapshot == snapshot_onnxruntime()
