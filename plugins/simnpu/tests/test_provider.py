"""SimNPUExecutionProvider end to end: the conformance suite, real models, memory, cache."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.testing import models
from onyxrt.testing.provider_suite import ProviderConformance

NPU = "SimNPUExecutionProvider"
CPU = "CPUExecutionProvider"


class TestSimNPUConformanceFP32(ProviderConformance):
    provider = NPU
    options = {"precision": "fp32"}
    rtol, atol = 1e-4, 1e-6


class TestSimNPUConformanceFP16(ProviderConformance):
    provider = NPU
    options = {"precision": "fp16"}
    rtol, atol = 1e-2, 1e-3


# -- helpers -------------------------------------------------------------------------


def _session(model, options=None, so=None, providers=None):
    providers = providers or [(NPU, dict(options or {})), CPU]
    return ort.InferenceSession(model.SerializeToString(), so, providers=providers)


def _static(so=None, batch=1):
    """NPUs need static shapes: pin the models' symbolic batch dim."""
    so = so or ort.SessionOptions()
    so.add_free_dimension_override_by_name("batch", batch)
    return so


def _max_rel(a, b):
    return float(np.max(np.abs(a.astype(np.float64) - b)) / np.max(np.abs(b)))


def _resnet():
    return models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32)


def _bert():
    return models.bert_encoder(layers=1, hidden=64, heads=4, intermediate=128, seq=16, vocab=100)


def _image(batch=1, seed=0):
    return np.random.default_rng(seed).standard_normal((batch, 3, 32, 32)).astype(np.float32)


def _tokens(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 100, size=(1, 16), dtype=np.int64)
    mask = np.ones((1, 16), np.int64)
    mask[:, 12:] = 0
    return {"input_ids": ids, "attention_mask": mask}


# -- placement and results on real architectures ----------------------------------------


def test_resnet_runs_as_fused_npu_groups_matching_cpu_in_fp16():
    model = _resnet()
    x = _image()
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})
    session = _session(model, so=_static())
    report = session.placement
    assert report.groups, report
    assert all(g.provider == NPU and g.name.startswith(f"{NPU}_") for g in report.groups)
    # Every ResNet op (after the optimizer folded BatchNormalization into Conv) is in the
    # NPU's op set.
    assert {n.provider for n in report.nodes} == {NPU}
    assert len(report.nodes) == len(model.graph.node) - sum(
        n.op_type == "BatchNormalization" for n in model.graph.node
    )
    copies = {(c.value, c.src, c.dst): c.nbytes for c in report.copies_per_run}
    assert copies == {("input", "cpu", "simnpu:0"): 1 * 3 * 32 * 32 * 4,
                      ("logits", "simnpu:0", "cpu"): 1 * 10 * 4}
    (got,) = session.run(None, {"input": x})
    assert got.dtype == np.float32 and got.shape == expected.shape
    assert _max_rel(got, expected) < 1e-2


def test_dynamic_batch_is_refused_with_the_reason():
    session = _session(_resnet())  # batch stays symbolic
    report = session.placement
    assert NPU not in report.providers_used
    refusal = report.refusals_for("conv1")[0]
    assert refusal.provider == NPU and refusal.category == "shape" and "dynamic" in refusal.reason


def test_bert_splits_between_npu_and_cpu_with_copies_and_device_time(tmp_path):
    model = _bert()
    feeds = _tokens()
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    so = _static()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "bert")
    session = _session(model, so=so)
    report = session.placement
    by_provider = report.nodes_by_provider()
    assert by_provider[NPU] and by_provider[CPU]
    assert len(report.groups) >= 2 and report.partitions >= 3
    gather = [n.node for n in report.nodes if n.op_type == "Gather"]
    assert gather and all(report.provider_of(n) == CPU for n in gather)
    assert any(r.category == "op" for r in report.refusals if r.provider == NPU)
    per_run = report.copies_per_run
    assert per_run and all(c.nbytes and c.nbytes > 0 for c in per_run)
    assert {c.src for c in per_run} | {c.dst for c in per_run} == {"cpu", "simnpu:0"}
    (got,) = session.run(None, feeds)
    assert _max_rel(got, expected) < 1e-2
    events = json.loads(Path(session.end_profiling()).read_text())
    fused = [e for e in events if e.get("cat") == "Node" and e["args"].get("kind") == "fused"]
    assert fused and all(e["args"]["provider"] == NPU for e in fused)
    assert all(e["args"]["device_time_us"] > 0 for e in fused)
    copies = [e for e in events if e.get("cat") == "Node" and e["args"].get("kind") == "copy"]
    assert copies  # copies between memory spaces are in the trace too


