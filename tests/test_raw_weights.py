"""Large weights read as views of the serialized model (onyxrt.raw_weights): the same
values, the same errors for broken files, and sessions that compute what onnxruntime does."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import onnxruntime
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_helpers import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt.errors import OnyxError
from onyxrt.loader import load_model
from onyxrt.raw_weights import split_raw_weights

RNG = np.random.default_rng(0)
W = RNG.standard_normal((40, 40)).astype(np.float32)          # 6400 bytes: split
W8 = RNG.integers(-128, 128, (64, 80)).astype(np.int8)          # 5120 bytes: split
BIAS = RNG.standard_normal(40).astype(np.float32)               # 160 bytes: kept
W16 = RNG.standard_normal((40, 40)).astype(np.float16)          # 3200 bytes: kept (small)


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        helper.make_node("Add", ["m", "bias"], ["a"], name="add"),
        helper.make_node("Cast", ["w8"], ["w8f"], to=TensorProto.FLOAT, name="cast"),
        helper.make_node("ReduceSum", ["w8f"], ["s"], keepdims=0, name="sum"),
        helper.make_node("Cast", ["w16"], ["w16f"], to=TensorProto.FLOAT, name="cast16"),
        helper.make_node("MatMul", ["a", "w16f"], ["y"], name="matmul16"),
    ]
    return make_model(nodes, [tensor("x", [3, 40])], [tensor("y", [3, 40]), tensor("s", [80])],
                      {"w": W, "bias": BIAS, "w8": W8, "w16": W16})


def test_large_numeric_initializers_become_views_and_the_rest_stays():
    data = _model().SerializeToString()
    loaded = load_model(data, split_weights=True)
    assert sorted(loaded.arrays) == ["w", "w8"]
    np.testing.assert_array_equal(loaded.arrays["w"], W)
    np.testing.assert_array_equal(loaded.arrays["w8"], W8)
    assert loaded.arrays["w8"].dtype == np.int8 and not loaded.arrays["w"].flags.writeable
    tensors = {t.name: t for t in loaded.proto.graph.initializer}
    assert not tensors["w"].raw_data and list(tensors["w"].dims) == [40, 40]
    np.testing.assert_array_equal(numpy_helper.to_array(tensors["bias"]), BIAS)
    np.testing.assert_array_equal(numpy_helper.to_array(tensors["w16"]), W16)
    # Without the option, nothing changes.
    plain = load_model(data)
    assert plain.arrays == {} and numpy_helper.to_array(plain.proto.graph.initializer[0]).shape == (40, 40)


def test_weights_read_from_a_file_are_moved_to_aligned_places_in_its_buffer(tmp_path):
    # numpy copies a misaligned array whole before take() and friends: the weights of a
    # file are moved to 64-byte boundaries of the buffer it was read into, in file order.
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    loaded = load_model(str(path), split_weights=True)
    assert sorted(loaded.arrays) == ["w", "w8"]
    for name, expected in (("w", W), ("w8", W8)):
        value = loaded.arrays[name]
        np.testing.assert_array_equal(value, expected)
        assert value.ctypes.data % 64 == 0 and value.flags.aligned and not value.flags.writeable
    assert loaded.arrays["w"].base is not None and loaded.arrays["w8"].base is not None  # views: no copy


def test_a_session_over_split_weights_computes_what_onnxruntime_does(tmp_path):
    model = _model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    x = RNG.standard_normal((3, 40)).astype(np.float32)
    expected = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for source in (str(path), model.SerializeToString()):
        for level in (onyxrt.GraphOptimizationLevel.ORT_DISABLE_ALL, onyxrt.GraphOptimizationLevel.ORT_ENABLE_ALL):
            so = onyxrt.SessionOptions()
            so.graph_optimization_level = level
            got = onyxrt.InferenceSession(source, so).run(None, {"x": x})
            for g, e in zip(got, expected, strict=True):
                np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


def test_a_split_weight_can_still_be_replaced():
    so = onyxrt.SessionOptions()
    so.add_initializer("w", onyxrt.OrtValue.ortvalue_from_numpy(np.eye(40, dtype=np.float32)))
    x = RNG.standard_normal((3, 40)).astype(np.float32)
    y, _ = onyxrt.InferenceSession(_model().SerializeToString(), so).run(None, {"x": x})
    np.testing.assert_allclose(y, (x + BIAS) @ W16.astype(np.float32), rtol=1e-4, atol=1e-4)


def test_an_optimized_model_is_saved_with_the_split_weights_bytes(tmp_path):
    so = onyxrt.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "optimized.onnx")
    onyxrt.InferenceSession(_model().SerializeToString(), so)
    saved = {t.name: numpy_helper.to_array(t) for t in onnx.load(so.optimized_model_filepath).graph.initializer}
    assert any(v.shape == (40, 40) and np.array_equal(v, W) for v in saved.values())


def test_bytes_that_disagree_with_the_shape_fail_as_before():
    model = _model()
    model.graph.initializer[0].dims[0] = 41  # w: 6400 bytes for 41 x 40 floats
    for split in (False, True):
        loaded = load_model(model.SerializeToString(), split_weights=split)
        assert "w" not in loaded.arrays
    with pytest.raises(OnyxError, match=r"initializer 'w' cannot be read: its data holds 6400 bytes but shape \(41, 40\)"):
        onyxrt.InferenceSession(model.SerializeToString())


def test_layouts_the_walk_does_not_know_are_parsed_whole():
    data = _model().SerializeToString()
    # The graph written twice (protobuf merges the two): left to protobuf.
    graph = data[data.index(b"\x3a"):]  # ModelProto.graph is field 7 (tag 0x3a)
    doubled = data + graph
    assert split_raw_weights(doubled, 16) == (doubled, [])
    # Garbage after the graph (a group start, wire type 3): not split, and the parse
    # decides, as without the option.
    assert split_raw_weights(data + b"\x0b", 16) == (data + b"\x0b", [])


def _outcome(data: bytes, split: bool, folder=None) -> tuple[str, object]:
    source: object = data
    if folder is not None:  # from a file: the loader's own buffer, rearranged in place
        source = os.path.join(folder, "m.onnx")
        with open(source, "wb") as fh:
            fh.write(data)
    try:
        loaded = load_model(source, split_weights=split)
    except OnyxError as exc:
        return type(exc).__name__, str(exc).replace(str(source), "<bytes>")
    values = {}
    for t in loaded.proto.graph.initializer:
        if t.name in loaded.arrays:
            values[t.name] = loaded.arrays[t.name].tobytes()
        else:
            try:
                values[t.name] = numpy_helper.to_array(t).tobytes()
            except Exception as exc:  # noqa: BLE001 - compared between the two loads
                values[t.name] = type(exc).__name__
    loaded.proto.graph.ClearField("initializer")
    return "ok", (loaded.proto.SerializeToString(deterministic=True), values)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_damaged_files_load_or_fail_the_same_with_and_without_splitting(data):
    good = _model().SerializeToString()
    cut = data.draw(st.integers(1, len(good)))
    damaged = bytearray(good[:cut])
    for _ in range(data.draw(st.integers(0, 4))):
        if damaged:
            damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    expected = _outcome(bytes(damaged), False)
    assert _outcome(bytes(damaged), True) == expected
    with tempfile.TemporaryDirectory() as folder:
        assert _outcome(bytes(damaged), True, folder) == expected
