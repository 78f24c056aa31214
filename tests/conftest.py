"""Shared fixtures: small models and fake plugin distributions on ``sys.path``."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from onyxrt.discovery import reset_catalog

TESTS_DIR = Path(__file__).parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))


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
    for mod in [
        m
        for m, v in sys.modules.items()
        if getattr(v, "__file__", "") and str(site) in str(v.__file__)
    ]:
        del sys.modules[mod]
    reset_catalog()


TOY = "ToyDeviceExecutionProvider"

# The plugin module of a fake ``onyxrt-toy`` distribution: it offers the toy device
# provider from ``toy_provider.py`` through the ``onyxrt.providers`` entry point.
TOY_PLUGIN = """
from onyxrt.hookspecs import ProviderSpec, hookimpl

def _load():
    from toy_provider import ToyDeviceExecutionProvider
    return ToyDeviceExecutionProvider

@hookimpl
def onyxrt_providers():
    return [ProviderSpec("ToyDeviceExecutionProvider", _load, priority=50, device_types=("npu",))]
"""


@pytest.fixture
def toy_provider(plugin_site: PluginSite) -> str:
    """Install the toy device provider (a device with its own memory, an arena and the
    options ``device_id``, ``arena_extend_strategy`` and ``memory_limit``); its name."""
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    return TOY


def assert_priority_order(available: list[str]) -> None:
    """Providers are listed by descending priority with CPU last (other installed plugins
    may appear too: the core's tests must not depend on which ones are installed)."""
    from onyxrt.discovery import catalog

    assert available[-1] == "CPUExecutionProvider"
    priorities = [catalog().specs[name].priority for name in available[:-1]]
    assert priorities == sorted(priorities, reverse=True), list(zip(available, priorities))


def make_model(
    nodes,
    inputs,
    outputs,
    initializers=(),
    opset: int = 17,
    ir_version: int = 10,
    name: str = "test_graph",
) -> onnx.ModelProto:
    """A model from onnx.helper pieces; ``initializers`` is a dict name -> array."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(initializers).items()]
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )
    return model


def tensor(name: str, shape, elem=TensorProto.FLOAT):
    """A tensor value info."""
    return helper.make_tensor_value_info(name, elem, shape)


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
    """Print the ONNX node-conformance count when the suite ran."""
    passed = failed = 0
    for outcome in ("passed", "failed", "xfailed", "xpassed"):
        for report in terminalreporter.stats.get(outcome, []):
            if "test_node_conformance.py::test_node_case" not in getattr(report, "nodeid", ""):
                continue
            if report.when != "call" and outcome != "xfailed":
                continue
            if outcome in ("passed", "xpassed"):
                passed += 1
            else:
                failed += 1
    if passed or failed:
        terminalreporter.write_sep("=", "ONNX node conformance (CPU provider)")
        terminalreporter.write_line(
            f"node conformance: {passed} of {passed + failed} cases pass "
            f"({failed} listed in tests/conformance/exclusions.py with reasons)"
        )