# -- options ------------------------------------------------------------------------------


def test_options_are_validated_with_suggestions():
    from onyxrt.errors import InvalidProviderOption

    with pytest.raises(InvalidProviderOption, match="Did you mean 'precision'"):
        _session(_resnet(), {"precison": "fp32"}, so=_static())
    with pytest.raises(InvalidProviderOption, match="'fp16'"):
        _session(_resnet(), {"precision": "fp8"}, so=_static())
    session = _session(_resnet(), {"memory_limit": "64MiB", "tops": "2.5"}, so=_static())
    options = session.get_provider_options()[NPU]
    assert options["memory_limit"] == str(64 << 20) and options["tops"] == "2.5"


def test_fp32_precision_matches_cpu_closely():
    model = _resnet()
    x = _image()
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})
    (got,) = _session(model, {"precision": "fp32"}, so=_static()).run(None, {"input": x})
    assert _max_rel(got, expected) < 1e-5


def test_min_subgraph_size_keeps_small_groups_on_cpu():
    session = _session(_bert(), {"min_subgraph_size": 1000}, so=_static())
    assert NPU not in session.placement.providers_used
    reasons = [r.reason for r in session.placement.refusals if r.provider == NPU]
    assert any("min_subgraph_size=1000" in r for r in reasons)


# -- memory -------------------------------------------------------------------------------


def _weights_bytes_fp16(model):
    return sum(
        int(np.prod(t.dims)) * 2 for t in model.graph.initializer if t.data_type == TensorProto.FLOAT
    )


def test_memory_limit_below_the_weights_splits_or_refuses_and_stays_correct():
    model = _resnet()
    x = _image()
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, {"input": x})
    full = _session(model, so=_static()).placement
    assert len(full.groups) == 1
    limit = _weights_bytes_fp16(model) // 2  # half the weights fit
    session = _session(model, {"memory_limit": limit}, so=_static())
    report = session.placement
    memory_refusals = [r for r in report.refusals if r.category == "memory"]
    assert memory_refusals, report
    assert all("memory_limit" in r.reason for r in memory_refusals)
    assert CPU in report.providers_used  # what does not fit runs on CPU
    (got,) = session.run(None, {"input": x})
    assert _max_rel(got, expected) < 1e-2
    stats = session.memory_stats()[NPU]
    assert stats["reserved"] <= limit and stats["peak_in_use"] <= limit


def test_tiny_memory_limit_keeps_everything_on_cpu_without_crashing():
    model = _resnet()
    session = _session(model, {"memory_limit": 1024}, so=_static())
    assert NPU not in session.placement.providers_used
    (got,) = session.run(None, {"input": _image()})
    assert got.shape == (1, 10)


# -- compile cache --------------------------------------------------------------------------


def _npu(session):
    return next(p for p in session._providers if p.name == NPU)


def test_compile_cache_is_reused_invalidated_and_rebuilt(tmp_path):
    model = _resnet()
    x = _image()
    options = {"cache_dir": str(tmp_path / "cache")}
    first = _session(model, options, so=_static())
    cache = _npu(first).cache
    assert (cache.hits, cache.misses) == (0, 1)
    (reference,) = first.run(None, {"input": x})

    second = _session(model, options, so=_static())
    assert (_npu(second).cache.hits, _npu(second).cache.misses) == (1, 0)
    np.testing.assert_array_equal(second.run(None, {"input": x})[0], reference)

    changed = _session(model, {**options, "precision": "fp32"}, so=_static())
    assert (_npu(changed).cache.hits, _npu(changed).cache.misses) == (0, 1)

    entries = sorted((tmp_path / "cache").iterdir())
    assert len(entries) == 2
    for entry in entries:  # truncate every cached program
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    rebuilt = _session(model, options, so=_static())
    npu_cache = _npu(rebuilt).cache
    assert npu_cache.hits == 0 and npu_cache.rebuilt == 1
    np.testing.assert_array_equal(rebuilt.run(None, {"input": x})[0], reference)


# -- NPU and CPU together, parallel branches ----------------------------------------------


