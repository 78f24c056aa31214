"""Plugins that declare names they should not, and plugins a session did not ask for.

* A plugin declaring a provider name another package already provides (even
  ``CPUExecutionProvider``) is recorded in ``catalog().failures`` naming both packages; the
  first-party onyxrt package keeps the name, and between two others the one first by
  distribution name does, whatever the order of ``sys.path``. Sessions keep working.
* Asking for named providers imports plugins only up to the first that declares each
  name, first-party ones first: a third-party plugin is not imported for the CPU. Listing
  everything imports everything, and gives the same answer.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from toy_provider import TOY_PLUGIN

import onyxrt as ort
from onyxrt.discovery import catalog
from onyxrt.errors import InvalidArgument

CPU = "CPUExecutionProvider"
TOY = "ToyDeviceExecutionProvider"
SAME = "SameExecutionProvider"

CPU_IMPOSTOR = """
from onyxrt.hookspecs import ProviderSpec, hookimpl
from toy_provider import ToyDeviceExecutionProvider

class Impostor(ToyDeviceExecutionProvider):
    name = "CPUExecutionProvider"

class Extra(ToyDeviceExecutionProvider):
    name = "ExtraExecutionProvider"

@hookimpl
def onyxrt_providers():
    # It even claims to be onyxrt-cpu: the distribution that installed it decides.
    return [ProviderSpec("CPUExecutionProvider", lambda: Impostor, priority=1000, package="onyxrt-cpu"),
            ProviderSpec("ExtraExecutionProvider", lambda: Extra, priority=5, device_types=("npu",))]
"""

BROKEN_PLUGIN = """
raise ImportError("libturbo.so: cannot open shared object file")
"""


def _toy_plugin(cls: str, name: str, priority: int) -> str:
    """A plugin whose provider class ``cls`` (a toy device) is ``name`` at ``priority``."""
    return f"""
from onyxrt.hookspecs import ProviderSpec, hookimpl
from toy_provider import ToyDeviceExecutionProvider

class {cls}(ToyDeviceExecutionProvider):
    name = "{name}"

@hookimpl
def onyxrt_providers():
    return [ProviderSpec("{name}", lambda: {cls}, priority={priority}, device_types=("npu",))]
"""


def same_name_plugin(priority: int) -> str:
    """A plugin declaring ``SameExecutionProvider`` (a toy device) at ``priority``."""
    return _toy_plugin("Same", SAME, priority)


def turbo_plugin(name: str) -> str:
    """A third-party plugin offering ``name`` (a toy device)."""
    return _toy_plugin("Turbo", name, 90)


@pytest.fixture
def front_site(plugin_site: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A second fake site, ahead of ``plugin_site`` on ``sys.path``."""
    root = tmp_path / "front"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    yield type(plugin_site)(root)
    for mod in [m for m, v in list(sys.modules.items()) if str(root) in str(getattr(v, "__file__", "") or "")]:
        del sys.modules[mod]


# -- item 12: duplicate names are recorded, first-party wins, the choice is deterministic --


def test_a_third_party_cpu_provider_is_recorded_and_onyxrt_cpu_kept(plugin_site, add_relu_model):
    plugin_site.add_distribution("fast-cpu", {"fastcpu": "fast_cpu_plugin"}, {"fast_cpu_plugin": CPU_IMPOSTOR})
    available = ort.get_available_providers()
    assert available[-1] == CPU and "ExtraExecutionProvider" in available  # its other provider loads
    assert catalog().specs[CPU].package == "onyxrt-cpu"
    assert catalog().provider_class(CPU).__module__.startswith("onyxrt_cpu")
    (failure,) = catalog().failures
    assert (failure.entry_point, failure.package) == ("fastcpu", "fast-cpu")
    assert failure.error.startswith(
        "provider 'CPUExecutionProvider' is registered by two packages: 'onyxrt-cpu' (kept: a "
        "first-party onyxrt package is preferred) and 'fast-cpu' (ignored)"
    )
    # Every session keeps working, on onyxrt-cpu's provider.
    sess = ort.InferenceSession(add_relu_model.SerializeToString())
    assert sess.get_providers() == [CPU]
    assert type(sess._providers[0]).__module__.startswith("onyxrt_cpu")
    x = np.array([[-5.0, 1.0, -1.0]], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], [[0.0, 0.0, 2.0]])


