"""Models that onnxruntime's own tools make from the project's model builders, run on onyxrt
against onnxruntime — what users hand us after running those tools:

* the transformer optimizer (``onnxruntime.transformers.optimizer.optimize_model``, its
  Python fusions: ``opt_level=0``, which needs no torch) on BERT, GPT-2 and ViT;
* ``quantize_dynamic`` on BERT and an MLP;
* ``quantize_static`` in the QDQ and QOperator formats on a ResNet-style and a
  MobileNet-style CNN (with ``quant_pre_process`` first, as onnxruntime's docs advise, and
  without);
* the MatMulNBits (4-bit, weight-only) quantizer on GPT-2;
* sessions' saved optimized models (``optimized_model_filepath``) at the extended and the
  all level, for all five builders (the all level's NCHWc layout depends on the machine that
  saved it; this machine saves and runs it).

Float models agree within 1e-4 relative to onnxruntime's output. Quantized ones agree with
onnxruntime's unoptimized run within what onnxruntime's own optimized and unoptimized runs
differ by (floored at 1e-5 of the output's magnitude: two runs that agree exactly still
leave float rounding to any other implementation).
"""

from __future__ import annotations

import collections
import logging
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

import onyxrt
from onyxrt.testing import models

ort = pytest.importorskip("onnxruntime")  # a test requirement; absent only outside the tests session

BUILDERS: dict[str, Callable[[], onnx.ModelProto]] = {
    "bert": lambda: models.bert_encoder(layers=2, hidden=64, heads=4, intermediate=128, seq=16, vocab=100),
    "gpt2": lambda: models.gpt2(layers=2, hidden=64, heads=4, seq=16, vocab=100),
    "vit": lambda: models.vit(image=32, patch=8, hidden=64, layers=2, heads=4, num_classes=10),
    "resnet": lambda: models.resnet(depth_blocks=(1, 1), width=8, num_classes=10, image=32),
    "mobilenet": lambda: models.mobilenet_v2(width_mult=0.25, num_classes=10, image=32),
}
TRANSFORMERS = {"bert": "bert", "gpt2": "gpt2", "vit": "vit"}  # builder → optimizer model_type


def feeds_for(model: onnx.ModelProto, batch: int = 2, seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds: symbolic dims become ``batch``; int64 inputs are token ids below 100
    (masks all ones)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        tt = inp.type.tensor_type
        dims = [d.dim_value or batch for d in tt.shape.dim]
        if tt.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = np.ones(dims, np.int64) if "mask" in inp.name else rng.integers(0, 100, dims)
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


def ort_run(path: Path, feeds: dict[str, np.ndarray], level: Any = None) -> list[np.ndarray]:
    so = ort.SessionOptions()
    if level is not None:
        so.graph_optimization_level = level
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"]).run(None, feeds)


def onyxrt_run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return onyxrt.InferenceSession(str(path)).run(None, feeds)


def contrib_ops(path: Path) -> collections.Counter[str]:
    """The operators of the file outside the default domain (what the tool added)."""
    return collections.Counter(f"{n.domain}::{n.op_type}" for n in onnx.load(str(path)).graph.node
                               if n.domain not in ("", "ai.onnx"))


def assert_float_close(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        scale = float(np.max(np.abs(w))) or 1.0
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * scale)


def assert_quantized_close(path: Path, feeds: dict[str, np.ndarray]) -> None:
    unoptimized = ort_run(path, feeds, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    optimized = ort_run(path, feeds, ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    got = onyxrt_run(path, feeds)
    for g, u, o in zip(got, unoptimized, optimized):
        ort_spread = float(np.max(np.abs(o.astype(np.float64) - u))) if u.size else 0.0
        bound = max(ort_spread, 1e-5 * (float(np.max(np.abs(u))) if u.size else 0.0))
        diff = float(np.max(np.abs(g.astype(np.float64) - u))) if u.size else 0.0
        assert diff <= bound, f"{path.name}: onyxrt differs from onnxruntime by {diff:.3g}; onnxruntime's " \
                              f"optimized and unoptimized runs differ by {ort_spread:.3g}"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each builder's model, saved."""
    folder = tmp_path_factory.mktemp("ort_tools")
    paths = {}
    for name, build in BUILDERS.items():
        paths[name] = folder / f"{name}.onnx"
        onnx.save(build(), str(paths[name]))
    return paths


@pytest.fixture(autouse=True)
def _quiet_tools():
    """onnxruntime's tools log and warn at length; the assertions say what matters."""
    logging.disable(logging.WARNING)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield
    logging.disable(logging.NOTSET)


# ------------------------------------------------------------------ transformer optimizer


@pytest.mark.parametrize("name", sorted(TRANSFORMERS))
def test_transformer_optimizer_output(built, tmp_path, name):
    from onnxruntime.transformers.optimizer import optimize_model

    optimized = optimize_model(str(built[name]), model_type=TRANSFORMERS[name], num_heads=4, hidden_size=64,
                               opt_level=0)
    path = tmp_path / f"{name}_fused.onnx"
    optimized.save_model_to_file(str(path))
    added = contrib_ops(path)
    assert added["com.microsoft::SkipLayerNormalization"] >= 1, added  # the tool fused something
    feeds = feeds_for(onnx.load(str(path)))
    assert_float_close(onyxrt_run(path, feeds), ort_run(path, feeds))


# ------------------------------------------------------------------ quantization tools


def _mlp(tmp_path: Path) -> Path:
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(1)
    weights = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
               for n, s in (("w1", (32, 64)), ("b1", (64,)), ("w2", (64, 10)), ("b2", (10,)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["o"]),
             helper.make_node("Add", ["o", "b2"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 10])], weights)
    path = tmp_path / "mlp.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.mark.parametrize("name", ["bert", "mlp"])
def test_quantize_dynamic_output(built, tmp_path, name):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    source = built["bert"] if name == "bert" else _mlp(tmp_path)
    path = tmp_path / f"{name}_dynamic.onnx"
    quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8)
    ops = collections.Counter(n.op_type for n in onnx.load(str(path)).graph.node)
    assert ops["DynamicQuantizeLinear"] or ops["DynamicQuantizeMatMul"], ops
    assert_quantized_close(path, feeds_for(onnx.load(str(source))))
    # onyxrt's optimizer folds each DynamicQuantizeLinear → MatMulInteger → Cast → Mul
    # [→ Add] into com.microsoft's fused products, as onnxruntime's does.
    saved = tmp_path / f"{name}_onyxrt_optimized.onnx"
    so = onyxrt.SessionOptions()
    so.optimized_model_filepath = str(saved)
    onyxrt.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    fused = collections.Counter(n.op_type for n in onnx.load(str(saved)).graph.node)
    assert fused["MatMulInteger"] == 0 and fused["Cast"] < ops["Cast"], fused
    assert fused["DynamicQuantizeMatMul"] + fused["MatMulIntegerToFloat"] == ops["MatMulInteger"], fused


class _Calibration:
    """Four random images: onnxruntime's CalibrationDataReader protocol."""

    def __init__(self, name: str, shape: list[int]) -> None:
        self._batches = iter([{name: np.random.default_rng(i).standard_normal(shape).astype(np.float32)}
                              for i in range(4)])

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._batches, None)


