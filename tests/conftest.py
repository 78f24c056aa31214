"""Shared fixtures: small models and fake plugin distributions on ``sys.path``."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from onyxrt.discovery import reset_catalog

TESTS_DIR = Path(__file__).parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))

from model_helpers import make_model, tensor  # noqa: E402
from toy_provider import TOY_PLUGIN  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _private_config_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Per-user files onyxrt writes (the SimNPU cache's secret key) go to a folder of
    this test session, never into the real home folder (which CI may not let us write)."""
    mp = pytest.MonkeyPatch()
    mp.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config-home")))
    yield
    mp.undo()


class PluginSite:
    """A folder on ``sys.path`` where tests create fake installed distributions."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add_distribution(
        self,
        dist: str,
        entry_points: dict[str, str],
        modules: dict[str, str] | None = None,
        version: str = "1.0",
    ) -> None:
        """Create ``<dist>-<version>.dist-info`` with ``onyxrt.providers`` entry points and
        the given module sources."""
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = ["[onyxrt.providers]"] + [f"{k} = {v}" for k, v in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        for name, source in (modules or {}).items():
            (self.root / f"{name}.py").write_text(textwrap.dedent(source))


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[PluginSite]:
    """Fake distributions visible to entry-point discovery; a fresh catalog before and after."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    reset_catalog()
    yield PluginSite(site)
    # list(): reading a module's __file__ may import (lazy modules such as CuPy's).
    for mod in [
        m
        for m, v in list(sys.modules.items())
        if str(site) in str(getattr(v, "__file__", "") or "")
    ]:
        del sys.modules[mod]
    reset_catalog()


TOY = "ToyDeviceExecutionProvider"

@pytest.fixture
def toy_provider(plugin_site: PluginSite) -> str:
    """Install the toy device provider (a device with its own memory, an arena and the
    options ``device_id``, ``arena_extend_strategy`` and ``memory_limit``); its name."""
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    return TOY


@pytest.fixture
def without_gpu_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The GPU provider packages excluded (ONYXRT_PLUGINS), whether or not this
    environment has them: tests of "requested but not installed" stay meaningful."""
    monkeypatch.setenv("ONYXRT_PLUGINS", "-onyxrt-cuda,-onyxrt-rocm")
    reset_catalog()
    yield
    monkeypatch.delenv("ONYXRT_PLUGINS")
    reset_catalog()


@pytest.fixture
def add_relu_model() -> onnx.ModelProto:
    """y = Relu(x + w), x float32 [N, 3]."""
    return make_model(
        [
            helper.make_node("Add", ["x", "w"], ["s"], name="add"),
            helper.make_node("Relu", ["s"], ["y"], name="relu"),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
        {"w": np.array([1.0, -2.0, 3.0], np.float32)},
    )


def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001
    """Print the ONNX conformance counts (node cases, wheel model cases) when they ran."""
    suites = {
        "test_node_conformance.py::test_node_case": ("node conformance", "exclusions.py"),
        "test_model_cases.py::test_model_case": ("wheel model cases", "test_model_cases.py"),
    }
    counts = {key: [0, 0] for key in suites}
    for outcome in ("passed", "failed", "xfailed", "xpassed"):
        for report in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(report, "nodeid", "")
            key = next((k for k in suites if k in nodeid), None)
            if key is None or (report.when != "call" and outcome != "xfailed"):
                continue
            counts[key][0 if outcome in ("passed", "xpassed") else 1] += 1
    lines = []
    for key, (passed, failed) in counts.items():
        if passed or failed:
            label, where = suites[key]
            lines.append(
                f"{label}: {passed} of {passed + failed} cases pass "
                f"({failed} listed in tests/conformance/{where} with reasons)"
            )
    if lines:
        terminalreporter.write_sep("=", "ONNX conformance (CPU provider)")
        for line in lines:
            terminalreporter.write_line(line)
