"""Bad input gives a typed ``onyxrt.errors`` exception whose message says what is wrong.

Every test here checks two things a user sees: the exception class (so ``except`` clauses
written against onyxrt, or against the built-in it mirrors, keep working) and the message
(it names the input, node, op or file involved and what was expected versus found).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt as ort
from onyxrt.errors import (
    InvalidArgument,
    InvalidGraph,
    InvalidInput,
    InvalidModel,
    KernelError,
    NotImplementedOp,
    OnyxError,
)


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


@pytest.fixture
def relu_model() -> onnx.ModelProto:
    """y = Relu(x), x float32 [2, 3] (every dim fixed)."""
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", [2, 3])],
        [tensor("y", [2, 3])],
    )


@pytest.fixture
def relu_session(relu_model: onnx.ModelProto) -> ort.InferenceSession:
    return _session(relu_model)


@pytest.fixture
def two_input_session() -> ort.InferenceSession:
    """y = a + bias, both float32 [N, 3]."""
    model = make_model(
        [helper.make_node("Add", ["input_ids", "bias"], ["y"], name="add")],
        [tensor("input_ids", ["N", 3]), tensor("bias", ["N", 3])],
        [tensor("y", ["N", 3])],
    )
    return _session(model)


X = np.arange(6, dtype=np.float32).reshape(2, 3) - 3


# -- feeds ---------------------------------------------------------------------------------


def test_missing_input_is_invalid_input_naming_it(two_input_session):
    with pytest.raises(InvalidInput) as err:
        two_input_session.run(None, {"input_ids": X})
    assert isinstance(err.value, ValueError)  # code catching onnxruntime-style ValueError
    assert isinstance(err.value, OnyxError)
    message = str(err.value)
    assert "missing" in message
    assert "'bias'" in message
    assert "'input_ids'" in message  # the model's inputs are listed


def test_no_feeds_at_all_names_every_missing_input(two_input_session):
    with pytest.raises(InvalidInput, match="missing") as err:
        two_input_session.run(None, {})
    assert "'input_ids'" in str(err.value) and "'bias'" in str(err.value)


def test_unknown_input_name_suggests_the_closest(two_input_session):
    with pytest.raises(InvalidInput) as err:
        two_input_session.run(None, {"input_id": X, "bias": X})
    message = str(err.value)
    assert "unknown input name 'input_id'" in message
    assert "Did you mean 'input_ids'?" in message


def test_unknown_input_name_without_close_match_lists_the_inputs(relu_session):
    with pytest.raises(InvalidInput) as err:
        relu_session.run(None, {"x": X, "zzzzzz": X})
    message = str(err.value)
    assert "'zzzzzz'" in message
    assert "Did you mean" not in message
    assert "['x']" in message


def test_wrong_dtype_names_both_types_and_the_fix(relu_session):
    with pytest.raises(InvalidInput) as err:
        relu_session.run(None, {"x": X.astype(np.float64)})
    message = str(err.value)
    assert "'x'" in message
    assert "tensor(double)" in message
    assert "tensor(float)" in message
    assert message.index("tensor(double)") < message.index("tensor(float)")  # got, then wanted
    assert "astype(np.float32)" in message


def test_wrong_integer_dtype_is_rejected_not_silently_cast():
    model = make_model(
        [helper.make_node("Identity", ["ids"], ["y"], name="ident")],
        [tensor("ids", [3], TensorProto.INT64)],
        [tensor("y", [3], TensorProto.INT64)],
    )
    sess = _session(model)
    with pytest.raises(InvalidInput) as err:
        sess.run(None, {"ids": np.array([1, 2, 3], np.int32)})
    assert "tensor(int32)" in str(err.value) and "tensor(int64)" in str(err.value)


def test_wrong_rank_names_input_and_both_ranks(relu_session):
    with pytest.raises(InvalidInput) as err:
        relu_session.run(None, {"x": X.reshape(6)})
    message = str(err.value)
    assert "'x'" in message
    assert "rank 1" in message and "rank 2" in message
    assert "[6]" in message and "[2, 3]" in message


def test_dim_contradicting_a_fixed_dim_names_the_axis(relu_session):
    with pytest.raises(InvalidInput) as err:
        relu_session.run(None, {"x": np.zeros((2, 4), np.float32)})
    message = str(err.value)
    assert "'x'" in message
    assert "dimension 1 is 4" in message
    assert "fixes it to 3" in message


def test_symbolic_dims_accept_any_size(two_input_session):
    a = np.ones((5, 3), np.float32)
    (y,) = two_input_session.run(None, {"input_ids": a, "bias": a})
    np.testing.assert_array_equal(y, 2 * a)


def test_fixed_dim_next_to_symbolic_dim_is_still_checked(two_input_session):
    a = np.ones((5, 4), np.float32)
    with pytest.raises(InvalidInput, match="dimension 1 is 4"):
        two_input_session.run(None, {"input_ids": a, "bias": a})


def test_list_feed_is_converted_to_the_declared_dtype(relu_session):
    (y,) = relu_session.run(None, {"x": [[1, -2, 3], [-4, 5, -6]]})
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, [[1, 0, 3], [0, 5, 0]])


def test_list_feed_of_wrong_shape_is_still_checked(relu_session):
    with pytest.raises(InvalidInput, match="invalid rank 1"):
        relu_session.run(None, {"x": [1.0, 2.0, 3.0]})


def test_ragged_list_feed_cannot_be_converted(relu_session):
    with pytest.raises(InvalidInput) as err:
        relu_session.run(None, {"x": [[1.0, 2.0, 3.0], [4.0]]})
    assert "'x'" in str(err.value) and "cannot convert" in str(err.value)


def test_non_array_feed_names_the_type_it_got(relu_session):
    with pytest.raises(InvalidInput) as err:
        relu_session.run(None, {"x": "not an array"})
    assert "'x'" in str(err.value) and "str" in str(err.value)


def test_feed_that_is_not_a_dict_is_invalid_input(relu_session):
    with pytest.raises(InvalidInput, match="dict"):
        relu_session.run(None, [X])  # type: ignore[arg-type]


def test_failed_feed_check_leaves_the_session_usable(relu_session):
    with pytest.raises(InvalidInput):
        relu_session.run(None, {"x": X.astype(np.float64)})
    (y,) = relu_session.run(None, {"x": X})
    np.testing.assert_array_equal(y, np.maximum(X, 0))


# -- outputs -------------------------------------------------------------------------------


def test_unknown_output_name_suggests_the_closest(relu_session):
    with pytest.raises(InvalidArgument) as err:
        relu_session.run(["yy"], {"x": X})
    assert isinstance(err.value, ValueError)
    message = str(err.value)
    assert "unknown output name 'yy'" in message
    assert "Did you mean 'y'?" in message


def test_unknown_output_name_is_reported_before_running(relu_session):
    with pytest.raises(InvalidArgument, match="'nothing_like_it'") as err:
        relu_session.run(["nothing_like_it"], {"x": X})
    assert "['y']" in str(err.value)


# -- malformed models ----------------------------------------------------------------------


def test_random_bytes_are_invalid_model():
    junk = np.random.default_rng(0).bytes(200)
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(junk)
    assert "<bytes>" in str(err.value)
    assert "not a valid ONNX model" in str(err.value)


def test_random_bytes_in_a_file_name_the_file(tmp_path: Path):
    path = tmp_path / "junk.onnx"
    path.write_bytes(np.random.default_rng(1).bytes(300))
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(str(path))
    assert str(path) in str(err.value)


def test_truncated_model_file_is_invalid_model_naming_the_file(tmp_path: Path, add_relu_model):
    data = add_relu_model.SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(path)  # a PathLike works too
    message = str(err.value)
    assert str(path) in message
    assert "truncated" in message


def test_every_truncation_of_a_model_is_invalid_model(add_relu_model):
    """Whatever the cut point, the user gets InvalidModel, never a protobuf error."""
    data = add_relu_model.SerializeToString()
    for cut in range(1, len(data)):
        with pytest.raises(InvalidModel):
            ort.InferenceSession(data[:cut])


def test_nonexistent_path_is_invalid_model_naming_it(tmp_path: Path):
    path = tmp_path / "no_such_dir" / "model.onnx"
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(str(path))
    assert "not found" in str(err.value)
    assert str(path) in str(err.value)
    assert isinstance(err.value, ValueError)


def test_directory_path_is_invalid_model_saying_it_is_a_folder(tmp_path: Path):
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(str(tmp_path))
    assert str(tmp_path) in str(err.value)
    assert "folder" in str(err.value)


def test_empty_bytes_are_invalid_model():
    with pytest.raises(InvalidModel, match="empty"):
        ort.InferenceSession(b"")


def test_empty_file_is_invalid_model_naming_it(tmp_path: Path):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(str(path))
    assert str(path) in str(err.value) and "empty" in str(err.value)


@pytest.mark.parametrize("source", [42, 3.5, None, ["model.onnx"]])
def test_non_model_type_is_invalid_model_naming_the_type(source):
    with pytest.raises(InvalidModel) as err:
        ort.InferenceSession(source)
    assert type(source).__name__ in str(err.value)
    assert "file path, bytes or an onnx.ModelProto" in str(err.value)


def test_ir_version_newer_than_onnx_supports_is_invalid_model(relu_model):
    relu_model.ir_version = onnx.IR_VERSION + 1
    with pytest.raises(InvalidModel) as err:
        _session(relu_model)
    message = str(err.value)
    assert f"IR version {onnx.IR_VERSION + 1}" in message
    assert str(onnx.IR_VERSION) in message


def test_opset_newer_than_onnx_knows_is_invalid_model(relu_model):
    newest = onnx.defs.onnx_opset_version()
    relu_model.opset_import[0].version = newest + 1
    with pytest.raises(InvalidModel) as err:
        _session(relu_model)
    assert f"opset {newest + 1}" in str(err.value)
    assert str(newest) in str(err.value)


def test_ai_onnx_domain_spelling_is_checked_too(relu_model):
    newest = onnx.defs.onnx_opset_version()
    del relu_model.opset_import[:]
    relu_model.opset_import.append(helper.make_opsetid("ai.onnx", newest + 5))
    with pytest.raises(InvalidModel, match=f"opset {newest + 5}"):
        _session(relu_model)


# -- invalid graphs ------------------------------------------------------------------------


def _cycle_model() -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Identity", ["x"], ["x1"], name="start"),
            helper.make_node("Add", ["x1", "b"], ["a"], name="ping"),
            helper.make_node("Relu", ["a"], ["b"], name="pong"),
        ],
        [tensor("x", [2])],
        [tensor("a", [2])],
    )


def test_cycle_is_invalid_graph_naming_the_nodes():
    with pytest.raises(InvalidGraph) as err:
        _session(_cycle_model())
    message = str(err.value)
    assert "ping" in message and "pong" in message


def test_cycle_is_at_least_an_invalid_model():
    with pytest.raises(InvalidModel):
        _session(_cycle_model())


def test_graph_ir_reports_a_cycle_naming_the_nodes():
    """The graph IR itself (used by sessions and subgraphs) names the nodes of a cycle."""
    from onyxrt.graph import Graph

    with pytest.raises(InvalidGraph) as err:
        Graph.from_proto(_cycle_model().graph, {"": 17})
    message = str(err.value)
    assert "not a DAG" in message
    assert "ping" in message and "pong" in message
    assert "start" not in message


def _undefined_value_model() -> onnx.ModelProto:
    return make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="first"),
            helper.make_node("Add", ["r", "ghost"], ["y"], name="reader"),
        ],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )


def test_undefined_value_is_invalid_graph_naming_node_and_value():
    with pytest.raises(InvalidGraph) as err:
        _session(_undefined_value_model())
    message = str(err.value)
    assert "'reader'" in message and "'ghost'" in message


def test_undefined_value_is_at_least_an_invalid_model_naming_the_value():
    with pytest.raises(InvalidModel, match="'ghost'"):
        _session(_undefined_value_model())


def test_graph_ir_reports_an_undefined_value_naming_node_and_value():
    from onyxrt.graph import Graph

    with pytest.raises(InvalidGraph) as err:
        Graph.from_proto(_undefined_value_model().graph, {"": 17})
    message = str(err.value)
    assert "'reader'" in message and "'ghost'" in message


def test_value_produced_twice_is_invalid_graph_naming_both_nodes():
    from onyxrt.graph import Graph

    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["y"], name="first"),
            helper.make_node("Neg", ["x"], ["y"], name="second"),
        ],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )
    with pytest.raises(InvalidGraph) as err:
        Graph.from_proto(model.graph, {"": 17})
    message = str(err.value)
    assert "'y'" in message and "first" in message and "second" in message


def test_nodes_out_of_order_still_run():
    model = make_model(
        [
            helper.make_node("Neg", ["r"], ["y"], name="second"),
            helper.make_node("Relu", ["x"], ["r"], name="first"),
        ],
        [tensor("x", [2, 3])],
        [tensor("y", [2, 3])],
    )
    (y,) = _session(model).run(None, {"x": X})
    np.testing.assert_array_equal(y, -np.maximum(X, 0))


def test_output_declared_without_shape_still_runs():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    (y,) = _session(model).run(None, {"x": X})
    np.testing.assert_array_equal(y, np.maximum(X, 0))


# -- unknown operators ---------------------------------------------------------------------


def test_unknown_default_domain_op_is_not_implemented_naming_node_and_op():
    model = make_model(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob_1")],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )
    with pytest.raises(NotImplementedOp) as err:
        _session(model)
    assert isinstance(err.value, NotImplementedError)
    message = str(err.value)
    assert "'frob_1'" in message
    assert "'Frobnicate'" in message


def test_custom_domain_op_nobody_implements_lists_refusal_reasons():
    model = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Frobnicate", ["r"], ["y"], name="frob_1", domain="com.acme"),
        ],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )
    model.opset_import.append(helper.make_opsetid("com.acme", 1))
    with pytest.raises(NotImplementedOp) as err:
        _session(model)
    message = str(err.value)
    assert "'frob_1'" in message
    assert "com.acme::Frobnicate" in message
    assert "CPUExecutionProvider:" in message  # who refused, and why
    assert "no CPUExecutionProvider kernel" in message
    assert "'relu'" not in message  # only the node nobody could run


def test_custom_domain_without_opset_import_is_invalid_model():
    model = make_model(
        [helper.make_node("Frobnicate", ["x"], ["y"], name="frob_1", domain="com.acme")],
        [tensor("x", [2])],
        [tensor("y", [2])],
    )
    with pytest.raises(InvalidModel) as err:
        _session(model)
    assert "'com.acme'" in str(err.value) and "frob_1" in str(err.value)


# -- kernel failures at run time -----------------------------------------------------------


def test_reshape_to_incompatible_shape_is_kernel_error_naming_node_and_shapes():
    model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape_1")],
        [tensor("x", [2, 3]), tensor("shape", [2], TensorProto.INT64)],
        [tensor("y", ["A", "B"])],
    )
    sess = _session(model)
    with pytest.raises(KernelError) as err:
        sess.run(None, {"x": X, "shape": np.array([4, 4], np.int64)})
    assert isinstance(err.value, RuntimeError)
    message = str(err.value)
    assert "'reshape_1'" in message
    assert "(Reshape)" in message
    assert "CPUExecutionProvider" in message
    assert "x: float32[2, 3]" in message
    assert "shape: int64[2]" in message
    # the session survives: a good feed still runs
    (y,) = sess.run(None, {"x": X, "shape": np.array([3, 2], np.int64)})
    np.testing.assert_array_equal(y, X.reshape(3, 2))


def test_matmul_with_mismatched_symbolic_dims_is_kernel_error():
    model = make_model(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
        [tensor("a", ["M", "K"]), tensor("b", ["K2", "N"])],
        [tensor("y", ["M", "N"])],
    )
    sess = _session(model)
    with pytest.raises(KernelError) as err:
        sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((4, 5), np.float32)})
    message = str(err.value)
    assert "'mm'" in message and "(MatMul)" in message
    assert "a: float32[2, 3]" in message and "b: float32[4, 5]" in message
    assert err.value.__cause__ is not None  # the kernel's own error is kept for debugging


def test_kernel_error_in_a_later_node_names_that_node():
    model = make_model(
        [
            helper.make_node("Relu", ["a"], ["r"], name="relu_ok"),
            helper.make_node("MatMul", ["r", "b"], ["y"], name="mm_bad"),
        ],
        [tensor("a", ["M", "K"]), tensor("b", ["K2", "N"])],
        [tensor("y", ["M", "N"])],
    )
    sess = _session(model)
    with pytest.raises(KernelError) as err:
        sess.run(None, {"a": np.ones((2, 3), np.float32), "b": np.ones((2, 2), np.float32)})
    message = str(err.value)
    assert "'mm_bad'" in message and "relu_ok" not in message
    assert "r: float32[2, 3]" in message  # intermediate inputs are described too