@pytest.mark.parametrize("pre_process", [False, True], ids=["raw", "pre-processed"])
@pytest.mark.parametrize("fmt", ["QDQ", "QOperator"])
@pytest.mark.parametrize("name", ["resnet", "mobilenet"])
def test_quantize_static_output(built, tmp_path, name, fmt, pre_process):
    from onnxruntime.quantization import QuantFormat, quantize_static

    source = built[name]
    model = onnx.load(str(source))
    feeds = feeds_for(model, batch=1)
    if pre_process:
        from onnxruntime.quantization.shape_inference import quant_pre_process

        prepared = tmp_path / f"{name}_prepared.onnx"
        quant_pre_process(str(source), str(prepared))
        source = prepared
    path = tmp_path / f"{name}_{fmt}.onnx"
    inp = model.graph.input[0]
    quantize_static(str(source), str(path), _Calibration(inp.name, list(feeds[inp.name].shape)),
                    quant_format=getattr(QuantFormat, fmt))
    if fmt == "QOperator":
        assert contrib_ops(path)["com.microsoft::QLinearAdd"] >= 1, contrib_ops(path)
    assert_quantized_close(path, feeds)


def test_matmul_nbits_quantizer_output(built, tmp_path):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(built["gpt2"])), block_size=32, is_symmetric=False)
    quantizer.process()
    path = tmp_path / "gpt2_nbits.onnx"
    onnx.save(quantizer.model.model, str(path))
    assert contrib_ops(path)["com.microsoft::MatMulNBits"] >= 4, contrib_ops(path)
    assert_quantized_close(path, feeds_for(onnx.load(str(path))))


# ------------------------------------------------------------------ saved optimized models


@pytest.mark.parametrize("level", ["ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_saved_optimized_model(built, tmp_path, name, level):
    so = ort.SessionOptions()
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    path = tmp_path / f"{name}_{level}.onnx"
    so.optimized_model_filepath = str(path)
    ort.InferenceSession(str(built[name]), so, providers=["CPUExecutionProvider"])
    assert contrib_ops(path), "the saved file holds onnxruntime's own operators"
    feeds = feeds_for(onnx.load(str(built[name])))
    assert_float_close(onyxrt_run(path, feeds), ort_run(path, feeds))