def _two_branch_model():
    """Two branches from one input: a Conv tower the NPU runs, and an Erf tower it does not."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) / 4).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((8, 8, 3, 3)) / 8).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="npu.conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="npu.relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="npu.conv2", pads=[1, 1, 1, 1]),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="npu.pool"),
        helper.make_node("Erf", ["x"], ["e"], name="cpu.erf"),
        helper.make_node("ReduceMean", ["e"], ["m"], name="cpu.mean", keepdims=1, axes=[1, 2, 3]),
        helper.make_node("Add", ["g", "m"], ["y"], name="join"),
    ]
    graph = helper.make_graph(
        nodes, "branches",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8, 1, 1])],
        [w1, w2],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_npu_and_cpu_branches_in_parallel_match_cpu_only():
    model = _two_branch_model()
    x = np.random.default_rng(3).standard_normal((2, 3, 16, 16)).astype(np.float32)
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.inter_op_num_threads = 2
    session = _session(model, so=so)
    placed = session.placement.nodes_by_provider()
    assert set(placed[NPU]) >= {"npu.conv1", "npu.relu1", "npu.conv2", "npu.pool"}
    assert {"cpu.erf", "cpu.mean"} <= set(placed[CPU])
    results = []

    def worker():
        for _ in range(5):
            results.append(session.run(None, {"x": x})[0])

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 15
    for got in results:
        assert _max_rel(got, expected) < 1e-2


def test_int8_precision_absorbs_qdq_around_supported_ops():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.integers(-20, 20, (4, 3, 3, 3)).astype(np.int8), "w_q")
    inits = [
        w,
        numpy_helper.from_array(np.array(0.05, np.float32), "x_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "x_zp"),
        numpy_helper.from_array(np.array(0.02, np.float32), "w_scale"),
        numpy_helper.from_array(np.array(0, np.int8), "w_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="q_x"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["wd"], name="dq_w"),
        helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    # The CPU provider has no Q/DQ kernels yet (operator coverage, issue #5): onnxruntime
    # is the oracle here, and the non-int8 session below keeps Q/DQ off the NPU.
    onnxruntime = pytest.importorskip("onnxruntime")
    (expected,) = onnxruntime.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    int8 = _session(model, {"precision": "int8"})
    assert set(int8.placement.nodes_by_provider()[NPU]) == {"q_x", "dq_x", "dq_w", "conv", "relu"}
    (got,) = int8.run(None, {"x": x})
    assert _max_rel(got, expected) < 1e-2
    from onyxrt.graph import Graph
    from onyxrt_simnpu.capability import plan_capability
    from onyxrt_simnpu.provider import SimNPUExecutionProvider

    inferred = onnx.shape_inference.infer_shapes(model)
    graph = Graph.from_proto(inferred.graph, {"": 19})
    fp16 = SimNPUExecutionProvider.option_schema.validate(NPU, {"precision": "fp16"})
    refused = {r.node for r in plan_capability(graph, fp16).refusals}
    assert {"q_x", "dq_x", "dq_w"} <= refused  # QDQ is absorbed only in int8 mode


def test_device_is_virtual_npu_and_listed():
    devices = [d for d in ort.get_ep_devices() if d.ep_name == NPU]
    assert devices and devices[0].device.type == "npu" and devices[0].device.virtual
    assert NPU in ort.get_available_providers()
    assert ort.get_available_providers()[-1] == CPU


def test_onnx_model_with_static_shapes_loads_from_file(tmp_path):
    model = _resnet()
    path = tmp_path / "resnet.onnx"
    onnx.save_model(model, path)
    session = ort.InferenceSession(str(path), _static(), providers=[NPU, CPU])
    assert session.get_providers() == [NPU, CPU]
    assert session.run(None, {"input": _image()})[0].shape == (1, 10)


def test_compiling_many_groups_shows_progress_on_stderr(tmp_path):
    # Relu runs on the NPU, Abs does not (not in its op set): 6 NPU groups split by the CPU.
    nodes, prev = [], "x"
    for i in range(6):
        nodes.append(helper.make_node("Relu", [prev], [f"r{i}"], name=f"relu{i}"))
        nodes.append(helper.make_node("Abs", [f"r{i}"], [f"a{i}"], name=f"abs{i}"))
        prev = f"a{i}"
    graph = helper.make_graph(
        nodes, "groups", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [2, 8])],
    )
    path = tmp_path / "groups.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    code = (
        "import onyxrt, sys\n"
        f"s = onyxrt.InferenceSession({str(path)!r}, providers=[{NPU!r}, {CPU!r}])\n"
        f"print(len(s.placement.groups))\n"
    )
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ONYXRT_PROGRESS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "6"
    lines = [line for line in proc.stderr.splitlines() if "compiling groups" in line]
    assert lines and "6/6" in lines[-1], proc.stderr
