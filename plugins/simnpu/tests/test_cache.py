"""Cache keys and the on-disk program cache: hits, misses, corrupt entries rebuilt.

Hostile cache folders and entries are in ``test_cache_security.py``."""

from __future__ import annotations

import logging
import os

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from onyxrt.graph import Graph
from onyxrt.protocol import FusedSubgraph
from onyxrt_simnpu.cache import SUFFIX, ProgramCache
from onyxrt_simnpu.compiler import cache_key, compile_group
from onyxrt_simnpu.ops import to_storage
from onyxrt_simnpu.program import Program

OPTIONS = {"precision": "fp16", "tops": 10.0, "bandwidth_gbps": 50.0, "memory_limit": 1 << 30}
VERSION = "0.1.0"


def _model(weight_delta: float = 0.0, alpha: float = 0.1, node_prefix: str = "") -> onnx.ModelProto:
    w = np.arange(24, dtype=np.float32).reshape(4, 6) / 10
    w[0, 0] += weight_delta
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name=f"{node_prefix}matmul"),
        helper.make_node("LeakyRelu", ["m"], ["y"], name=f"{node_prefix}act", alpha=alpha),
    ]
    graph = helper.make_graph(
        nodes, "k", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 4])],
        [helper.make_empty_tensor_value_info("y")], [numpy_helper.from_array(w, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model)


def _group(model: onnx.ModelProto, name: str = "SimNPU_k_0") -> FusedSubgraph:
    graph = Graph.from_proto(model.graph, {"": 17})
    return FusedSubgraph(name, tuple(graph.nodes), ("x", "w"), ("y",), graph)


def _key(model=None, options=None, version=VERSION, name="SimNPU_k_0") -> str:
    return cache_key(_group(model or _model(), name), {**OPTIONS, **(options or {})}, version)


# -- cache keys -------------------------------------------------------------------------
def test_key_is_a_stable_sha256():
    key = _key()
    assert len(key) == 64 and int(key, 16) >= 0
    assert _key() == key  # a fresh parse of the same model: same key
    group = _group(_model())
    assert cache_key(group, OPTIONS, VERSION) == cache_key(group, dict(OPTIONS), VERSION)


@pytest.mark.parametrize(
    "change",
    [
        {"options": {"precision": "fp32"}},
        {"options": {"precision": "int8"}},
        {"options": {"tops": 20.0}},
        {"options": {"bandwidth_gbps": 100.0}},
        {"version": "0.2.0"},
        {"model": _model(weight_delta=1e-3)},
        {"model": _model(alpha=0.2)},
    ],
    ids=["fp32", "int8", "tops", "bandwidth", "provider-version", "weight-value", "attribute"],
)
def test_key_changes_with_what_changes_the_program(change):
    assert _key(**change) != _key()


def test_key_ignores_what_does_not_change_the_program():
    assert _key(options={"memory_limit": 1 << 20, "cache_dir": "/elsewhere"}) == _key()
    assert _key(options={"tops": 10}) == _key()  # 10 and 10.0 are one setting
    assert _key(model=_model(node_prefix="renamed_")) == _key()
    assert _key(name="SimNPU_other_3") == _key()


def test_key_covers_value_types():
    model = _model()
    other = onnx.ModelProto()
    other.CopyFrom(model)
    other.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 5
    other = onnx.shape_inference.infer_shapes(other, strict_mode=False)
    assert _key(model=other) != _key(model=model)


# -- the disk cache ---------------------------------------------------------------------
@pytest.fixture(autouse=True)
def _key_home(tmp_path_factory, monkeypatch):
    """Each test's MAC secret in a fresh folder, never the user's own ~/.config."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))


@pytest.fixture
def program() -> Program:
    return compile_group(_group(_model()), "fp16")


def _entries(directory) -> list[str]:
    return sorted(os.listdir(directory))


def test_disabled_cache_stores_nothing(program):
    cache = ProgramCache(None)
    assert not cache.enabled
    cache.store(_key(), program)
    assert cache.load(_key()) is None
    assert (cache.hits, cache.misses, cache.rebuilt) == (0, 1, 0)


def test_miss_then_hit_across_sessions(tmp_path, program):
    key = _key()
    first = ProgramCache(tmp_path / "cache")  # created on first store
    assert first.load(key) is None
    assert (first.hits, first.misses) == (0, 1)
    first.store(key, program)
    assert _entries(tmp_path / "cache") == [key + SUFFIX]

    second = ProgramCache(str(tmp_path / "cache"))  # a later session
    loaded = second.load(key)
    assert loaded is not None
    assert (second.hits, second.misses, second.rebuilt) == (1, 0, 0)
    x = to_storage(np.ones((3, 4), np.float32), "fp16")
    np.testing.assert_array_equal(loaded.run([x])[0], program.run([x])[0])
    assert loaded.to_bytes() == program.to_bytes()


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_corrupt_entry_is_deleted_and_rebuilt(tmp_path, program, caplog, damage):
    key = _key()
    cache = ProgramCache(tmp_path)
    cache.store(key, program)
    path = tmp_path / (key + SUFFIX)
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        path.write_bytes(data[:-10] + bytes([data[-10] ^ 0x40]) + data[-9:])
    elif damage == "garbage":
        path.write_bytes(os.urandom(300))
    else:
        path.write_bytes(b"")

    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        assert cache.load(key) is None
    assert not path.exists()
    assert (cache.hits, cache.misses, cache.rebuilt) == (0, 1, 1)
    assert any(
        str(path) in r.getMessage() and "rebuilt" in r.getMessage() and r.name == "onyxrt.simnpu"
        for r in caplog.records
    )

    # The caller recompiles and stores; the next load is a hit.
    cache.store(key, compile_group(_group(_model()), "fp16"))
    assert cache.load(key) is not None
    assert (cache.hits, cache.misses, cache.rebuilt) == (1, 1, 1)


def test_store_is_atomic_and_leaves_no_temporary_files(tmp_path, program, monkeypatch, caplog):
    key = _key()
    cache = ProgramCache(tmp_path)
    cache.store(key, program)
    cache.store(key, program)  # overwriting an entry is fine
    assert _entries(tmp_path) == [key + SUFFIX]

    other = _key(options={"precision": "fp32"})

    def failing_replace(src, dst, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        cache.store(other, program)  # logged, not raised
    assert _entries(tmp_path) == [key + SUFFIX]  # no partial entry, no temporary left
    assert any("cannot write" in r.getMessage() for r in caplog.records)


def test_unwritable_directory_is_not_fatal(tmp_path, program, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = ProgramCache(blocker / "cache")
    with caplog.at_level(logging.WARNING, logger="onyxrt.simnpu"):
        cache.store(_key(), program)
    assert cache.load(_key()) is None
    assert cache.stores == 0
    assert not cache.enabled and "cannot create it" in (cache.refused or "")
    assert [str(blocker / "cache") in r.getMessage() for r in caplog.records] == [True]


@pytest.mark.parametrize("key", ["../escape", "a/b", "", "x" * 200, "key.npuprog"])
def test_keys_cannot_escape_the_directory(tmp_path, program, key):
    cache = ProgramCache(tmp_path)
    with pytest.raises(ValueError, match="cache key"):
        cache.store(key, program)
    with pytest.raises(ValueError, match="cache key"):
        cache.load(key)


def test_precision_change_is_a_different_entry(tmp_path):
    cache = ProgramCache(tmp_path)
    group = _group(_model())
    for precision in ("fp16", "fp32"):
        key = cache_key(group, {**OPTIONS, "precision": precision}, VERSION)
        assert cache.load(key) is None
        cache.store(key, compile_group(group, precision))
    assert len(_entries(tmp_path)) == 2
    key32 = cache_key(group, {**OPTIONS, "precision": "fp32"}, VERSION)
    loaded = cache.load(key32)
    assert loaded is not None and loaded.precision == "fp32"
    assert loaded.constants["w"].dtype == np.float32
