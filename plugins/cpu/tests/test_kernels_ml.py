"""Tests for the ai.onnx.ml kernels the CPU provider runs (the operator library's
onyxrt_ops.ml, bound over numpy; the provider has no override of its own).

The onnx node conformance cases run straight through the registry; targeted tests compare
with onnxruntime (one-node models importing the ai.onnx.ml domain) where those cases are
thin: LabelEncoder table kinds and versions, TreeEnsemble aggregates, post transforms and
NaN handling, the older TreeEnsembleRegressor, and Scaler/Normalizer/Imputer/LinearRegressor.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from kernel_cases import (
    assert_all_versions_registered,
    conformance_params,
    randn,
    run_case,
    run_ours,
)
from onnx import TensorProto, helper, numpy_helper

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu import native
from onyxrt_cpu.kernels import registry
from onyxrt_ops.ml import _Forest

ML = "ai.onnx.ml"
OPS = ["LabelEncoder", "TreeEnsemble", "ArrayFeatureExtractor", "Binarizer"]
EXTRA_OPS = [
    "TreeEnsembleRegressor", "Scaler", "Normalizer", "Imputer", "LinearRegressor",
    "TreeEnsembleClassifier", "LinearClassifier", "SVMClassifier", "SVMRegressor", "ZipMap",
    "DictVectorizer", "OneHotEncoder", "CategoryMapper", "FeatureVectorizer", "CastMap",
]  # fmt: skip

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_all_versions_registered():
    assert_all_versions_registered([*OPS, *EXTRA_OPS], domain=ML)


# ----------------------------------------------------------------- helpers


def ml_node(op, n_in=1, n_out=1, **attrs):
    return helper.make_node(
        op, [f"in{i}" for i in range(n_in)], [f"out{i}" for i in range(n_out)],
        name=f"test_{op}", domain=ML, **attrs,
    )  # fmt: skip


def ours(node, opset, *inputs):
    return run_ours(node, opset, *inputs)


def onnxruntime(node, opset, inputs, out_types):
    ins = []
    for name, x in zip(node.input, inputs):
        et = TensorProto.STRING if x.dtype.kind == "O" else helper.np_dtype_to_tensor_dtype(x.dtype)
        ins.append(helper.make_tensor_value_info(name, et, list(x.shape)))
    outs = [helper.make_tensor_value_info(o, t, None) for o, t in zip(node.output, out_types)]
    graph = helper.make_graph([node], "g", ins, outs)
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(ML, opset)],
        ir_version=10,
    )
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: x for n, x in zip(node.input, inputs)})


def assert_matches_onnxruntime(node, opset, inputs, out_types, rtol=1e-6, atol=1e-6):
    got = ours(node, opset, *inputs)
    want = onnxruntime(node, opset, inputs, out_types)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype.kind == "O":
            assert g.tolist() == w.tolist()
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ------------------------------------------------------------ LabelEncoder


def test_label_encoder_float_keys_nan_and_repeats():
    node = ml_node(
        "LabelEncoder",
        keys_floats=[1.5, float("nan"), 2.0, 1.5],
        values_strings=["a", "nan", "two", "last"],
        default_string="?",
    )
    x = np.array([[1.5, np.nan], [2.0, 7.0]], dtype=np.float32)
    (y,) = ours(node, 4, x)
    assert y.dtype == object
    assert y.tolist() == [["last", "nan"], ["two", "?"]]


def test_label_encoder_int_to_float_matches_onnxruntime():
    node = ml_node(
        "LabelEncoder", keys_int64s=[3, -1, 10], values_floats=[0.5, 1.5, 2.5], default_float=9.0
    )
    x = np.array([3, 4, -1, 10, 0], dtype=np.int64)
    assert_matches_onnxruntime(node, 2, [x], [TensorProto.FLOAT])


def test_label_encoder_tensor_keys_double_to_int32():
    keys = numpy_helper.from_array(np.array([0.25, 4.0], np.float64), "keys_tensor")
    vals = numpy_helper.from_array(np.array([7, 8], np.int32), "values_tensor")
    node = ml_node("LabelEncoder", keys_tensor=keys, values_tensor=vals)
    x = np.array([4.0, 0.25, 1.0], np.float64)
    (y,) = ours(node, 4, x)
    assert y.dtype == np.int32
    assert y.tolist() == [8, 7, -1]


@pytest.mark.parametrize("keys, values, x_dtype, extra", [
    ({"keys_int64s": [3, -1, 10]}, {"values_floats": [0.5, 1.5, 2.5]}, np.int64, {"default_float": 9.0}),
    ({"keys_floats": [1.5, -0.0, 2.0]}, {"values_int64s": [1, 2, 3]}, np.float32, {}),
    ({"keys_floats": [1.5, float("nan")]}, {"values_int64s": [4, 5]}, np.float32, {"default_int64": 7}),
])
def test_label_encoder_one_value_as_many_and_as_onnxruntime(keys, values, x_dtype, extra):
    """One element (the look-up an isolation forest's conversion makes per tree) gives what
    the same element gives among others, and onnxruntime, 0-d and 2-D alike."""
    node = ml_node("LabelEncoder", **keys, **values, **extra)
    pool = np.array([3, -1, 10, 4, 1.5, 0.0, -0.0, 2.0, np.nan, 7], dtype=np.float64)
    pool = pool[~np.isnan(pool)] if x_dtype == np.int64 else pool
    xs = pool.astype(x_dtype)
    (many,) = ours(node, 2, xs)
    out_type = TensorProto.FLOAT if "values_floats" in values else TensorProto.INT64
    for i, v in enumerate(xs):
        for one in (np.array([[v]], x_dtype), np.array(v, x_dtype)):
            (got,) = ours(node, 2, one)
            assert got.shape == one.shape and got.dtype == many.dtype
            np.testing.assert_array_equal(got.reshape(-1), many[i:i + 1])
            # (a NaN key matches a NaN input here, bit-wise as ONNX's LabelEncoder-4 text
            # says; onnxruntime 1.32 gives the default for it, so NaN is compared above only)
            if one.ndim and not np.isnan(v):
                (want,) = onnxruntime(node, 2, [one], [out_type])
                np.testing.assert_array_equal(got, want)


def test_label_encoder_v1_both_directions():
    node = ml_node("LabelEncoder", classes_strings=["x", "y", "z"], default_int64=-5)
    (y,) = ours(node, 1, np.array(["z", "q", "x"], dtype=object))
    assert y.dtype == np.int64 and y.tolist() == [2, -5, 0]
    node = ml_node("LabelEncoder", classes_strings=["x", "y", "z"], default_string="none")
    (y,) = ours(node, 1, np.array([1, 3, -1], dtype=np.int64))
    assert y.tolist() == ["y", "none", "none"]


def test_label_encoder_missing_table_is_invalid_graph():
    node = ml_node("LabelEncoder", keys_strings=["a"])
    kdef, _ = registry.lookup(ML, "LabelEncoder", 2)
    with pytest.raises(InvalidGraph, match="test_LabelEncoder"):
        kdef.factory(KernelInfo.from_node(node, 2, since_version=2))


# ------------------------------------------------------------ tree ensembles


def _tree_attrs(splits_dtype=np.float32):
    """Two trees over three features, two targets, every branch mode, NaN tracking."""
    return dict(
        tree_roots=[0, 3],
        nodes_featureids=[0, 1, 2, 2, 0],
        nodes_modes=numpy_helper.from_array(np.array([0, 2, 4, 1, 5], np.uint8), "nodes_modes"),
        nodes_splits=numpy_helper.from_array(
            np.array([0.1, -0.3, 1.0, 0.5, 0.2], splits_dtype), "nodes_splits"
        ),
        nodes_truenodeids=[1, 0, 2, 4, 4],
        nodes_trueleafs=[0, 1, 1, 0, 1],
        nodes_falsenodeids=[2, 1, 3, 5, 6],
        nodes_falseleafs=[0, 1, 1, 1, 1],
        nodes_missing_value_tracks_true=[1, 0, 0, 1, 0],
        leaf_targetids=[0, 1, 0, 1, 1, 0, 0],
        leaf_weights=numpy_helper.from_array(
            np.array([1.0, -2.0, 0.5, 3.0, -1.5, 2.5, 0.25], splits_dtype), "leaf_weights"
        ),
        n_targets=2,
    )


@pytest.mark.parametrize("aggregate", [0, 1, 2, 3])
@pytest.mark.parametrize("post", [0, 1, 2, 3])
def test_tree_ensemble_matches_onnxruntime(aggregate, post):
    node = ml_node("TreeEnsemble", aggregate_function=aggregate, post_transform=post,
                   **_tree_attrs())  # fmt: skip
    x = randn((40, 3), seed=aggregate * 10 + post)
    x[::7, 0] = np.nan
    x[::5, 2] = 1.0
    got = ours(node, 5, x)[0]
    # onnxruntime 1.31 reads TreeEnsemble's post_transform 1 as LOGISTIC and 2 as SOFTMAX,
    # the reverse of the ONNX spec (1 SOFTMAX, 2 LOGISTIC), which we follow.
    ort_node = ml_node("TreeEnsemble", aggregate_function=aggregate,
                       post_transform={1: 2, 2: 1}.get(post, post), **_tree_attrs())  # fmt: skip
    (want,) = onnxruntime(ort_node, 5, [x], [TensorProto.FLOAT])
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_tree_ensemble_target_without_votes():
    """A target no reached leaf votes for scores 0 under every aggregate (then + base)."""
    attrs = _tree_attrs()
    attrs["n_targets"] = 3
    x = randn((6, 3), seed=9)
    for aggregate in range(4):
        node = ml_node("TreeEnsemble", aggregate_function=aggregate, **attrs)
        (y,) = ours(node, 5, x)
        assert y.shape == (6, 3)
        np.testing.assert_array_equal(y[:, 2], 0.0)
    node = ml_node(
        "TreeEnsembleRegressor",
        aggregate_function="MIN",
        base_values=[0.0, 0.0, 1.5],
        **{**_regressor_attrs(), "n_targets": 3},
    )
    (y,) = ours(node, 3, x)
    np.testing.assert_array_equal(y[:, 2], 1.5)


def test_tree_ensemble_probit_single_target():
    attrs = _tree_attrs()
    attrs["leaf_targetids"] = [0] * 7
    attrs["leaf_weights"] = numpy_helper.from_array(
        np.array([0.1, 0.2, 0.3, 0.4, 0.6, 0.05, 0.15], np.float32), "leaf_weights"
    )
    attrs["n_targets"] = 1
    node = ml_node("TreeEnsemble", aggregate_function=0, post_transform=4, **attrs)
    x = randn((30, 3), seed=3)
    (y,) = ours(node, 5, x)
    (scores,) = ours(ml_node("TreeEnsemble", aggregate_function=0, **attrs), 5, x)
    # probit is the inverse of the normal CDF, computed as onnxruntime does with Winitzki's
    # ErfInv approximation (about 1e-4 off the exact inverse): Phi(y) ~ scores ...
    phi = 0.5 * (1 + np.vectorize(__import__("math").erf)(y.astype(np.float64) / np.sqrt(2)))
    np.testing.assert_allclose(phi, scores, rtol=1e-3, atol=1e-4)
    # ... and exactly onnxruntime's values.
    (want,) = onnxruntime(node, 5, [x], [TensorProto.FLOAT])
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("post", [0, 1, 2, 3])
def test_tree_ensemble_single_target_transforms(post):
    """One target: onnxruntime applies no post transform but PROBIT (a single score column)."""
    attrs = _tree_attrs()
    attrs["leaf_targetids"] = [0] * 7
    attrs["n_targets"] = 1
    x = randn((10, 3), seed=1)
    (got,) = ours(ml_node("TreeEnsemble", aggregate_function=1, post_transform=post, **attrs), 5, x)
    ort_node = ml_node("TreeEnsemble", aggregate_function=1, post_transform={1: 2, 2: 1}.get(post, post), **attrs)
    (want,) = onnxruntime(ort_node, 5, [x], [TensorProto.FLOAT])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_tree_ensemble_double():
    node = ml_node("TreeEnsemble", **_tree_attrs(np.float64))
    x = randn((20, 3), seed=5, dtype=np.float64)
    assert_matches_onnxruntime(node, 5, [x], [TensorProto.DOUBLE])


def _regressor_attrs():
    return dict(
        nodes_treeids=[0, 0, 0, 0, 0, 1, 1, 1],
        nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
        nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 0],
        nodes_modes=["BRANCH_LEQ", "BRANCH_GT", "LEAF", "LEAF", "LEAF", "BRANCH_LT", "LEAF",
                     "LEAF"],
        nodes_values=[0.0, 0.5, 0, 0, 0, -0.2, 0, 0],
        nodes_truenodeids=[1, 2, 0, 0, 0, 1, 0, 0],
        nodes_falsenodeids=[4, 3, 0, 0, 0, 2, 0, 0],
        nodes_missing_value_tracks_true=[0, 1, 0, 0, 0, 1, 0, 0],
        target_treeids=[0, 0, 0, 0, 0, 0, 1, 1, 1, 1],
        target_nodeids=[2, 2, 3, 3, 4, 4, 1, 1, 2, 2],
        target_ids=[0, 1, 0, 1, 1, 0, 0, 1, 1, 0],
        target_weights=[1.0, 2.0, -1.0, 0.5, 3.0, -4.0, 0.25, 1.5, -0.5, 2.0],
        n_targets=2,
    )  # fmt: skip


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_tree_ensemble_regressor_matches_onnxruntime(aggregate, post):
    node = ml_node("TreeEnsembleRegressor", aggregate_function=aggregate, post_transform=post,
                   base_values=[0.5, -0.25], **_regressor_attrs())  # fmt: skip
    x = randn((25, 3), seed=1)
    x[::4, 1] = np.nan
    assert_matches_onnxruntime(node, 3, [x], [TensorProto.FLOAT], rtol=1e-5)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
def test_many_tree_regressor_sums_in_float32_as_onnxruntime(aggregate):
    """Float attributes: onnxruntime adds the leaves in float32, tree by tree; one row at a
    time (its order for a batch is its own) the bits are the same. 60 stumps with weights
    of mixed magnitude, where a float64 sum rounds differently."""
    rng = np.random.default_rng(3)
    trees = 60
    attrs = dict(
        nodes_treeids=[t for t in range(trees) for _ in range(3)],
        nodes_nodeids=[0, 1, 2] * trees,
        nodes_featureids=[int(f) for t in range(trees) for f in (rng.integers(0, 4), 0, 0)],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"] * trees,
        nodes_values=[float(v) for t in range(trees) for v in (rng.standard_normal(), 0, 0)],
        nodes_truenodeids=[1, 0, 0] * trees,
        nodes_falsenodeids=[2, 0, 0] * trees,
        target_treeids=[t for t in range(trees) for _ in range(2)],
        target_nodeids=[1, 2] * trees,
        target_ids=[0, 0] * trees,
        target_weights=[float(w) for w in rng.standard_normal(2 * trees) * 10.0 ** rng.integers(-3, 4, 2 * trees)],
        n_targets=1,
    )  # fmt: skip
    node = ml_node("TreeEnsembleRegressor", aggregate_function=aggregate, base_values=[0.1], **attrs)
    differs = 0
    for row in randn((40, 4), seed=2):
        x = row[None, :]
        (got,) = ours(node, 3, x)
        (want,) = onnxruntime(node, 3, [x], [TensorProto.FLOAT])
        np.testing.assert_array_equal(got, want)
        legs = np.array([attrs["target_weights"][2 * t + (0 if x[0, attrs["nodes_featureids"][3 * t]]
                                                            <= attrs["nodes_values"][3 * t] else 1)]
                         for t in range(trees)], np.float32)
        total = legs.astype(np.float64).sum() / (trees if aggregate == "AVERAGE" else 1) + 0.1
        differs += np.float32(total) != want[0, 0]
    assert differs, "no row where the float64 sum rounds differently: the test shows nothing"


def test_tree_ensemble_bad_attributes_are_invalid_graph():
    attrs = _tree_attrs()
    attrs["nodes_truenodeids"] = [1, 0, 2, 4, 40]
    node = ml_node("TreeEnsemble", **attrs)
    kdef, _ = registry.lookup(ML, "TreeEnsemble", 5)
    with pytest.raises(InvalidGraph, match="test_TreeEnsemble"):
        kdef.factory(KernelInfo.from_node(node, 5, since_version=5))


# ------------------------------------------------------------ simple ops


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_binarizer_types(dtype):
    node = ml_node("Binarizer", threshold=0.5)
    x = (randn((4, 5), seed=2) * 3).astype(dtype)
    (y,) = ours(node, 1, x)
    assert y.dtype == dtype
    np.testing.assert_array_equal(y, (x > 0.5).astype(dtype))


@pytest.mark.parametrize("shape", [(5,), (2, 3, 5)])
def test_array_feature_extractor_shapes(shape):
    node = ml_node("ArrayFeatureExtractor", 2)
    x = randn(shape, seed=4)
    idx = np.array([4, 0, 4], np.int64)
    assert_matches_onnxruntime(node, 1, [x, idx], [TensorProto.FLOAT])


def test_array_feature_extractor_strings():
    node = ml_node("ArrayFeatureExtractor", 2)
    x = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=object)
    (y,) = ours(node, 1, x, np.array([2, 1], np.int64))
    assert y.tolist() == [["c", "b"], ["f", "e"]]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_scaler_matches_onnxruntime(dtype):
    node = ml_node("Scaler", offset=[0.5, -1.0, 2.0], scale=[2.0, 0.5, -1.0])
    x = (randn((4, 3), seed=6) * 4).astype(dtype)
    assert_matches_onnxruntime(node, 1, [x], [TensorProto.FLOAT])


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_matches_onnxruntime(norm):
    node = ml_node("Normalizer", norm=norm)
    x = randn((4, 5), seed=7)
    x[2] = 0.0
    assert_matches_onnxruntime(node, 1, [x], [TensorProto.FLOAT], rtol=1e-5)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
@pytest.mark.parametrize("row", [[0.0, 0.0, 0.0], [-0.0, 0.0, -0.0], [0.5, -2.0, 1.5], [np.nan, 1.0, 2.0]],
                         ids=["zeros", "signed-zeros", "values", "nan"])
def test_normalizer_one_row_matches_onnxruntime(norm, row):
    """One row takes its own zero-divisor check (a Python comparison, no mask)."""
    node = ml_node("Normalizer", norm=norm)
    assert_matches_onnxruntime(node, 1, [np.array([row], np.float32)], [TensorProto.FLOAT], rtol=1e-6)


@pytest.mark.parametrize("norm", ["MAX", "L1", "L2"])
def test_normalizer_compiled_rows_match_numpy(norm):
    """The compiled rows (native.normalize_rows) against the numpy steps they replace, on
    rows of every kind at once: zeros, NaN first and later, infinities, long rows."""
    from onyxrt_cpu import native

    if not native.ENABLED:
        pytest.skip("compiled module not built")
    x = randn((7, 33), seed=8)
    x[1] = 0.0
    x[2, 0] = np.nan
    x[3, 5] = np.nan
    x[4, 3] = np.inf
    x[5] = -np.abs(x[5])
    got = native.normalize_rows(x, norm)
    with np.errstate(all="ignore"):
        if norm == "MAX":
            div = np.fmax.reduce(x, axis=-1, keepdims=True)
        elif norm == "L1":
            div = np.add.reduce(np.abs(x), axis=-1, keepdims=True)
        else:
            div = np.sqrt(np.add.reduce(x * x, axis=-1, keepdims=True))
        div[div == 0] = 1
        want = x / div
    assert got.dtype == np.float32 and got.shape == x.shape
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=0)
    assert native.normalize_rows(x.astype(np.float64), norm) is None
    assert native.normalize_rows(x, "L3") is None


def test_imputer_float_nan_and_int():
    node = ml_node("Imputer", imputed_value_floats=[1.0, 2.0, 3.0], replaced_value_float=np.nan)
    x = np.array([[np.nan, 5.0, np.nan], [0.0, np.nan, 1.0]], np.float32)
    assert_matches_onnxruntime(node, 1, [x], [TensorProto.FLOAT])
    node = ml_node("Imputer", imputed_value_int64s=[9], replaced_value_int64=-1)
    x = np.array([[-1, 5], [3, -1]], np.int64)
    assert_matches_onnxruntime(node, 1, [x], [TensorProto.INT64])


@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_linear_regressor_matches_onnxruntime(post):
    node = ml_node("LinearRegressor", targets=2, coefficients=[0.5, -1.0, 2.0, 1.0, 0.0, -0.5],
                   intercepts=[0.1, -0.2], post_transform=post)  # fmt: skip
    x = randn((5, 3), seed=8)
    assert_matches_onnxruntime(node, 1, [x], [TensorProto.FLOAT], rtol=1e-5)


def test_onnx_module_is_importable():
    assert onnx.defs.get_schema("TreeEnsemble", domain=ML).since_version == 5


# ------------------------------------------------ the compiled tree walk (csrc/trees.c)


def _random_forest(n_features: int, trees: int, depth: int, seed: int) -> _Forest:
    """Complete binary trees of ``depth`` levels with random features, splits, every
    comparison mode and random missing-value directions; leaf j votes for target j % 3."""
    rng = np.random.default_rng(seed)
    feature, split, mode, missing = [], [], [], []
    true_id, true_leaf, false_id, false_leaf, roots = [], [], [], [], []
    leaves = 0
    for _ in range(trees):
        base = len(feature)
        roots.append(base)
        internal = 2**depth - 1
        for i in range(internal):
            feature.append(int(rng.integers(0, n_features)))
            split.append(float(rng.choice([rng.standard_normal(), 0.0, 0.5])))
            mode.append(int(rng.integers(0, 6)))
            missing.append(int(rng.integers(0, 2)))
            for side, (ids, flags) in enumerate(((true_id, true_leaf), (false_id, false_leaf))):
                child = 2 * i + 1 + side
                if child < internal:
                    ids.append(base + child)
                    flags.append(0)
                else:
                    ids.append(leaves)
                    flags.append(1)
                    leaves += 1
    arr = np.asarray
    return _Forest(
        roots=arr(roots, np.int64), feature=arr(feature, np.int64), split=arr(split), mode=arr(mode, np.int64),
        true_id=arr(true_id, np.int64), true_leaf=arr(true_leaf), false_id=arr(false_id, np.int64),
        false_leaf=arr(false_leaf), missing_true=arr(missing), members={},
        contrib_leaf=np.arange(leaves), contrib_target=np.arange(leaves) % 3,
        contrib_weight=rng.standard_normal(leaves), n_leaves=leaves, n_targets=3,
    )


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_compiled_tree_walk_matches_the_numpy_walk(rows):
    forest = _random_forest(n_features=5, trees=9, depth=5, seed=rows)
    rng = np.random.default_rng(rows)
    x = rng.choice([-1.0, 0.0, 0.5, np.nan, np.inf], (rows, 5)) * rng.random((rows, 5)) * 2
    x[:, 0] = rng.standard_normal(rows)
    x[0, :] = [0.0, 0.5, np.nan, -np.inf, 0.5]  # ties with the splits, NaN, infinities
    assert forest.walker is None
    want = forest.leaves(x)
    forest.walker = native.tree_leaves
    got = forest.leaves(x)
    assert got.dtype == np.int64 and got.shape == (rows, 9)
    np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
@pytest.mark.parametrize("rows", [1, 3, 7, 300])
def test_compiled_tree_scores_equal_the_gathered_sum(rows):
    """The walk summing the leaves' weights as it goes (one row, a few rows inline, many
    in the pool) equals the sum of the gathered weights bit for bit (float32, tree order)."""
    forest = _random_forest(n_features=5, trees=11, depth=4, seed=rows + 50)
    rng = np.random.default_rng(rows)
    x = rng.choice([-1.0, 0.0, 0.5, np.nan, np.inf], (rows, 5)) * rng.random((rows, 5)) * 2
    x[0, :] = [0.0, 0.5, np.nan, -np.inf, 0.5]
    weights = forest._weights(np.float32)
    want = np.add.reduce(weights[forest.leaves(x)], axis=1)
    got = native.tree_scores(x.astype(np.float32), forest, weights)
    assert got is not None and got.dtype == np.float32 and got.shape == (rows, 3)
    np.testing.assert_array_equal(got, want)
    forest.scorer = native.tree_scores
    np.testing.assert_array_equal(forest.summed(x.astype(np.float32), np.float32), want)
    # float64 rows as they are, strided rows through a copy; the forest is held once
    held = forest._compiled_scorer
    np.testing.assert_array_equal(native.tree_scores(x, forest, weights), want)
    np.testing.assert_array_equal(native.tree_scores(np.asfortranarray(x), forest, weights), want)
    assert forest._compiled_scorer is held
    # what it does not take: float64 weights, a shape that is not (leaves, targets)
    assert native.tree_scores(x, forest, weights.astype(np.float64)) is None
    assert native.tree_scores(x, forest, weights[:, :2]) is None


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
def test_compiled_tree_walk_refuses_a_cycle():
    forest = _random_forest(n_features=2, trees=1, depth=2, seed=0)
    forest.false_id[0], forest.false_leaf[0] = 0, False  # the root's false side loops to itself
    forest.mode[0], forest.split[0] = 0, -np.inf  # x <= -inf: always false
    with pytest.raises(ValueError, match="looped"):
        native.tree_leaves(np.zeros((1, 2)), forest)
    with pytest.raises(ValueError, match="looped"):
        native.tree_scores(np.zeros((1, 2)), forest, forest._weights(np.float32))


def test_tree_ensembles_take_the_compiled_walk_where_built():
    node = onnx.helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"], nodes_values=[0.5, 0.0, 0.0],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, 2.0])
    kdef, _ = registry.lookup("ai.onnx.ml", "TreeEnsembleRegressor", 3)
    kernel = kdef.factory(KernelInfo.from_node(node, 3, since_version=kdef.since_version))
    assert (kernel.forest.walker is native.tree_leaves) == native.ENABLED
    y = kernel.compute(np.array([[0.2], [0.9], [np.nan]], np.float32))[0]
    np.testing.assert_array_equal(y.ravel(), [1.0, 2.0, 2.0])


@pytest.mark.parametrize("post", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("labels", ["ints", "strings"])
def test_linear_classifier_one_row_matches_onnxruntime(post, labels):
    """One sample at a time (the compiled classify_row for NONE/SOFTMAX): the same labels and
    scores as onnxruntime and as the same row inside a batch, with tied classes (the first
    wins) and NaN features (every score NaN: the first class)."""
    import onyxrt

    coef = np.array([[1, 2, 0], [1, 2, 0], [-1, 0, 3], [0.5, -2, 1]], np.float32)  # 0 and 1 tie
    kwargs = ({"classlabels_ints": [7, 3, 9, 1]} if labels == "ints"
              else {"classlabels_strings": ["a", "b", "c", "d"]})
    node = helper.make_node("LinearClassifier", ["x"], ["label", "scores"], domain=ML,
                            coefficients=coef.ravel().tolist(), intercepts=[0.1, 0.1, -0.2, 0.3],
                            post_transform=post, **kwargs)
    label_type = TensorProto.INT64 if labels == "ints" else TensorProto.STRING
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3])],
                              [helper.make_tensor_value_info("label", label_type, [None]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)])
    data = model.SerializeToString()
    ours, theirs = onyxrt.InferenceSession(data), ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    rows = np.array([[1, 1, 1], [0.5, -1, 2], [np.nan, 0, 0], [3, -4, 0.25]], np.float32)
    batch_labels, batch_scores = ours.run(None, {"x": rows})
    for i, row in enumerate(rows):
        label, scores = ours.run(None, {"x": row[None]})
        want_label, want_scores = theirs.run(None, {"x": row[None]})
        assert label.tolist() == want_label.tolist() == batch_labels[i:i + 1].tolist()
        np.testing.assert_allclose(scores, want_scores, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(scores, batch_scores[i:i + 1], rtol=1e-6, atol=1e-7)


# ----------------------------------------------------------------- SVMs (csrc/svm.c)


@pytest.mark.skipif(not native.ENABLED, reason="the compiled module is not built")
@pytest.mark.parametrize("n,v,f", [(0, 16, 3), (1, 1, 1), (3, 15, 7), (2, 16, 4), (5, 17, 20), (4, 40, 9)])
def test_svm_rbf_sums_feature_by_feature(n, v, f):
    """exp(-gamma |x - v|^2) with each squared distance summed feature by feature in float32
    (onnxruntime's order), for vector counts around the 16-lane blocks: the sums are those
    of a float32 loop, the exponential within an ulp of numpy's."""
    rng = np.random.default_rng(n * 100 + v + f)
    x = rng.standard_normal((n, f)).astype(np.float32)
    sv = rng.standard_normal((v, f)).astype(np.float32)
    gamma = 0.37
    seq = np.zeros((n, v), np.float32)
    for k in range(f):
        d = x[:, k:k + 1] - sv[None, :, k]
        seq += d * d
    got = native.svm_rbf(x, np.ascontiguousarray(sv.T), gamma)
    assert got.dtype == np.float32 and got.shape == (n, v)
    np.testing.assert_allclose(got, np.exp(-np.float32(gamma) * seq), rtol=3e-7, atol=0)
    assert native.svm_rbf(x.astype(np.float64), np.ascontiguousarray(sv.T), gamma) is None


@pytest.mark.skipif(not native.ENABLED, reason="the compiled module is not built")
@pytest.mark.parametrize("classes", [2, 3, 4, 7])
@pytest.mark.parametrize("n", [0, 1, 6])
def test_svm_couple_matches_the_librarys_iteration(classes, n):
    """The compiled coupling against the operator library's whole-array iteration
    (``SVMClassifier.couple``) on pair probabilities across (0, 1), near-certain pairs
    included: the same probabilities to float32 rounding, each row summing to 1."""
    from onyxrt_ops.backend import numpy_backend
    from onyxrt_ops.library import library

    rng = np.random.default_rng(classes * 10 + n)
    pairs = classes * (classes - 1) // 2
    node = helper.make_node("SVMClassifier", ["x"], ["label", "scores"], domain=ML, kernel_type="RBF",
                            kernel_params=[0.3, 0.0, 3.0], vectors_per_class=[1] * classes,
                            support_vectors=rng.standard_normal(classes * 2).tolist(),
                            coefficients=rng.standard_normal((classes - 1) * classes).tolist(),
                            rho=rng.standard_normal(pairs).tolist(), prob_a=[-1.0] * pairs, prob_b=[0.0] * pairs,
                            classlabels_ints=list(range(classes)))
    kernel = library.kernel("SVMClassifier", 1, numpy_backend(), ML)(KernelInfo.from_node(node, 1))
    p = rng.uniform(0, 1, (n, pairs)).astype(np.float32)
    if n:
        p[0, 0] = 1e-7
        p[-1, -1] = np.float32(1 - 1e-7)
    want = kernel.couple(p)
    got = native.svm_couple(p, classes, 0.005 / classes)
    assert got.shape == want.shape == (n, classes) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)
    if n:
        np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=1e-5)
    assert native.svm_couple(p[:, :-1], classes, 0.005 / classes) is None  # not C (C - 1) / 2 pairs


