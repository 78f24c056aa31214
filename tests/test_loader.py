"""Reading models with external data, and refusing external data that is unsafe.

An ONNX file can point at weight files by relative path. onyxrt loads those itself so it
can refuse references that leave the model's folder (absolute paths, ``..``, symlinks) or
read past the end of the file — with a message saying which initializer and why.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.errors import InvalidModel, UnsafeExternalData
from onyxrt.loader import load_model

W = np.arange(12, dtype=np.float32).reshape(4, 3) / 4
B = np.array([1.0, -2.0, 3.0], np.float32)
X = np.arange(8, dtype=np.float32).reshape(2, 4) - 4


def _expected(x: np.ndarray) -> np.ndarray:
    return x @ W + B


def _model() -> onnx.ModelProto:
    """y = x @ w + b with two initializers (48 and 12 bytes)."""
    return make_model(
        [
            helper.make_node("MatMul", ["x", "w"], ["s"], name="mm"),
            helper.make_node("Add", ["s", "b"], ["y"], name="add"),
        ],
        [tensor("x", ["N", 4])],
        [tensor("y", ["N", 3])],
        {"w": W, "b": B},
    )


def _save_external(folder: Path, model: onnx.ModelProto | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.onnx"
    onnx.save_model(
        model if model is not None else _model(),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location="weights.bin",
        size_threshold=0,
    )
    return path


def _tamper(path: Path, initializer: str, **entries: str) -> None:
    """Rewrite ``path`` with ``initializer``'s external_data entries changed."""
    proto = onnx.load(str(path), load_external_data=False)
    (t,) = [t for t in proto.graph.initializer if t.name == initializer]
    current = {e.key: e.value for e in t.external_data}
    current.update(entries)
    del t.external_data[:]
    for key, value in current.items():
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    path.write_bytes(proto.SerializeToString())


def _run(source) -> np.ndarray:
    sess = ort.InferenceSession(source, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": X})[0]


# -- loading -------------------------------------------------------------------------------


def test_external_data_model_loads_by_path(tmp_path: Path):
    path = _save_external(tmp_path / "m")
    assert sorted(os.listdir(path.parent)) == ["model.onnx", "weights.bin"]
    assert path.stat().st_size < W.nbytes + B.nbytes + 400  # the weights really are outside
    np.testing.assert_allclose(_run(str(path)), _expected(X), rtol=1e-6)


def test_external_data_model_loads_by_pathlike(tmp_path: Path):
    path = _save_external(tmp_path / "m")
    np.testing.assert_allclose(_run(path), _expected(X), rtol=1e-6)


def test_external_data_resolved_against_the_model_folder_not_cwd(tmp_path, monkeypatch):
    path = _save_external(tmp_path / "m")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    np.testing.assert_allclose(_run(str(path)), _expected(X), rtol=1e-6)


def test_relative_model_path_with_external_data(tmp_path, monkeypatch):
    _save_external(tmp_path / "m")
    monkeypatch.chdir(tmp_path)
    np.testing.assert_allclose(_run(os.path.join("m", "model.onnx")), _expected(X), rtol=1e-6)


def test_one_file_per_tensor_external_data(tmp_path: Path):
    folder = tmp_path / "m"
    folder.mkdir()
    path = folder / "model.onnx"
    onnx.save_model(
        _model(),
        str(path),
        save_as_external_data=True,
        all_tensors_to_one_file=False,
        size_threshold=0,
    )
    assert len(os.listdir(folder)) == 3
    np.testing.assert_allclose(_run(str(path)), _expected(X), rtol=1e-6)


def test_location_with_dotdot_that_stays_inside_is_allowed(tmp_path: Path):
    path = _save_external(tmp_path / "m")
    (path.parent / "sub").mkdir()
    for name in ("w", "b"):
        _tamper(path, name, location="sub/../weights.bin")
    np.testing.assert_allclose(_run(str(path)), _expected(X), rtol=1e-6)


def test_symlink_inside_the_folder_to_a_file_inside_is_allowed(tmp_path: Path):
    path = _save_external(tmp_path / "m")
    (path.parent / "alias.bin").symlink_to(path.parent / "weights.bin")
    for name in ("w", "b"):
        _tamper(path, name, location="alias.bin")
    np.testing.assert_allclose(_run(str(path)), _expected(X), rtol=1e-6)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["ModelProto", "bytes"])
