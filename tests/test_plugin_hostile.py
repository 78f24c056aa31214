"""Plugins that would end or freeze the host: ``sys.exit()``, ``KeyboardInterrupt`` or a
hang at import, in the hook, in the factory or in the probe.

The rule a user can rely on: listing providers and creating sessions always return. What
such a plugin does is recorded as its failure (``catalog().failures``, or the provider's
status when it is its factory or probe), with the plugin, its package and the reason;
imports, hooks and factories are bounded by ``ONYXRT_PLUGIN_LOAD_TIMEOUT_S`` and probes by
``ONYXRT_PROBE_TIMEOUT_S``. Only the user's own Ctrl+C propagates.

A regression here would kill or hang the test runner, so each case runs in a child
process, with a timeout, on fake distributions made by the ``plugin_site`` fixture.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from toy_provider import TOY_PLUGIN

import onyxrt as ort
from onyxrt.discovery import reset_catalog

TESTS_DIR = Path(__file__).parent
TOY = "ToyDeviceExecutionProvider"
CPU = "CPUExecutionProvider"
#: The bound the hang cases run under, in seconds.
LIMIT = 0.6

#: What every child runs first. The well-behaved providers' modules are imported up front
#: so that only the hostile plugins come near the (small) bounds.
PRELUDE = """
import json, os, sys, time
import onyxrt as ort
from onyxrt.discovery import catalog, reset_catalog
import onyxrt_cpu.provider, toy_provider

def report(**extra):
    cat = catalog()
    print(json.dumps({
        "failures": {f.package: {"entry_point": f.entry_point, "error": f.error, "fix": f.fix}
                     for f in cat.failures},
        "status": {n: {"usable": cat.status(n).usable, "reason": cat.status(n).reason,
                       "fix": cat.status(n).fix} for n in cat.names()},
        **extra,
    }))
"""


def run_child(site: Path, script: str, timeout: float = 60, **env: str) -> dict[str, Any]:
    """Run ``PRELUDE + script`` in a fresh interpreter that sees the fake distributions
    of ``site``; it must exit normally. Returns what its last ``report()`` printed."""
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(TESTS_DIR), os.environ.get("PYTHONPATH")])),
        # The GPU and simulated-NPU packages are not under test (and a GPU probe is slow).
        "ONYXRT_PLUGINS": "-onyxrt-cuda,-onyxrt-rocm,-onyxrt-simnpu",
        **env,
    }
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(script)],
        env=environment, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"the child ended with {proc.returncode}:\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- item 10: SystemExit, KeyboardInterrupt, GeneratorExit from plugin code ---------------

EXIT_AT_IMPORT = """
import sys
sys.exit("exit_plugin: refusing to load")
"""

INTERRUPT_IN_HOOK = """
from onyxrt.hookspecs import hookimpl

@hookimpl
def onyxrt_providers():
    raise KeyboardInterrupt("interrupt_plugin: not the user's Ctrl+C")
"""

GENERATOR_EXIT_IN_HOOK = """
from onyxrt.hookspecs import hookimpl

@hookimpl
def onyxrt_providers():  # a generator: iterating it is plugin code too
    yield from ()
    raise GeneratorExit
"""

EXIT_IN_FACTORY_AND_INTERRUPT_IN_PROBE = """
import sys
from onyxrt.hookspecs import ProviderSpec, hookimpl
from toy_provider import ToyDeviceExecutionProvider

class InterruptingProbeProvider(ToyDeviceExecutionProvider):
    name = "InterruptingProbeExecutionProvider"

    @classmethod
    def probe(cls):
        raise KeyboardInterrupt("probe: not the user's Ctrl+C")

def exiting_factory():
    sys.exit(4)

@hookimpl
def onyxrt_providers():
    return [
        ProviderSpec("ExitingFactoryExecutionProvider", exiting_factory, priority=70,
                     device_types=("npu",)),
        ProviderSpec("InterruptingProbeExecutionProvider", lambda: InterruptingProbeProvider,
                     priority=71, device_types=("npu",)),
    ]
