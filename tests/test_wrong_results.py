"""Models onyxrt used to run to a wrong answer (or fail) where onnxruntime is right
(issue 19, items 17-19): out-of-range sparse indices, model-local functions named like
standard operators, and operators run through their ONNX function bodies.

Each test asserts what a user notices: a typed error naming the initializer, node and
index at fault, or the same result as onnxruntime (the oracle) and onnx's reference
evaluator.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx.reference
import pytest
from model_helpers import tensor
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.errors import InvalidArgument, InvalidGraph, InvalidModel, NotImplementedOp
from onyxrt.sparse import (
    InvalidSparseTensor,
    SparseTensor,
    coo_linear_indices,
    coo_to_dense,
)


@pytest.fixture(scope="module")
def ref():
    """onnxruntime, the oracle."""
    return pytest.importorskip("onnxruntime")


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString())


def _oracle(ref, model: onnx.ModelProto, feeds: dict) -> list:
    return ref.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _oracle_refuses(ref, model: onnx.ModelProto, feeds: dict) -> None:
    state = ref.capi.onnxruntime_pybind11_state
    with pytest.raises((state.Fail, state.InvalidGraph, state.InvalidArgument)):
        _oracle(ref, model, feeds)


# -- 17: sparse indices -------------------------------------------------------------------


def _sparse(indices, dims=(2, 3), values=None, name="W") -> onnx.SparseTensorProto:
    idx = np.asarray(indices, np.int64)
    vals = np.arange(1, idx.shape[0] + 1, dtype=np.float32) if values is None else np.asarray(values, np.float32)
    return helper.make_sparse_tensor(
        numpy_helper.from_array(vals, name), numpy_helper.from_array(idx, f"{name}_indices"), list(dims)
    )


def _add_sparse(indices, dims=(2, 3), as_constant=False, values=None) -> onnx.ModelProto:
    """Y = X + W, W a sparse initializer or the sparse_value of a Constant node 'w_const'."""
    st = _sparse(indices, dims, values)
    nodes = [helper.make_node("Add", ["X", "W"], ["Y"], name="add")]
    if as_constant:
        nodes.insert(0, helper.make_node("Constant", [], ["W"], name="w_const", sparse_value=st))
    graph = helper.make_graph(
        nodes, "g", [tensor("X", list(dims))], [tensor("Y", list(dims))],
        sparse_initializer=[] if as_constant else [st],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


BAD_INDICES = {
    # numpy would write the last element for -1, and silently wrap [0, 4] into row 1.
    "linear -1": ([-1], "holds -1", "position 0"),
    "linear past the end": ([0, 6], "holds 6", "position 1"),
    "negative row": ([[0, 0], [-1, 2]], "holds -1", "position [1, 0]"),
    "row past the end": ([[2, 0]], "holds 2", "rows of [2, 3]"),
    "column wrapping into the next row": ([[0, 4]], "holds 4", "columns of [2, 3]"),
    "coordinates of another rank": ([[0, 0, 0]], "shape [1, 3]", "[1, 2] coordinates"),
    "more indices than values": ([0, 1, 2, 3], "shape [4] cannot place 2 values", "[2] linear indices"),
    "3-D indices": ([[[0, 0]]], "shape [1, 1, 2]", "cannot place"),
}


@pytest.mark.parametrize("as_constant", [False, True], ids=["initializer", "Constant"])
@pytest.mark.parametrize("case", list(BAD_INDICES))
def test_bad_sparse_indices_are_refused_naming_tensor_and_index(ref, case, as_constant):
    indices, *words = BAD_INDICES[case]
    values = [1.0] * 2 if case == "more indices than values" else None
    model = _add_sparse(indices, as_constant=as_constant, values=values)
    _oracle_refuses(ref, model, {"X": np.zeros((2, 3), np.float32)})  # as onnxruntime does
    with pytest.raises(InvalidGraph) as exc:
        _session(model)
    message = str(exc.value)
    assert ("node 'w_const' (Constant): sparse_value" if as_constant else "sparse initializer 'W'") in message
    for word in words:
        assert word in message


def test_sparse_values_must_be_one_per_index():
    st = helper.make_sparse_tensor(
        numpy_helper.from_array(np.ones((2, 1), np.float32), "W"),
        numpy_helper.from_array(np.array([0, 4], np.int64), "W_indices"), [2, 3],
    )
    graph = helper.make_graph([helper.make_node("Add", ["X", "W"], ["Y"])], "g",
                              [tensor("X", [2, 3])], [tensor("Y", [2, 3])], sparse_initializer=[st])
    with pytest.raises(InvalidGraph, match=r"sparse initializer 'W': values must be 1-D.*\[2, 1\]"):
        _session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


ACCEPTED_INDICES = {
    "unsorted linear": [4, 0],
    "repeated linear (last value wins)": [1, 1],
    "unsorted coordinates": [[1, 1], [0, 2]],
    "repeated coordinates (last value wins)": [[1, 1], [1, 1], [0, 0]],
    "no values": np.zeros((0,), np.int64),
}


@pytest.mark.parametrize("as_constant", [False, True], ids=["initializer", "Constant"])
@pytest.mark.parametrize("case", list(ACCEPTED_INDICES))
def test_sparse_indices_onnxruntime_accepts_give_its_values(ref, case, as_constant):
    model = _add_sparse(ACCEPTED_INDICES[case], as_constant=as_constant)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (expected,) = _oracle(ref, model, {"X": x})
    (got,) = _session(model).run(None, {"X": x})
    np.testing.assert_array_equal(got, expected)


def test_sparse_initializer_inside_a_subgraph_is_checked_too():
    then = helper.make_graph(
        [helper.make_node("Add", ["X", "W"], ["t"])], "then", [], [tensor("t", [3])],
        sparse_initializer=[_sparse([3], dims=(3,))],
    )
    other = helper.make_graph([helper.make_node("Identity", ["X"], ["e"])], "else", [], [tensor("e", [3])])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["Y"], then_branch=then, else_branch=other)], "g",
        [tensor("c", [], TensorProto.BOOL), tensor("X", [3])], [tensor("Y", [3])],
    )
    with pytest.raises(InvalidGraph, match=r"sparse initializer 'W' holds 3, outside 0\.\.2"):
        _session(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))


def _sparse_output_model(st: onnx.SparseTensorProto) -> onnx.ModelProto:
    out = helper.make_sparse_tensor_value_info(st.values.name, TensorProto.FLOAT, list(st.dims))
    graph = helper.make_graph([], "g", [], [out], sparse_initializer=[st])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_sparse_graph_output_comes_back_as_onnxruntime_returns_it(ref):
    # Unsorted coordinates, a repeated position and an explicit zero: onnxruntime hands
    # back sorted linear indices, one value each (the last), zeros left out.
    st = _sparse([[1, 2], [0, 1], [1, 2], [0, 0]], values=[7, 3, 9, 0])
    model = _sparse_output_model(st)
    theirs = ref.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = theirs.run_with_ort_values(None, {})[0].as_sparse_tensor()
    got = _session(model).run_with_ort_values(None, {})[0].as_sparse_tensor()
    assert got.dense_shape() == expected.dense_shape() == [2, 3]
    np.testing.assert_array_equal(got.values(), expected.values())
    np.testing.assert_array_equal(got.as_coo_view().indices(), expected.as_coo_view().indices())
    assert got.as_coo_view().indices().tolist() == [1, 5]


def test_sparse_graph_output_with_a_bad_index_is_refused():
    with pytest.raises(InvalidGraph, match=r"sparse initializer 'W' holds 3, outside 0\.\.2 \(columns"):
        _session(_sparse_output_model(_sparse([[0, 3]])))


def test_user_built_coordinates_are_checked_by_the_same_rule():
    # onnxruntime builds this without complaint; onyxrt refuses it (an InvalidArgument).
    with pytest.raises(InvalidSparseTensor, match=r"holds 3, outside 0\.\.2 \(columns of \[2, 3\]\), at position \[1, 1\]") as exc:
        SparseTensor.sparse_coo_from_numpy([2, 3], np.ones(2, np.float32), [[0, 0], [1, 3]])
    assert isinstance(exc.value, InvalidArgument)


def test_user_built_tensor_accepts_unsorted_and_repeated_indices_as_onnxruntime_does(ref):
    cpu = ref.OrtDevice.make("cpu", 0)
    for indices in ([5, 0, 3], [2, 2]):
        values = np.arange(len(indices), dtype=np.float32)
        theirs = ref.SparseTensor.sparse_coo_from_numpy([2, 3], values, np.array(indices), cpu)
        ours = SparseTensor.sparse_coo_from_numpy([2, 3], values, np.array(indices))
        np.testing.assert_array_equal(ours.as_coo_view().indices(), theirs.as_coo_view().indices())
    # Densifying one with a repeated position is ambiguous for a tensor a caller built.
    with pytest.raises(InvalidSparseTensor, match="more than once"):
        ours.to_dense()


def test_shared_index_rule_linearizes_coordinates_and_keeps_the_last_repeat():
    linear = coo_linear_indices(np.array([[1, 2], [0, 1], [1, 2]]), [2, 3], 3, "w", InvalidGraph)
    assert linear.tolist() == [5, 1, 5]
    dense = coo_to_dense(np.array([1.0, 2.0, 3.0]), linear, [2, 3])
    np.testing.assert_array_equal(dense, [[0, 2, 0], [0, 0, 3]])
    with pytest.raises(InvalidGraph, match=r"'w' holds -2, outside 0\.\.1 \(rows"):
        coo_linear_indices(np.array([[-2, 0]]), [2, 3], 1, "'w'", InvalidGraph)


# -- 18: model-local functions named like standard operators -------------------------------


def _calling_local_function(name: str, domain: str, opset: int = 17, ml: bool = False) -> onnx.ModelProto:
    """Y = name(X) in ``domain``, with a local function of that name returning -X."""
    negate = helper.make_function(
        domain, name, ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])], [helper.make_opsetid("", opset)]
    )
    graph = helper.make_graph(
        [helper.make_node(name, ["X"], ["Y"], domain=domain, name="call")], "g",
        [tensor("X", [4])], [tensor("Y", [4])],
    )
    imports = [helper.make_opsetid("", opset)]
    if domain not in ("", "ai.onnx"):
        imports.append(helper.make_opsetid(domain, 3 if ml else 1))
    return helper.make_model(graph, opset_imports=imports, functions=[negate], ir_version=10)


X4 = np.array([-2.0, -0.5, 0.0, 3.0], np.float32)


@pytest.mark.parametrize(
    "name, domain",
    [("Relu", ""), ("Relu", "ai.onnx"), ("Abs", ""), ("Binarizer", "ai.onnx.ml")],
)
def test_local_function_named_like_a_standard_operator_does_not_replace_it(ref, name, domain):
    model = _calling_local_function(name, domain, ml=domain == "ai.onnx.ml")
    (expected,) = _oracle(ref, model, {"X": X4})
    (got,) = _session(model).run(None, {"X": X4})
    np.testing.assert_array_equal(got, expected)
    assert not np.array_equal(got, -X4)  # not the local function
    if domain != "ai.onnx":
        (reference,) = onnx.reference.ReferenceEvaluator(model).run(None, {"X": X4})
        np.testing.assert_array_equal(got, reference)


def test_local_function_in_a_custom_domain_is_still_inlined(ref):
    model = _calling_local_function("Relu", "custom.ops")
    (got,) = _session(model).run(None, {"X": X4})
    np.testing.assert_array_equal(got, -X4)
    np.testing.assert_array_equal(got, _oracle(ref, model, {"X": X4})[0])


def test_standard_operator_called_from_a_local_function_is_the_standard_one(ref):
    # custom::Twice calls Relu twice; a local "Relu" in the ONNX domain must not leak in.
    twice = helper.make_function(
        "custom.ops", "Twice", ["x"], ["y"],
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["y"])],
        [helper.make_opsetid("", 17)],
    )
    fake_relu = helper.make_function(
        "", "Relu", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])], [helper.make_opsetid("", 17)]
    )
    graph = helper.make_graph([helper.make_node("Twice", ["X"], ["Y"], domain="custom.ops")], "g",
                              [tensor("X", [4])], [tensor("Y", [4])])
    model = helper.make_model(
        graph, functions=[twice, fake_relu], ir_version=10,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1)],
    )
    (got,) = _session(model).run(None, {"X": X4})
    np.testing.assert_array_equal(got, np.maximum(X4, 0) * 2)
    np.testing.assert_array_equal(got, _oracle(ref, model, {"X": X4})[0])


@pytest.mark.parametrize("name", ["Gelu", "NoSuchOp"])
def test_local_function_does_not_define_an_operator_missing_from_the_opset(ref, name):
    # Gelu arrived in opset 20: at opset 17 onnxruntime refuses the node, local function
    # or not, and so does onyxrt (typed), instead of running the function.
    model = _calling_local_function(name, "")
    _oracle_refuses(ref, model, {"X": X4})
    with pytest.raises((NotImplementedOp, InvalidGraph)):
        _session(model).run(None, {"X": X4})


def test_local_function_at_an_older_opset_keeps_its_meaning():
    # ReduceMean took axes as an attribute before opset 18: the function says opset 17,
    # the model 18. onnx's reference runs it at 17; onnxruntime refuses the attribute.
    mean = helper.make_function(
        "custom.ops", "RowMean", ["x"], ["y"], [helper.make_node("ReduceMean", ["x"], ["y"], axes=[1])],
        [helper.make_opsetid("", 17)],
    )
    graph = helper.make_graph([helper.make_node("RowMean", ["X"], ["Y"], domain="custom.ops")], "g",
                              [tensor("X", [2, 3])], [tensor("Y", None)])
    model = helper.make_model(
        graph, functions=[mean], ir_version=10,
        opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("custom.ops", 1)],
    )
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = _session(model).run(None, {"X": x})
    (reference,) = onnx.reference.ReferenceEvaluator(model).run(None, {"X": x})
    np.testing.assert_array_equal(got, reference)
    np.testing.assert_array_equal(got.reshape(-1), [1.0, 4.0])


def test_local_function_at_another_version_of_a_custom_domain_is_refused_by_name():
    inner = helper.make_function("other", "Inner", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                                 [helper.make_opsetid("", 17)])
    outer = helper.make_function(
        "custom.ops", "Outer", ["x"], ["y"], [helper.make_node("Inner", ["x"], ["y"], domain="other")],
        [helper.make_opsetid("", 17), helper.make_opsetid("other", 2)],
    )
    graph = helper.make_graph([helper.make_node("Outer", ["X"], ["Y"], domain="custom.ops", name="call")], "g",
                              [tensor("X", [4])], [tensor("Y", [4])])
    model = helper.make_model(
        graph, functions=[inner, outer], ir_version=10,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom.ops", 1),
                       helper.make_opsetid("other", 1)],
    )
    with pytest.raises(InvalidModel, match=r"'call' calls model-local function custom.ops::Outer.*other 2 \(the model imports 1\)"):
        _session(model)


# -- 19: operators run through their function bodies ---------------------------------------


def _affine_grid(n: int, spatial: tuple[int, ...], align_corners: int, opset: int):
    nd = len(spatial)
    size = [n, 3, *spatial]
    graph = helper.make_graph(
        [helper.make_node("AffineGrid", ["theta", "size"], ["grid"], name="grid", align_corners=align_corners)],
        "g", [tensor("theta", [n, nd, nd + 1]), tensor("size", [nd + 2], TensorProto.INT64)],
        [tensor("grid", None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    theta = np.random.default_rng(n * 10 + nd).standard_normal((n, nd, nd + 1)).astype(np.float32)
    return model, {"theta": theta, "size": np.array(size, np.int64)}


@pytest.mark.parametrize("opset", [20, 21, 23])
@pytest.mark.parametrize("align_corners", [0, 1])
@pytest.mark.parametrize("spatial", [(4, 5), (2, 4, 5)], ids=["2-D", "3-D"])
@pytest.mark.parametrize("n", [1, 2])
def test_affine_grid_matches_onnxruntime_and_the_reference(ref, n, spatial, align_corners, opset):
    # N == 1 in 2-D used to fail inside the body (Split: axis 1 is out of range for
    # rank 1), and any opset past 20 with "functions with incompatible opset versions".
    model, feeds = _affine_grid(n, spatial, align_corners, opset)
    (got,) = _session(model).run(None, feeds)
    (expected,) = _oracle(ref, model, feeds)
    (reference,) = onnx.reference.ReferenceEvaluator(model).run(None, feeds)
    assert got.shape == expected.shape == (n, *spatial, len(spatial))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got, reference, rtol=1e-5, atol=1e-6)


def _run_both(ref, model: onnx.ModelProto, feeds: dict, rtol: float = 1e-5, atol: float = 1e-6):
    (got,) = _session(model).run(None, feeds)
    (expected,) = _oracle(ref, model, feeds)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("opset", [23, 24])
def test_function_body_written_for_an_older_opset_runs_in_a_newer_model(ref, opset):
    # RMSNormalization's body is written against opset 23; a model importing 24 used to
    # fail while expanding it.
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    scale = np.linspace(-1, 1, 8, dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", axis=-1)], "g",
        [tensor("x", [2, 3, 8])], [tensor("y", None)], [numpy_helper.from_array(scale, "scale")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    _run_both(ref, model, {"x": x})


@pytest.mark.parametrize("loss", ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"])
def test_loss_bodies_from_opset_13_run_at_a_recent_opset(ref, loss):
    x = np.random.default_rng(1).standard_normal((3, 5, 2)).astype(np.float32)
    target = np.array([[0, 4], [1, 1], [3, -100]], np.int64)
    graph = helper.make_graph(
        [helper.make_node(loss, ["x", "t"], ["y"], reduction="mean", ignore_index=-100)], "g",
        [tensor("x", [3, 5, 2]), tensor("t", [3, 2], TensorProto.INT64)], [tensor("y", None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    _run_both(ref, model, {"x": x, "t": target})


@pytest.mark.parametrize("mask_dtype", [np.float32, np.bool_])
def test_context_dependent_body_sees_the_type_of_an_initializer_input(ref, mask_dtype):
    # Attention's body depends on the mask's type (bool: masked out; float: added). With
    # the mask an initializer, the builder used to get no type and build a body without
    # the mask input (onnx's inliner then asserted).
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal(s).astype(np.float32) for s in [(1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)])
    mask = rng.random((3, 5)) > 0.3 if mask_dtype is np.bool_ else rng.standard_normal((3, 5)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"], name="attention")], "g",
        [tensor("q", [1, 2, 3, 4]), tensor("k", [1, 2, 5, 4]), tensor("v", [1, 2, 5, 4])], [tensor("y", None)],
        [numpy_helper.from_array(mask, "mask")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    _run_both(ref, model, {"q": q, "k": k, "v": v})