def test_model_without_a_folder_never_reads_the_working_directory(tmp_path, monkeypatch, as_bytes):
    """A model given as bytes or a ModelProto has no folder. onnxruntime 1.32 reads its
    external data from the working directory; a server loading uploaded bytes would hand
    out any file there (`location: "secrets.txt"`). onyxrt refuses, naming the tensor, the
    file and the two ways to give the folder."""
    path = _save_external(tmp_path / "m")
    proto = onnx.load(str(path), load_external_data=False)
    monkeypatch.chdir(path.parent)  # the weights are right there: still not read
    with pytest.raises(UnsafeExternalData) as err:
        _run(proto.SerializeToString() if as_bytes else proto)
    message = str(err.value)
    assert "initializer 'w'" in message and "'weights.bin'" in message
    assert "session.model_external_initializers_file_folder_path" in message
    assert "file path" in message


@pytest.mark.parametrize("as_bytes", [False, True], ids=["ModelProto", "bytes"])
def test_model_without_a_folder_reads_the_folder_the_caller_names(tmp_path, monkeypatch, as_bytes):
    path = _save_external(tmp_path / "m")
    proto = onnx.load(str(path), load_external_data=False)
    monkeypatch.chdir(tmp_path)
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.model_external_initializers_file_folder_path", "m")
    sess = ort.InferenceSession(
        proto.SerializeToString() if as_bytes else proto, opts, providers=["CPUExecutionProvider"]
    )
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(X), rtol=1e-6)


def test_the_named_folder_replaces_the_model_folder_for_a_path_too(tmp_path):
    """As in onnxruntime: with the folder named, external data is looked up only there."""
    path = _save_external(tmp_path / "m")
    (tmp_path / "other").mkdir()
    opts = ort.SessionOptions()
    opts.add_session_config_entry(
        "session.model_external_initializers_file_folder_path", str(tmp_path / "other")
    )
    with pytest.raises(InvalidModel, match="not found"):
        ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    (path.parent / "weights.bin").rename(tmp_path / "other" / "weights.bin")
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(X), rtol=1e-6)


def test_loaded_model_no_longer_references_external_data(tmp_path: Path):
    loaded = load_model(_save_external(tmp_path / "m"))
    for t in loaded.proto.graph.initializer:
        assert t.data_location == TensorProto.DEFAULT
        assert len(t.external_data) == 0
    by_name = {t.name: numpy_helper.to_array(t) for t in loaded.proto.graph.initializer}
    np.testing.assert_array_equal(by_name["w"], W)
    np.testing.assert_array_equal(by_name["b"], B)


def test_external_data_next_to_a_symlinked_model_path(tmp_path: Path):
    real = _save_external(tmp_path / "store")
    served = tmp_path / "served"
    served.mkdir()
    (served / "model.onnx").symlink_to(real)
    (real.parent / "weights.bin").rename(served / "weights.bin")
    np.testing.assert_allclose(_run(str(served / "model.onnx")), _expected(X), rtol=1e-6)


# -- unsafe or broken references -----------------------------------------------------------


@pytest.fixture
def external(tmp_path: Path) -> Path:
    """A model saved with external weights in tmp_path/model/, plus a file outside it."""
    (tmp_path / "outside.bin").write_bytes(np.arange(64, dtype=np.float32).tobytes())
    return _save_external(tmp_path / "model")


def _rejected(path: Path, exc: type[Exception] = UnsafeExternalData) -> str:
    with pytest.raises(exc) as err:
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert isinstance(err.value, InvalidModel)
    message = str(err.value)
    assert str(path) in message  # the model file
    return message


def test_absolute_location_is_refused(external: Path):
    target = str(external.parent / "weights.bin")  # even one that points inside the folder
    _tamper(external, "w", location=target)
    message = _rejected(external)
    assert "initializer 'w'" in message
    assert "absolute" in message
    assert target in message