@pytest.mark.parametrize("alpha_in_front", [True, False], ids=["alpha-first-on-path", "zeta-first-on-path"])
def test_between_two_third_parties_the_first_by_name_is_kept_whatever_the_path(
    plugin_site, front_site, alpha_in_front
):
    alpha_site, zeta_site = (front_site, plugin_site) if alpha_in_front else (plugin_site, front_site)
    alpha_site.add_distribution("alpha-accel", {"alpha": "alpha_plugin"}, {"alpha_plugin": same_name_plugin(10)})
    zeta_site.add_distribution("zeta-accel", {"zeta": "zeta_plugin"}, {"zeta_plugin": same_name_plugin(20)})
    assert SAME in ort.get_available_providers()
    assert catalog().specs[SAME].package == "alpha-accel"
    assert catalog().specs[SAME].priority == 10
    (failure,) = catalog().failures
    assert failure.package == "zeta-accel"
    assert "'alpha-accel' (kept: first by package and entry-point name) and 'zeta-accel' (ignored)" in failure.error


def test_a_library_registered_at_run_time_cannot_take_a_name(plugin_site, tmp_path):
    plugin = tmp_path / "impostor.py"
    plugin.write_text(CPU_IMPOSTOR)
    with pytest.raises(InvalidArgument, match="registered by two packages: 'onyxrt-cpu'"):
        ort.register_execution_provider_library("impostor", str(plugin))
    # Refused whole: nothing of it is kept, and no failure is left behind.
    assert "ExtraExecutionProvider" not in ort.get_all_providers()
    assert catalog().failures == []
    assert catalog().specs[CPU].package == "onyxrt-cpu"
    with pytest.raises(InvalidArgument, match="no execution provider library"):
        ort.unregister_execution_provider_library("impostor")


# -- item 13: only the plugins a question needs are imported -------------------------------


def test_asking_for_the_cpu_imports_no_third_party_plugin(plugin_site):
    plugin_site.add_distribution("numpy-turbo", {"turbo": "turbo_plugin"},
                                 {"turbo_plugin": turbo_plugin("TurboExecutionProvider")})
    plugin_site.add_distribution("broken-turbo", {"brokenturbo": "broken_turbo_plugin"},
                                 {"broken_turbo_plugin": BROKEN_PLUGIN})
    cat = catalog()
    assert cat.provides(CPU)
    assert cat.status(CPU).usable and cat.provider_class(CPU).__module__.startswith("onyxrt_cpu")
    assert "turbo_plugin" not in sys.modules and "broken_turbo_plugin" not in sys.modules
    # A listing needs them all, failures included.
    assert "TurboExecutionProvider" in ort.get_all_providers()
    assert "turbo_plugin" in sys.modules
    assert [f.package for f in cat.failures] == ["broken-turbo"]


def test_reading_the_failures_loads_every_plugin(plugin_site):
    plugin_site.add_distribution("broken-turbo", {"brokenturbo": "broken_turbo_plugin"},
                                 {"broken_turbo_plugin": BROKEN_PLUGIN})
    assert catalog().provides(CPU)
    (failure,) = catalog().failures
    assert failure.package == "broken-turbo" and "libturbo.so" in failure.error


def test_a_name_nobody_declares_imports_everything_to_say_so(plugin_site):
    plugin_site.add_distribution("numpy-turbo", {"turbo": "turbo_plugin"},
                                 {"turbo_plugin": turbo_plugin("TurboExecutionProvider")})
    assert not catalog().provides("NopeExecutionProvider")
    assert "turbo_plugin" in sys.modules
    with pytest.raises(KeyError):
        catalog().status("NopeExecutionProvider")


def test_a_partial_load_keeps_the_same_provider_a_full_load_keeps(plugin_site):
    """Load order puts first-party plugins first: the third party ``aaa-toy`` (first by
    name) is not imported to answer for the toy provider, and loses it afterwards too."""
    plugin_site.add_distribution("aaa-toy", {"aaatoy": "aaa_toy_plugin"}, {"aaa_toy_plugin": TOY_PLUGIN})
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    plugin_site.add_distribution("alpha-accel", {"alpha": "alpha_plugin"}, {"alpha_plugin": same_name_plugin(10)})
    plugin_site.add_distribution("zeta-accel", {"zeta": "zeta_plugin"}, {"zeta_plugin": same_name_plugin(20)})
    cat = catalog()
    assert cat.status(TOY).usable and cat._origins[TOY].package == "onyxrt-toy"
    assert cat.provides(SAME) and cat._origins[SAME].package == "alpha-accel"
    assert "zeta_plugin" not in sys.modules
    # The full load agrees, and records the losers.
    assert cat.specs[TOY].package == "onyxrt-toy" and cat.specs[SAME].package == "alpha-accel"
    assert sorted(f.package for f in cat.failures) == ["aaa-toy", "zeta-accel"]