@pytest.mark.parametrize("classes", [3, 4])
@pytest.mark.parametrize("kernel", ["RBF", "POLY"])
def test_svm_classifier_with_probabilities_matches_onnxruntime(classes, kernel):
    """SVC with probabilities (compiled RBF kernel values and coupling) against
    onnxruntime, 40 samples, 17-19 support vectors (a partial 16-lane block)."""
    rng = np.random.default_rng(classes)
    per = [5, 6, 8, 4][:classes]
    v, f, pairs = sum(per), 6, classes * (classes - 1) // 2
    node = ml_node("SVMClassifier", 1, 2, kernel_type=kernel, kernel_params=[0.2, 0.5, 3.0],
                   vectors_per_class=per, support_vectors=rng.standard_normal(v * f).tolist(),
                   coefficients=rng.standard_normal((classes - 1) * v).tolist(),
                   rho=rng.standard_normal(pairs).tolist(), prob_a=(-rng.uniform(0.5, 2, pairs)).tolist(),
                   prob_b=rng.standard_normal(pairs).tolist(), classlabels_ints=list(range(classes)))
    x = rng.standard_normal((40, f)).astype(np.float32)
    got = ours(node, 1, x)
    want = onnxruntime(node, 1, [x], [TensorProto.INT64, TensorProto.FLOAT])
    assert got[0].tolist() == want[0].tolist()
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not native.ENABLED, reason="the compiled module is not built")
@pytest.mark.parametrize("classes", [2, 3, 5])
def test_svm_couple_with_platt_scaling_matches_the_library(classes):
    """Decision values Platt-scaled in the compiled call (onnxruntime's
    sigmoid_probability and clamp) then coupled, against the library's array steps."""
    from onyxrt_ops.backend import numpy_backend
    from onyxrt_ops.library import library
    from onyxrt_ops.ml import _logistic

    rng = np.random.default_rng(classes)
    pairs = classes * (classes - 1) // 2
    a = (-rng.uniform(0.5, 3, pairs)).astype(np.float32)
    b = rng.normal(size=pairs).astype(np.float32)
    node = helper.make_node("SVMClassifier", ["x"], ["label", "scores"], domain=ML, kernel_type="RBF",
                            kernel_params=[0.3, 0.0, 3.0], vectors_per_class=[1] * classes,
                            support_vectors=rng.standard_normal(classes * 2).tolist(),
                            coefficients=rng.standard_normal((classes - 1) * classes).tolist(),
                            rho=rng.standard_normal(pairs).tolist(), prob_a=a.tolist(), prob_b=b.tolist(),
                            classlabels_ints=list(range(classes)))
    kernel = library.kernel("SVMClassifier", 1, numpy_backend(), ML)(KernelInfo.from_node(node, 1))
    s = rng.uniform(-6, 6, (9, pairs)).astype(np.float32)
    s[0, 0] = 40.0  # a clamped pair probability
    want = kernel.couple(np.clip(1.0 - _logistic(np, s * a + b), 1e-7, 1.0 - 1e-7))
    got = native.svm_couple(s, classes, 0.005 / classes, (a, b))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-7)