def test_absolute_location_outside_is_refused(external: Path):
    target = str(external.parent.parent / "outside.bin")
    _tamper(external, "w", location=target, offset="0", length="48")
    assert "absolute" in _rejected(external)


@pytest.mark.parametrize("location", ["C:\\weights.bin", "\\\\server\\share\\w.bin", "\\w.bin"])
def test_windows_style_absolute_locations_are_refused(external: Path, location: str):
    _tamper(external, "w", location=location)
    assert "absolute" in _rejected(external)


def test_dotdot_location_leaving_the_folder_is_refused(external: Path):
    _tamper(external, "w", location="../outside.bin", offset="0", length="48")
    message = _rejected(external)
    assert "initializer 'w'" in message
    assert "'../outside.bin'" in message
    assert "outside" in message and "refused" in message


def test_deep_dotdot_location_is_refused(external: Path):
    _tamper(external, "b", location="sub/../../outside.bin", offset="0", length="12")
    message = _rejected(external)
    assert "initializer 'b'" in message and "outside the model's folder" in message


def test_symlink_inside_the_folder_pointing_outside_is_refused(external: Path):
    link = external.parent / "innocent.bin"
    link.symlink_to(external.parent.parent / "outside.bin")
    _tamper(external, "w", location="innocent.bin", offset="0", length="48")
    message = _rejected(external)
    assert "'innocent.bin'" in message
    assert str(external.parent.parent / "outside.bin") in message  # where it really leads
    assert "outside the model's folder" in message


def test_symlinked_subfolder_pointing_outside_is_refused(external: Path, tmp_path: Path):
    (external.parent / "data").symlink_to(tmp_path)
    _tamper(external, "w", location="data/outside.bin", offset="0", length="48")
    assert "outside the model's folder" in _rejected(external)


def test_offset_plus_length_past_end_of_file_is_refused(external: Path):
    size = (external.parent / "weights.bin").stat().st_size
    _tamper(external, "b", offset=str(size - 4), length="12")
    message = _rejected(external)
    assert "initializer 'b'" in message
    assert "past the end" in message
    assert f"offset {size - 4}" in message and "length 12" in message
    assert f"({size} bytes)" in message


def test_offset_past_end_without_length_is_refused(external: Path):
    size = (external.parent / "weights.bin").stat().st_size
    _tamper(external, "b", offset=str(size + 100), length="")
    assert "past the end" in _rejected(external)


def test_negative_offset_is_refused(external: Path):
    _tamper(external, "b", offset="-4")
    assert "offset -4" in _rejected(external)


def test_non_integer_offset_is_refused(external: Path):
    _tamper(external, "b", offset="twelve")
    assert "not integers" in _rejected(external)


def test_missing_external_file_is_invalid_model_naming_it(external: Path):
    _tamper(external, "w", location="gone.bin")
    message = _rejected(external, InvalidModel)
    assert "initializer 'w'" in message
    assert "'gone.bin'" in message and "not found" in message


def test_deleted_weights_file_is_invalid_model(external: Path):
    (external.parent / "weights.bin").unlink()
    assert "'weights.bin'" in _rejected(external, InvalidModel)


def test_empty_location_is_refused(external: Path):
    _tamper(external, "w", location="")
    assert "no location" in _rejected(external)


def test_length_shorter_than_the_tensor_is_an_error_not_garbage(external: Path):
    _tamper(external, "w", length="8")  # 2 floats for a [4, 3] tensor
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(str(external), providers=["CPUExecutionProvider"])
    assert str(external) in str(err.value)
    assert "w" in str(err.value) and "48 bytes" in str(err.value)


