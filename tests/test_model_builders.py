"""The model builders in ``onyxrt.testing.models``: valid ONNX that onnxruntime runs correctly."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import onnx
import pytest

from onyxrt.testing import models

ort = pytest.importorskip("onnxruntime")

VOCAB = 100
SEQ = 16


def _session(model: onnx.ModelProto):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return _session(model).run(None, feeds)


def _random_feeds(model: onnx.ModelProto, batch: int, rng: np.random.Generator) -> dict:
    feeds = {}
    for value in model.graph.input:
        dims = [
            d.dim_value if d.HasField("dim_value") else batch
            for d in value.type.tensor_type.shape.dim
        ]
        if value.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            if value.name == "attention_mask":
                mask = np.ones(dims, dtype=np.int64)
                mask[:, dims[1] // 2 :] = 0  # padding at the end
                mask[0, :] = 1  # one row unpadded
                feeds[value.name] = mask
            else:
                feeds[value.name] = rng.integers(0, VOCAB, dims, dtype=np.int64)
        else:
            feeds[value.name] = rng.standard_normal(dims, dtype=np.float32)
    return feeds


def _declared_dims(value: onnx.ValueInfoProto) -> list[int | str]:
    return [
        d.dim_value if d.HasField("dim_value") else d.dim_param
        for d in value.type.tensor_type.shape.dim
    ]


SMALL: dict[str, tuple[Callable[..., onnx.ModelProto], dict, list[list[int]]]] = {
    # name: (builder, kwargs, expected output shapes for batch 2)
    "resnet": (
        models.resnet,
        dict(depth_blocks=(1, 1), width=8, num_classes=10, image=32),
        [[2, 10]],
    ),
    "resnet_3stage": (
        models.resnet,
        dict(depth_blocks=(2, 1, 1), width=4, num_classes=7, image=48),
        [[2, 7]],
    ),
    "mobilenet_v2": (
        models.mobilenet_v2,
        dict(width_mult=0.25, num_classes=10, image=32),
        [[2, 10]],
    ),
    "mobilenet_v2_blocks": (
        models.mobilenet_v2,
        dict(num_classes=5, image=32, blocks=[(1, 16, 1, 1), (6, 24, 2, 2)]),
        [[2, 5]],
    ),
    "bert": (
        models.bert_encoder,
        dict(layers=1, hidden=64, heads=4, intermediate=128, seq=SEQ, vocab=VOCAB),
        [[2, SEQ, 64]],
    ),
    "gpt2": (
        models.gpt2,
        dict(layers=2, hidden=64, heads=4, seq=SEQ, vocab=VOCAB),
        [[2, SEQ, VOCAB]],
    ),
    "vit": (
        models.vit,
        dict(image=32, patch=8, hidden=64, layers=2, heads=4, mlp=128, num_classes=10),
        [[2, 10]],
    ),
    "tiny_cnn": (models.tiny_cnn, {}, [[2, 10]]),
    "add_chain": (models.add_chain, dict(n=20, shape=(3, 4)), [[3, 4]]),
}


@pytest.fixture(scope="module", params=sorted(SMALL))
def built(request) -> tuple[str, onnx.ModelProto, list[list[int]]]:
    builder, kwargs, shapes = SMALL[request.param]
    return request.param, builder(**kwargs), shapes


def test_model_is_valid(built) -> None:
    _, model, _ = built
    onnx.checker.check_model(model, full_check=True)
    assert model.ir_version == 10
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    for value in [*model.graph.input, *model.graph.output]:
        assert value.type.tensor_type.HasField("shape")
    for init in model.graph.initializer:
        if init.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE):
            assert init.data_type == onnx.TensorProto.FLOAT, init.name


def test_node_names_unique_and_set(built) -> None:
    _, model, _ = built
    names = [node.name for node in model.graph.node]
    assert all(names)
    assert len(set(names)) == len(names)
    tensors = [t for node in model.graph.node for t in node.output]
    tensors += [init.name for init in model.graph.initializer]
    assert len(set(tensors)) == len(tensors)


def test_runs_in_onnxruntime(built) -> None:
    name, model, shapes = built
    feeds = _random_feeds(model, batch=2, rng=np.random.default_rng(1))
    outputs = _run(model, feeds)
    assert [list(o.shape) for o in outputs] == shapes
    for out in outputs:
        assert out.dtype == np.float32
        assert np.isfinite(out).all(), name
        assert np.abs(out).max() > 0, name


def test_batch_dimension_is_symbolic_by_default(built) -> None:
    name, model, _ = built
    if name == "add_chain":
        pytest.skip("add_chain has a fixed shape")
    for value in [*model.graph.input, *model.graph.output]:
        assert _declared_dims(value)[0] == "batch"


def test_deterministic_per_seed() -> None:
    kwargs = dict(layers=1, hidden=32, heads=2, seq=8, vocab=VOCAB)
    a, b = models.gpt2(**kwargs, seed=3), models.gpt2(**kwargs, seed=3)
    c = models.gpt2(**kwargs, seed=4)
    assert a.SerializeToString() == b.SerializeToString()
    assert a.graph.initializer[0].raw_data != c.graph.initializer[0].raw_data


def test_fixed_batch() -> None:
    model = models.resnet(depth_blocks=(1,), width=4, num_classes=3, image=16, batch=3)
    onnx.checker.check_model(model, full_check=True)
    assert _declared_dims(model.graph.input[0]) == [3, 3, 16, 16]
    assert _declared_dims(model.graph.output[0]) == [3, 3]
    (out,) = _run(model, _random_feeds(model, 3, np.random.default_rng(0)))
    assert out.shape == (3, 3)


@pytest.mark.parametrize("opset", [13, 17, 18, 21])
def test_transformers_across_opsets(opset: int) -> None:
    rng = np.random.default_rng(opset)
    bert_kwargs = dict(layers=1, hidden=32, heads=2, intermediate=64, seq=8, vocab=VOCAB)
    base = models.bert_encoder(**bert_kwargs)
    other = models.bert_encoder(**bert_kwargs, opset=opset)
    onnx.checker.check_model(other, full_check=True)
    assert other.opset_import[0].version == opset
    ops = {n.op_type for n in other.graph.node}
    assert ("LayerNormalization" in ops) == (opset >= 17)
    feeds = _random_feeds(base, 2, rng)
    np.testing.assert_allclose(_run(other, feeds)[0], _run(base, feeds)[0], rtol=1e-4, atol=1e-4)
    for model in (
        models.gpt2(layers=1, hidden=32, heads=2, seq=8, vocab=VOCAB, opset=opset),
        models.vit(
            image=16, patch=8, hidden=32, layers=1, heads=2, mlp=64, num_classes=4, opset=opset
        ),
        models.mobilenet_v2(
            width_mult=0.25, num_classes=4, image=32, opset=opset, blocks=[(6, 24, 2, 2)]
        ),
    ):
        onnx.checker.check_model(model, full_check=True)
        (out,) = _run(model, _random_feeds(model, 2, rng))
        assert np.isfinite(out).all()


def test_old_opset_rejected() -> None:
    with pytest.raises(ValueError, match="opset"):
        models.tiny_cnn(opset=12)


def test_export_patterns() -> None:
    bert = Counter(
        n.op_type
        for n in models.bert_encoder(
            layers=2, hidden=32, heads=2, intermediate=64, seq=8, vocab=VOCAB
        ).graph.node
    )
    assert bert["LayerNormalization"] == 1 + 2 * 2
    assert bert["Erf"] == 2 and bert["Softmax"] == 2
    assert bert["Unsqueeze"] == 1 and bert["Cast"] == 1
    gpt = models.gpt2(layers=2, hidden=32, heads=2, seq=8, vocab=VOCAB)
    ops = Counter(n.op_type for n in gpt.graph.node)
    assert ops["Split"] == 2 and ops["Where"] == 2 and ops["Tanh"] == 2 and ops["Pow"] == 2
    assert ops["LayerNormalization"] == 2 * 2 + 1
    # The lm_head uses the token embedding itself (tied), transposed.
    lm_head = next(n for n in gpt.graph.node if n.name == "lm_head.transpose")
    assert list(lm_head.input) == ["wte.weight"]
    mbv2 = models.mobilenet_v2(width_mult=0.25, num_classes=4, image=32)
    clips = [n for n in mbv2.graph.node if n.op_type == "Clip"]
    assert clips and all(len(n.input) == 3 for n in clips)
    depthwise = [
        n
        for n in mbv2.graph.node
        if n.op_type == "Conv" and onnx.helper.get_node_attr_value(n, "group") > 1
    ]
    assert len(depthwise) == 17
    resnet = models.resnet()
    names = {n.name for n in resnet.graph.node}
    assert {"conv1", "bn1", "maxpool", "layer1.0.conv1", "layer1.0.downsample.0", "fc"} <= names
    assert sum(n.op_type == "Conv" for n in resnet.graph.node) == 53
    assert sum(n.op_type == "Add" for n in resnet.graph.node) == 16


def test_add_chain_value() -> None:
    n = 50
    model = models.add_chain(n=n, shape=(2,))
    assert len(model.graph.node) == n
    assert len({init.raw_data for init in model.graph.initializer}) == n
    x = np.array([1.0, -2.0], dtype=np.float32)
    (y,) = _run(model, {"x": x})
    np.testing.assert_allclose(y, x + 1e-3 * n * (n + 1) / 2, rtol=1e-5)


def test_gpt2_is_causal() -> None:
    model = models.gpt2(layers=2, hidden=64, heads=4, seq=SEQ, vocab=VOCAB, seed=5)
    session = _session(model)
    rng = np.random.default_rng(2)
    ids = rng.integers(0, VOCAB, (2, SEQ), dtype=np.int64)
    (base,) = session.run(None, {"input_ids": ids})
    for t in (SEQ // 2, SEQ - 1):
        changed = ids.copy()
        changed[:, t] = (changed[:, t] + 1 + rng.integers(0, VOCAB - 1)) % VOCAB
        (out,) = session.run(None, {"input_ids": changed})
        np.testing.assert_allclose(out[:, :t], base[:, :t], rtol=1e-5, atol=1e-5)
        assert not np.allclose(out[:, t:], base[:, t:], atol=1e-4)


def test_bert_masked_positions_are_ignored() -> None:
    model = models.bert_encoder(
        layers=2, hidden=64, heads=4, intermediate=128, seq=SEQ, vocab=VOCAB
    )
    session = _session(model)
    rng = np.random.default_rng(3)
    ids = rng.integers(0, VOCAB, (2, SEQ), dtype=np.int64)
    mask = np.ones((2, SEQ), dtype=np.int64)
    mask[:, 10:] = 0
    mask[1, 3] = 0  # a hole in the middle, too
    keep = mask.astype(bool)
    (base,) = session.run(None, {"input_ids": ids, "attention_mask": mask})
    changed = ids.copy()
    changed[~keep] = (changed[~keep] + 1 + rng.integers(0, VOCAB - 1, int((~keep).sum()))) % VOCAB
    assert (changed[~keep] != ids[~keep]).all()
    (out,) = session.run(None, {"input_ids": changed, "attention_mask": mask})
    np.testing.assert_allclose(out[keep], base[keep], rtol=1e-5, atol=1e-5)
    # Unmasking the padding does change the visible positions.
    (unmasked,) = session.run(None, {"input_ids": ids, "attention_mask": np.ones_like(mask)})
    assert not np.allclose(unmasked[keep], base[keep], atol=1e-4)