@pytest.mark.skipif(not native.ENABLED, reason="the compiled module is not built")
def test_svm_decide_values_and_votes():
    """Decision values summed in float64 vector by vector (the same bits as a Python
    loop over float64) and the vote winner (numpy's arg-max: the first of equal counts);
    a NaN decision votes for neither class of its pair."""
    rng = np.random.default_rng(0)
    classes, v = 4, 11
    pairs = [(i, j) for i in range(classes - 1) for j in range(i + 1, classes)]
    pi, pj = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    k = rng.standard_normal((5, v)).astype(np.float32)
    wt = rng.standard_normal((len(pairs), v))
    rho = rng.standard_normal(len(pairs))
    s, label = native.svm_decide(k, wt, rho, pi, pj, classes)
    want = np.array([[np.float32(sum(float(k[n, j]) * wt[p, j] for j in range(v)) + rho[p])
                      for p in range(len(pairs))] for n in range(5)], np.float32)
    np.testing.assert_array_equal(s, want)
    votes = (want > 0).astype(int) @ np.eye(classes, dtype=int)[pi] + (want <= 0).astype(int) @ np.eye(classes, dtype=int)[pj]
    assert label.tolist() == votes.argmax(axis=1).tolist()
    # NaN in the kernel values: every decision NaN, no votes at all: class 0 (the first).
    k[0, 0] = np.nan
    s, label = native.svm_decide(k, wt, rho, pi, pj, classes)
    assert np.isnan(s[0]).all() and label[0] == 0
    assert native.svm_decide(k[:, :3], wt, rho, pi, pj, classes) is None  # widths differ: not compiled
