"""Outputs match onnxruntime (used here only as a test oracle) on real architectures.

Each model mirrors a standard export (see ``onyxrt.testing.models``): a ResNet bottleneck
stack, MobileNetV2 inverted residuals, a BERT encoder with an attention mask and a GPT-2
block with a causal mask, at reduced width so the suite stays fast. The bar is a max
relative error below 1e-4 in float32, measured as ``max|onyxrt - ort| / max|ort|`` (the
max-norm relative error), and elementwise ``rtol=1e-4`` with an absolute floor of 1e-6 of
the output's scale for entries near zero.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import onyxrt
from onyxrt.testing import models

ort = pytest.importorskip("onnxruntime")

CASES = {
    "resnet_bottlenecks": lambda: models.resnet(depth_blocks=(2, 1, 1), width=16, num_classes=10, image=64),
    "mobilenet_v2_inverted_residuals": lambda: models.mobilenet_v2(
        width_mult=0.5, num_classes=10, image=64, blocks=[(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 2, 2)]
    ),
    "bert_encoder_with_mask": lambda: models.bert_encoder(
        layers=2, hidden=64, heads=4, intermediate=256, seq=16, vocab=100
    ),
    "gpt2_causal_blocks": lambda: models.gpt2(layers=2, hidden=64, heads=4, seq=16, vocab=100),
}


def _feeds(model: onnx.ModelProto, batch: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    feeds = {}
    for inp in model.graph.input:
        dims = [d.dim_value if d.HasField("dim_value") else batch for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            if "mask" in inp.name:
                mask = np.ones(dims, np.int64)
                mask[:, dims[1] // 2 + 1 :] = 0  # padded tail
                feeds[inp.name] = mask
            else:
                feeds[inp.name] = rng.integers(0, 100, size=dims, dtype=np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(dims).astype(np.float32)
    return feeds


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_onnxruntime(name: str, batch: int) -> None:
    model = CASES[name]()
    data = model.SerializeToString()
    feeds = _feeds(model, batch, np.random.default_rng(batch))
    ours = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the plain graph
    theirs = ort.InferenceSession(data, so, providers=["CPUExecutionProvider"]).run(None, feeds)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype and a.shape == b.shape
        scale = float(np.max(np.abs(b)))
        assert scale > 0
        rel = float(np.max(np.abs(a.astype(np.float64) - b))) / scale
        assert rel < 1e-4, f"{name}: max relative error {rel:.2e}"
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6 * scale)