def test_unsafe_reference_in_a_constant_node_attribute_is_refused(tmp_path: Path):
    """External data hides in node attributes too (Constant's ``value``)."""
    folder = tmp_path / "m"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(B.tobytes())
    value = numpy_helper.from_array(B, "const_b")
    value.data_location = TensorProto.EXTERNAL
    value.ClearField("raw_data")
    for key, val in (("location", "../outside.bin"), ("offset", "0"), ("length", "12")):
        entry = value.external_data.add()
        entry.key, entry.value = key, val
    model = make_model(
        [
            helper.make_node("Constant", [], ["c"], name="const", value=value),
            helper.make_node("Add", ["x", "c"], ["y"], name="add"),
        ],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    message = _rejected(path)
    assert "'../outside.bin'" in message


def test_unsafe_reference_inside_a_subgraph_is_refused(tmp_path: Path):
    folder = tmp_path / "m"
    folder.mkdir()
    (tmp_path / "outside.bin").write_bytes(B.tobytes())
    secret = numpy_helper.from_array(B, "secret")
    secret.data_location = TensorProto.EXTERNAL
    secret.ClearField("raw_data")
    for key, val in (("location", "../outside.bin"), ("offset", "0"), ("length", "12")):
        entry = secret.external_data.add()
        entry.key, entry.value = key, val
    then_branch = helper.make_graph(
        [helper.make_node("Identity", ["secret"], ["t"], name="then_id")],
        "then",
        [],
        [tensor("t", [3])],
        [secret],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["e"], name="else_id")],
        "else",
        [],
        [tensor("e", [3])],
    )
    model = make_model(
        [
            helper.make_node(
                "If", ["cond"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch
            )
        ],
        [tensor("cond", [], TensorProto.BOOL), tensor("x", [3])],
        [tensor("y", [3])],
    )
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    assert "outside the model's folder" in _rejected(path)


# -- the caller's objects are not touched --------------------------------------------------


def _snapshot(proto: onnx.ModelProto) -> bytes:
    return proto.SerializeToString(deterministic=True)


def test_model_proto_with_external_data_is_not_mutated(tmp_path, monkeypatch):
    path = _save_external(tmp_path / "m")
    proto = onnx.load(str(path), load_external_data=False)
    before = _snapshot(proto)
    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.model_external_initializers_file_folder_path", str(path.parent))
    ort.InferenceSession(proto, opts, providers=["CPUExecutionProvider"]).run(None, {"x": X})
    assert _snapshot(proto) == before
    w = next(t for t in proto.graph.initializer if t.name == "w")
    assert w.data_location == TensorProto.EXTERNAL  # still a reference, not loaded bytes
    assert not w.raw_data


@pytest.mark.parametrize(
    "configure",
    [
        pytest.param(lambda o: None, id="defaults"),
        pytest.param(
            lambda o: o.add_free_dimension_override_by_name("N", 2), id="free_dim_override"
        ),
        pytest.param(
            lambda o: o.add_initializer("b", np.zeros(3, np.float32)), id="add_initializer"
        ),
        pytest.param(
            lambda o: setattr(
                o, "graph_optimization_level", ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            ),
            id="no_optimization",
        ),
    ],
)
def test_model_proto_is_not_mutated_by_session_creation(
    configure: Callable[[ort.SessionOptions], None],
):
    proto = _model()
    before = _snapshot(proto)
    opts = ort.SessionOptions()
    configure(opts)
    sess = ort.InferenceSession(proto, opts, providers=["CPUExecutionProvider"])
    sess.run(None, {"x": X})
    assert _snapshot(proto) == before


def test_optimizer_does_not_mutate_the_caller_proto():
    """Constant folding must work on the session's copy."""
    model = make_model(
        [
            helper.make_node(
                "Constant", [], ["c"], name="const", value=numpy_helper.from_array(B, "c")
            ),
            helper.make_node("Identity", ["c"], ["c2"], name="ident"),
            helper.make_node("Add", ["x", "c2"], ["y"], name="add"),
        ],
        [tensor("x", [3])],
        [tensor("y", [3])],
    )
    before = _snapshot(model)
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": B})
    np.testing.assert_array_equal(y, 2 * B)
    assert _snapshot(model) == before


def test_mutating_the_proto_after_creation_does_not_change_the_session():
    proto = _model()
    sess = ort.InferenceSession(proto, providers=["CPUExecutionProvider"])
    for t in proto.graph.initializer:
        t.CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(t)), t.name))
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], _expected(X), rtol=1e-6)


def test_bytes_bytearray_and_memoryview_sources_load():
    data = _model().SerializeToString()
    for source in (data, bytearray(data), memoryview(data)):
        np.testing.assert_allclose(_run(source), _expected(X), rtol=1e-6)