"""


def test_sys_exit_and_keyboard_interrupt_from_plugins_are_recorded_not_fatal(plugin_site):
    plugin_site.add_distribution("exit-at-import", {"exits": "exit_plugin"}, {"exit_plugin": EXIT_AT_IMPORT})
    plugin_site.add_distribution("interrupt-in-hook", {"interrupts": "interrupt_plugin"},
                                 {"interrupt_plugin": INTERRUPT_IN_HOOK})
    plugin_site.add_distribution("generator-exit-in-hook", {"genexit": "genexit_plugin"},
                                 {"genexit_plugin": GENERATOR_EXIT_IN_HOOK})
    plugin_site.add_distribution("hostile-classes", {"hostile": "hostile_plugin"},
                                 {"hostile_plugin": EXIT_IN_FACTORY_AND_INTERRUPT_IN_PROBE})
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    out = run_child(plugin_site.root, """
        import warnings
        import numpy as np
        from model_helpers import make_model, tensor
        from onnx import helper

        available = ort.get_available_providers()
        model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [3])], [tensor("y", [3])])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            sess = ort.InferenceSession(model.SerializeToString(), providers=[
                "ExitingFactoryExecutionProvider", "InterruptingProbeExecutionProvider", "CPUExecutionProvider"])
        (y,) = sess.run(None, {"x": np.array([-1.0, 0.0, 2.0], np.float32)})
        report(available=available, session=sess.get_providers(), y=y.tolist(),
               fallbacks=[f.provider for f in sess.fallbacks])
    """)
    assert out["available"] == [TOY, CPU]
    failures = out["failures"]
    assert set(failures) == {"exit-at-import", "interrupt-in-hook", "generator-exit-in-hook"}
    assert failures["exit-at-import"]["entry_point"] == "exits"
    assert failures["exit-at-import"]["error"] == "failed to import: SystemExit: exit_plugin: refusing to load"
    assert failures["interrupt-in-hook"]["error"] == (
        "onyxrt_providers() raised KeyboardInterrupt: interrupt_plugin: not the user's Ctrl+C")
    assert failures["generator-exit-in-hook"]["error"] == "onyxrt_providers() raised GeneratorExit"
    factory = out["status"]["ExitingFactoryExecutionProvider"]
    assert not factory["usable"] and factory["reason"] == "hostile-classes failed to load or probe: SystemExit: 4"
    probe = out["status"]["InterruptingProbeExecutionProvider"]
    assert not probe["usable"]
    assert probe["reason"] == "hostile-classes failed to load or probe: KeyboardInterrupt: probe: not the user's Ctrl+C"
    # Sessions asking for them fall back with the reason and run.
    assert out["session"] == [CPU]
    assert out["fallbacks"] == ["ExitingFactoryExecutionProvider", "InterruptingProbeExecutionProvider"]
    assert out["y"] == [0.0, 0.0, 2.0]


# -- item 11: hangs are bounded, and a stuck import does not block later listings ---------

HANG_AT_IMPORT = """
import threading
threading.Event().wait()
"""

HANG_IN_HOOK = """
import threading
from onyxrt.hookspecs import hookimpl

@hookimpl
def onyxrt_providers():
    threading.Event().wait()
"""

HANG_IN_FACTORY = """
import threading
from onyxrt.hookspecs import ProviderSpec, hookimpl

def hanging_factory():
    threading.Event().wait()

@hookimpl
def onyxrt_providers():
    return [ProviderSpec("HangingFactoryExecutionProvider", hanging_factory, priority=70,
                         device_types=("npu",))]
"""

#: Slower than the bound, but it does finish: loaded by the first listing after it has.
SLOW_IMPORT = """
import time
from onyxrt.hookspecs import ProviderSpec, hookimpl
from toy_provider import ToyDeviceExecutionProvider

time.sleep(1.0)

class SlowProvider(ToyDeviceExecutionProvider):
    name = "SlowExecutionProvider"

@hookimpl
def onyxrt_providers():
    return [ProviderSpec("SlowExecutionProvider", lambda: SlowProvider, priority=65,
                         device_types=("npu",))]

