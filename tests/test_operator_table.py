"""docs/operators.md is generated from the kernel registries and must be current."""

from __future__ import annotations

from pathlib import Path

from onyxrt.testing.operator_table import HEADER, provider_section, registry_providers, render

DOC = Path(__file__).resolve().parents[1] / "docs" / "operators.md"


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
