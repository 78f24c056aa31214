"""Kernels loaded on demand: KernelRegistry.load_on_demand, and the operator indexes the
library and the CPU provider keep (onyxrt.kernel_index)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from onyxrt.kernels import Kernel, KernelRegistry
from onyxrt.testing.operator_index import fresh_index, index_path, installed


class _Identity(Kernel):
    def compute(self, x):  # pragma: no cover - never run here
        return (x,)


def _on_demand_registry(delay: float = 0.0) -> tuple[KernelRegistry, list[tuple[str, str]]]:
    registry = KernelRegistry("test")
    calls: list[tuple[str, str]] = []

    def load_op(domain: str, op_type: str) -> None:
        calls.append((domain, op_type))
        time.sleep(delay)
        if op_type in ("Relu", "Abs"):
            registry.register(op_type, (6, 13), domain=domain)(_Identity)
            # the loader reads the registry it fills without loading again
            assert (domain, op_type, 6) in registry

    def load_all() -> None:
        calls.append(("*", "*"))
        for op in ("Relu", "Abs"):
            if ("", op, 6) not in registry:
                registry.register(op, (6, 13))(_Identity)

    registry.load_on_demand(load_op, load_all)
    return registry, calls


def test_lookup_loads_the_operator_once():
    registry, calls = _on_demand_registry()
    kdef, why = registry.lookup("", "Relu", 13)
    assert kdef is not None and kdef.since_version == 13 and why == ""
    assert registry.lookup("ai.onnx", "Relu", 7)[0].since_version == 6
    assert ("", "Relu", 13) in registry
    assert calls == [("", "Relu")]
    # an operator nobody defines is asked for once too, and stays refused
    assert registry.lookup("", "Nope", 14)[0] is None
    assert registry.lookup("", "Nope", 14)[0] is None
    assert calls == [("", "Relu"), ("", "Nope")]


def test_listings_load_everything():
    registry, calls = _on_demand_registry()
    registry.lookup("", "Relu", 14)
    assert len(registry) == 4
    assert registry.op_types() == {"Relu", "Abs"}
    assert [d.op_type for d in registry.definitions()] == ["Abs", "Abs", "Relu", "Relu"]
    assert calls == [("", "Relu"), ("*", "*")]
    registry.lookup("", "Abs", 14)  # already there: no further load
    assert calls == [("", "Relu"), ("*", "*")]


def test_threads_load_an_operator_once():
    """Two sessions created at once must not register an operator's kernels twice (which
    raises): one thread loads, the other waits for it."""
    registry, calls = _on_demand_registry(delay=0.05)
    found = []
    threads = [threading.Thread(target=lambda: found.append(registry.lookup("", "Abs", 14)[0]))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == [("", "Abs")]
    assert len(found) == 4 and all(k is not None and k.since_version == 13 for k in found)


def _modules_of(text: str) -> dict:
    namespace: dict = {}
    exec(compile(text, "<index>", "exec"), namespace)  # noqa: S102 - the generated index
    return namespace["MODULES"]


def _full_configuration(package: str) -> bool:
    """Whether every kernel the package can register is registered here: the CPU
    provider's NCHWc kernels only where they are offered (its index is made where they
    are, and holds them wherever they are not)."""
    if package != "onyxrt_cpu.kernels":
        return True
    from onyxrt_cpu import native

    return bool(native.ENABLED and native.NCHWC_ENABLED)


def test_indexes_are_current():
    """A module that gained or moved an operator without the index rewritten would leave
    that operator's kernels unloaded (or register them twice): every operator registered
    here must be in the index, under every module that registers it; and where every
    kernel is on, the index must be exactly what the modules register."""
    packages = installed()
    if not packages:
        pytest.skip("no package keeping an operator index is installed")
    fix = "rewrite with: python -m onyxrt.testing.operator_index --write"
    for package in packages:
        committed = _modules_of(index_path(package).read_text(encoding="utf-8"))
        fresh = _modules_of(fresh_index(package))
        uncovered = {key: mods for key, mods in fresh.items() if not set(mods) <= set(committed.get(key, ()))}
        assert not uncovered, f"{package}: not in its index: {uncovered}; {fix}"
        if _full_configuration(package):
            assert fresh == committed, f"{package}: its index is stale; {fix}"


_DUMP = r"""
import json, random, sys
import onnx.defs
from onyxrt_cpu.kernels import registry
from onyxrt_cpu.kernels._index import MODULES
from onyxrt_ops._index import MODULES as LIBRARY
if sys.argv[1] == "everything":
    registry.definitions()
else:  # every operator there is, one lookup each, in a shuffled order
    ops = {("" if s.domain == "ai.onnx" else s.domain, s.name)
           for s in onnx.defs.get_all_schemas_with_history()} | set(MODULES) | set(LIBRARY)
    ops = sorted(ops)
    random.Random(int(sys.argv[1])).shuffle(ops)
    for domain, op in ops:
        registry.lookup(domain, op, 10_000)
rows = [[list(key), d.factory.__module__, d.factory.__qualname__,
         [c.__module__ + "." + c.__qualname__ for c in d.factory.__mro__],
         {t: sorted(map(str, v)) for t, v in d.types.items()}, sorted(d.host_inputs)]
        for key, d in sorted(registry._defs.items())]
rows.append(sorted([list(k), v] for k, v in registry._refused.items()))
sys.stdout.write(json.dumps(rows, sort_keys=True))
"""


def test_cpu_registry_on_demand_equals_everything_at_once():
    """Operator by operator, in any order, the CPU provider's registry ends up with exactly
    the kernels (classes, overrides, element types) importing everything gives."""
    pytest.importorskip("onyxrt_cpu")

    def dump(mode: str) -> list:
        done = subprocess.run([sys.executable, "-c", _DUMP, mode], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    everything = dump("everything")
    assert len(everything) > 700
    assert dump("1") == everything
    assert dump("2") == everything