READY = True
"""


def test_hanging_plugins_are_cut_off_and_later_listings_do_not_wait_again(plugin_site):
    plugin_site.add_distribution("hang-at-import", {"hangs": "hang_plugin"}, {"hang_plugin": HANG_AT_IMPORT})
    plugin_site.add_distribution("hang-in-hook", {"hookhangs": "hook_hang_plugin"},
                                 {"hook_hang_plugin": HANG_IN_HOOK})
    plugin_site.add_distribution("hang-in-factory", {"factoryhangs": "factory_hang_plugin"},
                                 {"factory_hang_plugin": HANG_IN_FACTORY})
    plugin_site.add_distribution("slow-import", {"slow": "slow_plugin"}, {"slow_plugin": SLOW_IMPORT})
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    out = run_child(plugin_site.root, """
        t0 = time.monotonic()
        first = ort.get_available_providers()
        first_s = time.monotonic() - t0
        first_failures = {f.package: f.error for f in catalog().failures}
        deadline = time.monotonic() + 10
        while not getattr(sys.modules.get("slow_plugin"), "READY", False) and time.monotonic() < deadline:
            time.sleep(0.05)
        reset_catalog()
        t1 = time.monotonic()
        second = ort.get_available_providers()
        second_s = time.monotonic() - t1
        report(first=first, first_failures=first_failures, first_s=first_s, second=second,
               second_s=second_s)
    """, timeout=60, ONYXRT_PLUGIN_LOAD_TIMEOUT_S=str(LIMIT))
    assert out["first"] == [TOY, CPU]
    assert out["first_s"] < 4 * LIMIT + 5  # bounded: four plugins each cut off once
    assert set(out["first_failures"]) == {"hang-at-import", "hang-in-hook", "slow-import"}
    assert out["first_failures"]["slow-import"].startswith(f"importing 'slow_plugin' did not finish within {LIMIT:g} s")
    assert out["second"] == ["SlowExecutionProvider", TOY, CPU]
    # The second listing joined the calls still stuck instead of starting them again: an
    # import of hang_plugin would block on its module lock, here for a whole bound.
    assert out["second_s"] < LIMIT
    failures = out["failures"]
    assert set(failures) == {"hang-at-import", "hang-in-hook"}
    still = f"did not finish within {LIMIT:g} s, started by an earlier attempt and still running"
    assert failures["hang-at-import"]["error"].startswith(f"importing 'hang_plugin' {still}")
    assert failures["hang-in-hook"]["error"].startswith(f"onyxrt_providers() {still}")
    for package, failure in failures.items():
        assert "ONYXRT_PLUGIN_LOAD_TIMEOUT_S" in failure["error"], failure
        assert f"ONYXRT_PLUGINS=-{package}" in failure["fix"], failure
    factory = out["status"]["HangingFactoryExecutionProvider"]
    assert not factory["usable"]
    assert factory["reason"] == (f"HangingFactoryExecutionProvider (from hang-in-factory): importing its "
                                 f"provider class {still}")
    assert "ONYXRT_PLUGIN_LOAD_TIMEOUT_S" in factory["fix"]


def test_first_listing_records_each_hang_with_its_bound(plugin_site):
    plugin_site.add_distribution("hang-at-import", {"hangs": "hang_plugin"}, {"hang_plugin": HANG_AT_IMPORT})
    plugin_site.add_distribution("hang-in-hook", {"hookhangs": "hook_hang_plugin"},
                                 {"hook_hang_plugin": HANG_IN_HOOK})
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    out = run_child(plugin_site.root, """
        from model_helpers import make_model, tensor
        import numpy as np
        from onnx import helper

        t0 = time.monotonic()
        available = ort.get_available_providers()
        elapsed = time.monotonic() - t0
        model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
        sess = ort.InferenceSession(model.SerializeToString(), providers=[TOY_NAME, "CPUExecutionProvider"])
        (y,) = sess.run(None, {"x": np.array([-1.0, 3.0], np.float32)})
        report(available=available, elapsed=elapsed, session=sess.get_providers(), y=y.tolist())
    """.replace("TOY_NAME", repr(TOY)), ONYXRT_PLUGIN_LOAD_TIMEOUT_S=str(LIMIT))
    assert out["available"] == [TOY, CPU]
    assert 2 * LIMIT <= out["elapsed"] < 2 * LIMIT + 5
    assert out["session"] == [TOY, CPU] and out["y"] == [0.0, 3.0]
    failures = out["failures"]
    assert failures["hang-at-import"]["error"] == (
        f"importing 'hang_plugin' did not finish within {LIMIT:g} s (ONYXRT_PLUGIN_LOAD_TIMEOUT_S); "
        f"set ONYXRT_PLUGIN_LOAD_TIMEOUT_S above {LIMIT:g} if it is only slow, or exclude the "
        "plugin with ONYXRT_PLUGINS=-hang-at-import"
    )
    assert failures["hang-in-hook"]["entry_point"] == "hookhangs"
    assert failures["hang-in-hook"]["error"].startswith(f"onyxrt_providers() did not finish within {LIMIT:g} s")


def test_the_users_ctrl_c_still_interrupts_a_listing(plugin_site):
    """Ctrl+C reaches the main thread only, where no plugin code runs: it propagates,
    and the next listing picks the interrupted plugin up again."""
    plugin_site.add_distribution("hang-at-import", {"hangs": "hang_plugin"}, {"hang_plugin": HANG_AT_IMPORT})
    plugin_site.add_distribution("onyxrt-toy", {"toy": "toy_plugin"}, {"toy_plugin": TOY_PLUGIN})
    out = run_child(plugin_site.root, """
        import signal, threading
        ctrl_c = threading.Timer(0.5, signal.pthread_kill, (threading.main_thread().ident, signal.SIGINT))
        ctrl_c.start()
        t0 = time.monotonic()
        try:
            ort.get_available_providers()
            interrupted = False
        except KeyboardInterrupt:
            interrupted = True
        elapsed = time.monotonic() - t0
        os.environ["ONYXRT_PLUGIN_LOAD_TIMEOUT_S"] = "0.2"
        report(interrupted=interrupted, elapsed=elapsed, after=ort.get_available_providers())
    """, ONYXRT_PLUGIN_LOAD_TIMEOUT_S="30")
    assert out["interrupted"] and out["elapsed"] < 10
    assert out["after"] == [TOY, CPU]
    error = out["failures"]["hang-at-import"]["error"]
    assert error.startswith("importing 'hang_plugin' did not finish within 0.2 s, started by an earlier attempt")


def test_plugin_load_timeout_setting_must_be_a_positive_number(plugin_site, monkeypatch):
    monkeypatch.setenv("ONYXRT_PLUGIN_LOAD_TIMEOUT_S", "0")
    reset_catalog()
    with pytest.raises(ort.errors.InvalidArgument, match="ONYXRT_PLUGIN_LOAD_TIMEOUT_S must be a positive"):
        ort.get_available_providers()
    monkeypatch.setenv("ONYXRT_PLUGIN_LOAD_TIMEOUT_S", "2.5")
    assert CPU in ort.get_available_providers()  # fixed setting: the same catalog loads


# -- item 13: a session imports only the plugins up to the providers it asks for ----------

#: What a careless plugin does at import: every later CPU result is off by 100.
NUMPY_PATCHER = """
import numpy as np
from onyxrt.hookspecs import hookimpl

_maximum = np.maximum
np.maximum = lambda *args, **kwargs: _maximum(*args, **kwargs) + 100

@hookimpl
def onyxrt_providers():
    return []
"""


def test_a_cpu_session_does_not_import_a_third_party_plugin(plugin_site):
    plugin_site.add_distribution("numpy-turbo", {"turbo": "patcher_plugin"}, {"patcher_plugin": NUMPY_PATCHER})
    out = run_child(plugin_site.root, """
        import numpy as np
        from model_helpers import make_model, tensor
        from onnx import helper

        model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
        x = np.array([-1.0, 3.0], np.float32)
        (y,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
        imported = "patcher_plugin" in sys.modules
        ort.get_all_providers()  # a listing imports it (and so would have patched numpy)
        report(y=y.tolist(), imported=imported, imported_by_listing="patcher_plugin" in sys.modules)
    """)
    assert out["imported_by_listing"]
    assert not out["imported"]
    assert out["y"] == [0.0, 3.0]
