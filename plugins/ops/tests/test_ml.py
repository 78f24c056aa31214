"""Tests for the ai.onnx.ml operators of the library (onyxrt_ops.ml), each against
onnxruntime's CPU kernels (``ort_outputs``): numeric operators over numpy and
array_api_strict, host ones (trees, strings, maps) over numpy; the numeric family under the
simulated CuPy; and a session end to end."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from library_harness import bind, domain_node, ort_outputs, run_node
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

ML = "ai.onnx.ml"
POSTS = ["NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT"]
RNG = np.random.default_rng(0)
X = RNG.normal(size=(12, 3)).astype(np.float32)


def node(op, inputs, n_out=1, **attrs):
    return domain_node(op, inputs, n_out, domain=ML, **attrs)


def check(bound, n, inputs, input_types=None, opset=1, rtol=1e-5, atol=1e-6):
    """Every output of ``n`` equals onnxruntime's: labels exactly, floats within tolerance."""
    got = run_node(bound, n, inputs, opset=opset)
    want = ort_outputs(n, inputs, opset=opset, input_types=input_types)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):
            assert [list(d) for d in g] == [list(d) for d in w]
            np.testing.assert_allclose([list(d.values()) for d in g], [list(d.values()) for d in w],
                                       rtol=rtol, atol=atol)
            continue
        g = np.asarray(g)
        assert g.shape == w.shape and (g.dtype == w.dtype or w.dtype.kind == "O"), (g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            assert g.tolist() == w.tolist()
    return got


def labels(kind, n):
    return {"classlabels_strings": ["a", "b", "c", "d"][:n]} if kind == "str" else {"classlabels_ints": [3, 7, 9, 11][:n]}


# ------------------------------------------------------------ linear models


# One score column under PROBIT: onnxruntime 1.32 writes past its packed scores (no oracle).
@pytest.mark.parametrize("post,classes", [(p, c) for p in POSTS for c in (1, 2, 3) if (p, c) != ("PROBIT", 1)])
@pytest.mark.parametrize("kind", ["int", "str"])
def test_linear_classifier(bound, post, classes, kind):
    n_lab = 2 if classes <= 2 else 3
    coef = RNG.normal(size=(classes, 3)).astype(np.float32)
    x = X * 0.3 if post == "PROBIT" else X  # PROBIT is defined on (0, 1)
    if post == "PROBIT":
        coef = np.abs(coef) * 0.1
    n = node("LinearClassifier", [x], 2, coefficients=coef.ravel().tolist(),
             intercepts=([0.5] if post == "PROBIT" else [0.1]) * classes, post_transform=post, **labels(kind, n_lab))
    check(bound, n, [x])


def test_linear_classifier_single_column_without_two_labels(numpy_bound):
    """One score column and three labels: refused (as onnxruntime 1.32 does)."""
    n = node("LinearClassifier", [X], 2, coefficients=[1.0, -1.0, 0.5], intercepts=[0.2], **labels("int", 3))
    kdef, _ = numpy_bound.registry.lookup(ML, "LinearClassifier", 1)
    with pytest.raises(InvalidGraph, match="LinearClassifier_node"):
        kdef.factory(KernelInfo.from_node(n, 1, since_version=1))


def test_linear_classifier_nan_and_empty(bound):
    """A NaN score never wins the arg-max (a NaN first column does); an empty batch."""
    x = X.copy()
    x[1, 0] = np.nan
    coef = [[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]]
    n = node("LinearClassifier", [x], 2, coefficients=np.ravel(coef).tolist(), intercepts=[0.0] * 3,
             classlabels_ints=[5, 6, 7], post_transform="SOFTMAX")
    check(bound, n, [x])
    x2 = X.copy()
    x2[2, 1] = np.nan  # not the first column: skipped
    check(bound, n, [x2])
    for post in ("NONE", "LOGISTIC"):
        nb = node("LinearClassifier", [X], 2, coefficients=[1.0, -1.0, 0.5], intercepts=[0.1],
                  classlabels_ints=[0, 1], post_transform=post)
        check(bound, nb, [X[:0]])
        check(bound, n, [X[:0]])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_linear_classifier_input_types(bound, dtype):
    x = (X * 4).astype(dtype)
    n = node("LinearClassifier", [x], 2, coefficients=RNG.normal(size=6).tolist(), intercepts=[0.0, 1.0],
             post_transform="SOFTMAX", classlabels_ints=[0, 1])
    check(bound, n, [x])


@pytest.mark.parametrize("post", POSTS[:3])
@pytest.mark.parametrize("targets", [1, 2])
def test_linear_regressor(bound, post, targets):
    n = node("LinearRegressor", [X], coefficients=RNG.normal(size=3 * targets).tolist(),
             intercepts=[0.25] * targets, targets=targets, post_transform=post)
    check(bound, n, [X])


def _svm_attrs(classes, kernel, proba, n_sv=(2, 3, 2)):
    per = list(n_sv[:classes])
    v = sum(per)
    pairs = classes * (classes - 1) // 2
    attrs = dict(kernel_type=kernel, kernel_params=[0.3, 0.5, 3.0], vectors_per_class=per,
                 support_vectors=RNG.normal(size=v * 3).tolist(), coefficients=RNG.normal(size=(classes - 1) * v).tolist(),
                 rho=RNG.normal(size=pairs).tolist())
    if proba:
        attrs.update(prob_a=(-RNG.uniform(0.5, 2, size=pairs)).tolist(), prob_b=RNG.normal(size=pairs).tolist())
    return attrs


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("proba", [False, True])
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
def test_svm_classifier(numpy_bound, strict_bound, kernel, classes, proba, post):
    n = node("SVMClassifier", [X], 2, post_transform=post, **_svm_attrs(classes, kernel, proba), **labels("int", classes))
    check(numpy_bound, n, [X])
    check(strict_bound, n, [X])
    ns = node("SVMClassifier", [X], 2, post_transform=post, **_svm_attrs(classes, kernel, proba), **labels("str", classes))
    check(numpy_bound, ns, [X])


@pytest.mark.parametrize("post", ["SOFTMAX_ZERO", "PROBIT"])
def test_svm_classifier_other_transforms(bound, post):
    """PROBIT on coupled probabilities (in (0, 1)); SOFTMAX_ZERO on pairwise scores."""
    proba = post == "PROBIT"
    n = node("SVMClassifier", [X], 2, post_transform=post, **_svm_attrs(3, "RBF", proba), **labels("int", 3))
    check(bound, n, [X])


def test_svm_empty_batch(bound):
    for proba in (False, True):
        n = node("SVMClassifier", [X], 2, **_svm_attrs(3, "POLY", proba), **labels("int", 3))
        check(bound, n, [X[:0]])
    n = node("SVMRegressor", [X], kernel_type="RBF", kernel_params=[0.2, 0.1, 2.0], n_supports=2,
             support_vectors=RNG.normal(size=6).tolist(), coefficients=[1.0, -1.0], rho=[0.3])
    check(bound, n, [X[:0]])


def test_svm_classifier_four_classes_coupling(numpy_bound):
    """Pairwise coupling over 4 classes, the label still the vote winner."""
    n = node("SVMClassifier", [X], 2, **_svm_attrs(4, "RBF", True, n_sv=(2, 1, 3, 2)) | labels("int", 4))
    check(numpy_bound, n, [X])


@pytest.mark.parametrize("classes", [2, 3])
@pytest.mark.parametrize("positive", [False, True])
def test_svm_classifier_liblinear(numpy_bound, classes, positive):
    coef = RNG.normal(size=classes * 3)
    coef = np.abs(coef) if positive else coef
    n = node("SVMClassifier", [X], 2, coefficients=coef.tolist(), rho=[0.1], kernel_params=[0.0, 0.0, 0.0],
             **labels("int", classes))
    check(numpy_bound, n, [X])


@pytest.mark.parametrize("kernel", ["LINEAR", "POLY", "RBF", "SIGMOID"])
@pytest.mark.parametrize("one_class", [0, 1])
def test_svm_regressor(bound, kernel, one_class):
    n = node("SVMRegressor", [X], kernel_type=kernel, kernel_params=[0.2, 0.1, 2.0], n_supports=4,
             support_vectors=RNG.normal(size=12).tolist(), coefficients=RNG.normal(size=4).tolist(), rho=[0.3],
             one_class=one_class)
    check(bound, n, [X])
    lin = node("SVMRegressor", [X], coefficients=[0.5, -1.0, 2.0], rho=[0.3], kernel_params=[0.0, 0.0, 0.0])
    check(bound, lin, [X])


def test_svm_bad_attributes_are_invalid_graph(numpy_bound):
    n = node("SVMClassifier", [X], 2, kernel_type="CUBIC", coefficients=[1.0], rho=[0.0], classlabels_ints=[0, 1])
    kdef, _ = numpy_bound.registry.lookup(ML, "SVMClassifier", 1)
    with pytest.raises(InvalidGraph, match="SVMClassifier_node"):
        kdef.factory(KernelInfo.from_node(n, 1, since_version=1))


# ------------------------------------------------------------ tree ensemble classifier

_MODES = ["BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ"]


def _tree(mode, class_ids, weights, base=None, post="NONE", kind="int", n_classes=3, tensor=None):
    """Two trees over 3 features; tree 0: 5 nodes (2 splits), tree 1: a single leaf."""
    attrs = dict(
        nodes_treeids=[0, 0, 0, 0, 0, 1], nodes_nodeids=[0, 1, 2, 3, 4, 0], nodes_featureids=[0, 1, 0, 0, 0, 0],
        nodes_modes=[mode, "BRANCH_LEQ", "LEAF", "LEAF", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 2, 0, 0, 0, 0], nodes_falsenodeids=[4, 3, 0, 0, 0, 0],
        nodes_missing_value_tracks_true=[1, 0, 0, 0, 0, 0],
        class_treeids=[0] * 3 + [1] * (len(class_ids) - 3), class_nodeids=[2, 3, 4] + [0] * (len(class_ids) - 3),
        class_ids=class_ids, post_transform=post)
    values = [0.25, -0.5, 0, 0, 0, 0]
    if tensor is not None:  # the *_as_tensor attributes, of dtype ``tensor``
        attrs["nodes_values_as_tensor"] = numpy_helper.from_array(np.array(values, tensor), "v")
        attrs["class_weights_as_tensor"] = numpy_helper.from_array(np.array(weights, tensor), "w")
        if base is not None:
            attrs["base_values_as_tensor"] = numpy_helper.from_array(np.array(base, tensor), "b")
    else:
        attrs.update(nodes_values=values, class_weights=weights)
        if base is not None:
            attrs["base_values"] = base
    if kind == "str":
        attrs["classlabels_strings"] = ["a", "b", "c"][:n_classes]
    else:
        attrs["classlabels_int64s"] = [4, 5, 6][:n_classes]
    return node("TreeEnsembleClassifier", [X], 2, **attrs)


TREE_X = np.concatenate([X, np.array([[0.25, -0.5, 0], [np.nan, 0, 0], [0, np.nan, 1]], np.float32)])


@pytest.mark.parametrize("mode", _MODES)
@pytest.mark.parametrize("post", POSTS[:4])
def test_tree_classifier_multiclass(numpy_bound, mode, post):
    n = _tree(mode, [0, 1, 2, 1], [0.5, 1.5, -0.25, 0.3], base=[0.1, 0.2, 0.3], post=post)
    check(numpy_bound, n, [TREE_X])


def test_tree_classifier_probit_and_empty(numpy_bound):
    n = _tree("BRANCH_LEQ", [0, 1, 2, 1], [0.05, 0.15, 0.25, 0.1], base=[0.1, 0.2, 0.3], post="PROBIT")
    check(numpy_bound, n, [TREE_X])
    check(numpy_bound, n, [TREE_X[:0]])
    check(numpy_bound, _tree("BRANCH_LEQ", [0, 0, 0, 0], [0.6, 0.2, 0.9, 0.1], n_classes=2), [TREE_X[:0]])


# The binary special cases: one class id or both, weights signs, 0/1/2 base values.
BINARY = list(itertools.product([[1, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 1]],
                                [[0.6, 0.2, 0.9, 0.1], [0.6, -0.2, 0.9, -0.1]],
                                [None, [0.3], [0.2, 0.4]]))


@pytest.mark.parametrize("ids,weights,base", BINARY)
@pytest.mark.parametrize("post", ["NONE", "LOGISTIC", "SOFTMAX"])
@pytest.mark.parametrize("kind", ["int", "str"])
def test_tree_classifier_binary(numpy_bound, ids, weights, base, post, kind):
    n = _tree("BRANCH_LT", ids, weights, base=base, post=post, kind=kind, n_classes=2)
    check(numpy_bound, n, [TREE_X])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_tree_classifier_v3_tensors_and_input_types(numpy_bound, dtype):
    x = TREE_X.astype(dtype) if dtype == np.float64 else np.nan_to_num(TREE_X * 2).astype(dtype)
    # onnxruntime reads the tensors as double only for a double input (float32 otherwise).
    n = _tree("BRANCH_GTE", [0, 1, 2, 0], [0.5, 1.5, -0.25, 0.3], base=[0.1, 0.2, 0.3],
              tensor=np.float64 if dtype == np.float64 else np.float32, post="SOFTMAX")
    check(numpy_bound, n, [x], opset=3)
    n1 = _tree("BRANCH_GT", [0, 1, 2, 0], [0.5, 1.5, -0.25, 0.3], post="LOGISTIC", kind="str")
    check(numpy_bound, n1, [x], opset=1)


def test_tree_regressor_v3_tensors(numpy_bound):
    attrs = dict(nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[2, 0, 0],
                 nodes_modes=["BRANCH_NEQ", "LEAF", "LEAF"], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
                 nodes_values_as_tensor=numpy_helper.from_array(np.array([0.0, 0, 0], np.float32), "v"),
                 target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0],
                 target_weights_as_tensor=numpy_helper.from_array(np.array([0.25, -1.5], np.float32), "w"),
                 base_values_as_tensor=numpy_helper.from_array(np.array([0.5], np.float32), "b"), n_targets=1)
    for post in ("NONE", "LOGISTIC"):  # one column: LOGISTIC is not applied (onnxruntime)
        check(numpy_bound, node("TreeEnsembleRegressor", [TREE_X], post_transform=post, **attrs), [TREE_X], opset=3)


# ------------------------------------------------------------ feature transforms


def test_scaler_normalizer_binarizer_imputer(bound):
    x = X.copy()
    x[3] = 0
    for n in (node("Scaler", [x], offset=[0.5, -1, 2], scale=[2.0, 0.5, -1]), node("Scaler", [x], offset=[1.0], scale=[3.0]),
              node("Normalizer", [x], norm="MAX"), node("Normalizer", [x], norm="L1"),
              node("Normalizer", [x], norm="L2"), node("Binarizer", [x], threshold=0.3)):
        check(bound, n, [x])
    xm = x.copy()
    xm[::2, 1] = np.nan
    check(bound, node("Imputer", [xm], imputed_value_floats=[1.0, 2.0, 3.0], replaced_value_float=float("nan")), [xm])
    xi = np.array([[-1, 5], [3, -1]], np.int64)
    check(bound, node("Imputer", [xi], imputed_value_int64s=[9], replaced_value_int64=-1), [xi])


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.int32])
def test_scaler_normalizer_int_inputs(bound, dtype):
    x = (X * 5).astype(dtype)
    check(bound, node("Scaler", [x], offset=[0.5, -1, 2], scale=[2.0, 0.5, -1]), [x])
    check(bound, node("Normalizer", [x], norm="L2"), [x])


def test_array_feature_extractor(numpy_bound, strict_bound):
    idx = np.array([1, 0, 1], np.int64)
    for x in (X, X[0], RNG.normal(size=(2, 3, 4)).astype(np.float32), (X * 9).astype(np.int64)):
        check(numpy_bound, node("ArrayFeatureExtractor", [x, idx]), [x, idx])
        check(strict_bound, node("ArrayFeatureExtractor", [x, idx]), [x, idx])
    xs = np.array([["a", "b"], ["c", "d"]], object)
    check(numpy_bound, node("ArrayFeatureExtractor", [xs, idx]), [xs, idx])
    with pytest.raises(ValueError, match="out of range"):
        run_node(numpy_bound, node("ArrayFeatureExtractor", [X, idx]), [X, np.array([3], np.int64)])


def test_feature_vectorizer(bound):
    a = X
    b = RNG.normal(size=(12, 2, 2)).astype(np.float32)
    c = RNG.normal(size=(12, 2)).astype(np.float32)
    n = node("FeatureVectorizer", [a, b, c], inputdimensions=[2, 4, 3])  # cut a, pad c
    check(bound, n, [a, b, c])
    # onnxruntime binds every input to one type: int64 and double inputs each on their own.
    for dtype in (np.int64, np.float64, np.int32):
        xi = (X * 3).astype(dtype)
        check(bound, node("FeatureVectorizer", [xi, xi], inputdimensions=[3, 5]), [xi, xi])


def test_one_hot_encoder(numpy_bound, strict_bound):
    xi = np.array([[1, 5], [3, 9]], np.int64)
    for b in (numpy_bound, strict_bound):
        check(b, node("OneHotEncoder", [xi], cats_int64s=[1, 3, 5]), [xi])
        xf = np.array([1.7, 3.2, 5.0], np.float32)
        check(b, node("OneHotEncoder", [xf], cats_int64s=[1, 3, 5]), [xf])
    xs = np.array([["a", "z"], ["b", "a"]], object)
    check(numpy_bound, node("OneHotEncoder", [xs], cats_strings=["a", "b"]), [xs])
    with pytest.raises(ValueError, match="categories"):
        run_node(numpy_bound, node("OneHotEncoder", [xs], cats_strings=["a", "b"], zeros=0), [xs])


def test_category_mapper_and_label_encoder(numpy_bound):
    attrs = dict(cats_strings=["x", "y", "z"], cats_int64s=[10, 20, 30], default_string="?", default_int64=-7)
    xs = np.array([["y", "q"], ["x", "z"]], object)
    check(numpy_bound, node("CategoryMapper", [xs], **attrs), [xs])
    xi = np.array([30, 5, 10], np.int64)
    check(numpy_bound, node("CategoryMapper", [xi], **attrs), [xi])
    n = node("LabelEncoder", [xs], keys_strings=["x", "y"], values_int64s=[4, 5], default_int64=0)
    check(numpy_bound, n, [xs], opset=2)
    n4 = node("LabelEncoder", [xi], keys_tensor=numpy_helper.from_array(np.array([5, 10], np.int64), "k"),
              values_tensor=numpy_helper.from_array(np.array([0.5, 1.5], np.float64), "v"),
              default_tensor=numpy_helper.from_array(np.array([-1.0], np.float64), "d"))
    check(numpy_bound, n4, [xi], opset=4)
    v1 = node("LabelEncoder", [xs], classes_strings=["z", "x", "y"], default_int64=-3)
    check(numpy_bound, v1, [xs], opset=1)
    v1 = node("LabelEncoder", [xi], classes_strings=["z", "x", "y"], default_string="none")
    check(numpy_bound, v1, [np.array([0, 2, 5, -1], np.int64)], opset=1)


# ------------------------------------------------------------ maps and sequences


def _map_type(key, value):
    return helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None))


@pytest.mark.parametrize("kind", ["int", "str"])
def test_zipmap(numpy_bound, kind):
    p = RNG.uniform(size=(4, 3)).astype(np.float32)
    # Unsorted labels: onnxruntime's dicts come back in key order.
    attrs = {"classlabels_strings": ["b", "c", "a"]} if kind == "str" else {"classlabels_int64s": [7, 1, 3]}
    check(numpy_bound, node("ZipMap", [p], **attrs), [p])
    check(numpy_bound, node("ZipMap", [p[0]], **attrs), [p[0]])


def test_dict_vectorizer(numpy_bound):
    m = {"b": 2.0, "zz": 5.0, "a": -1.0}
    n = node("DictVectorizer", [m], string_vocabulary=["a", "b", "c"])
    check(numpy_bound, n, [m], input_types=[_map_type(TensorProto.STRING, TensorProto.FLOAT)])
    mi = {3: 4, 1: 7}
    n = node("DictVectorizer", [mi], int64_vocabulary=[1, 2, 3])
    got = run_node(numpy_bound, n, [mi])[0]
    assert got.dtype == np.int64 and got.tolist() == [[7, 0, 4]]
    # onnxruntime's Python binding cannot feed map(int64, string): checked by hand.
    ms = {3: "x", 1: "y"}
    got = run_node(numpy_bound, node("DictVectorizer", [ms], int64_vocabulary=[1, 2, 3]), [ms])[0]
    assert got.tolist() == [["y", "", "x"]]
    md = {3: 1.5, 1: -2.0, 8: 4.0}
    check(numpy_bound, node("DictVectorizer", [md], int64_vocabulary=[3, 2, 1]), [md],
          input_types=[_map_type(TensorProto.INT64, TensorProto.FLOAT)])


@pytest.mark.parametrize("cast_to", ["TO_FLOAT", "TO_INT64", "TO_STRING"])
@pytest.mark.parametrize("form", ["DENSE", "SPARSE"])
def test_cast_map(numpy_bound, cast_to, form):
    m = {3: 1.5, 0: -2.0, 1: 7.0}
    n = node("CastMap", [m], cast_to=cast_to, map_form=form, max_map=5)
    check(numpy_bound, n, [m], input_types=[_map_type(TensorProto.INT64, TensorProto.FLOAT)])


# ------------------------------------------------------------ GPU (simulated) and session


def test_numeric_family_on_simulated_cupy(numpy_bound):
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    nodes = [
        node("LinearClassifier", [X], 2, coefficients=RNG.normal(size=9).tolist(), intercepts=[0, 1, 2],
             post_transform="SOFTMAX", classlabels_ints=[1, 2, 3]),
        node("SVMClassifier", [X], 2, **_svm_attrs(3, "RBF", True), classlabels_ints=[0, 1, 2]),
        node("SVMRegressor", [X], kernel_type="POLY", kernel_params=[0.2, 0.1, 2.0], n_supports=2,
             support_vectors=RNG.normal(size=6).tolist(), coefficients=[0.5, -1.0], rho=[0.3]),
        node("Normalizer", [X], norm="L2"), node("Scaler", [X], offset=[1.0], scale=[2.0]),
        node("Binarizer", [X], threshold=0.1), node("LinearRegressor", [X], coefficients=[1.0, 2, 3], intercepts=[1.0]),
        node("Imputer", [X], imputed_value_floats=[9.0], replaced_value_float=float(X[0, 0])),
        node("FeatureVectorizer", [X], inputdimensions=[5]), node("OneHotEncoder", [X], cats_int64s=[0, 1, -1]),
        node("ZipMap", [X], classlabels_int64s=[4, 2, 3]),
        _tree("BRANCH_LEQ", [0, 1, 2, 1], [0.5, 1.5, -0.25, 0.3], base=[0.1, 0.2, 0.3]),
    ]
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        gpu.array = cupy.asarray
        gpu.host = lambda v: v.get()
        for n in nodes:
            got = run_node(gpu, n, [X])
            want = run_node(numpy_bound, n, [X])
            for g, w in zip(got, want):
                if isinstance(w, list):  # ZipMap's dicts
                    assert g == w
                    continue
                assert isinstance(g, np.ndarray) and g.dtype == w.dtype
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
        idx = np.array([2, 0], np.int64)
        n = node("ArrayFeatureExtractor", [X, idx])
        np.testing.assert_array_equal(run_node(gpu, n, [X, idx], host_inputs=(1,))[0],
                                      run_node(numpy_bound, n, [X, idx])[0])


def test_session_classifier_with_zipmap():
    """LinearClassifier → ZipMap, and a TreeEnsembleClassifier, through onyxrt's session."""
    lc = helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain=ML,
                          coefficients=RNG.normal(size=9).tolist(), intercepts=[0.1, 0.2, 0.3],
                          classlabels_strings=["a", "b", "c"], post_transform="SOFTMAX")
    zm = helper.make_node("ZipMap", ["scores"], ["probs"], domain=ML, classlabels_strings=["a", "b", "c"])
    tree = _tree("BRANCH_LEQ", [0, 1, 2, 1], [0.5, 1.5, -0.25, 0.3], base=[0.1, 0.2, 0.3])
    tree.input[:] = ["X"]
    tree.output[:] = ["tlabel", "tscores"]
    graph = helper.make_graph(
        [lc, zm, tree], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3])],
        [helper.make_tensor_value_info("label", TensorProto.STRING, [None]),
         helper.make_value_info("probs", helper.make_sequence_type_proto(
             helper.make_map_type_proto(TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, None)))),
         helper.make_tensor_value_info("tlabel", TensorProto.INT64, [None]),
         helper.make_tensor_value_info("tscores", TensorProto.FLOAT, [None, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 3)],
                              ir_version=8)
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    got_s, want_s = onyxrt.InferenceSession(data), ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got, want = got_s.run(None, {"X": TREE_X}), want_s.run(None, {"X": TREE_X})
    assert [o.type for o in got_s.get_outputs()] == [o.type for o in want_s.get_outputs()]
    assert np.asarray(got[0]).tolist() == want[0].tolist()
    assert [list(d) for d in got[1]] == [list(d) for d in want[1]]
    np.testing.assert_allclose([list(d.values()) for d in got[1]], [list(d.values()) for d in want[1]], rtol=1e-5)
    assert np.asarray(got[2]).tolist() == want[2].tolist()
    np.testing.assert_allclose(got[3], want[3], rtol=1e-5, atol=1e-6)


def test_session_string_and_map_operators():
    """LabelEncoder → CategoryMapper on strings, Binarizer, and CastMap on a map input,
    through onyxrt's session."""
    le = helper.make_node("LabelEncoder", ["S"], ["codes"], domain=ML, keys_strings=["a", "b", "c"],
                          values_int64s=[10, 20, 30], default_int64=20)
    cm = helper.make_node("CategoryMapper", ["codes"], ["names"], domain=ML, cats_int64s=[10, 30],
                          cats_strings=["ten", "thirty"], default_string="other")
    bz = helper.make_node("Binarizer", ["X"], ["bits"], domain=ML, threshold=0.2)
    cast = helper.make_node("CastMap", ["M"], ["dense"], domain=ML, cast_to="TO_FLOAT", map_form="SPARSE", max_map=4)
    graph = helper.make_graph(
        [le, cm, bz, cast], "g",
        [helper.make_tensor_value_info("S", TensorProto.STRING, [None]),
         helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 3]),
         helper.make_value_info("M", _map_type(TensorProto.INT64, TensorProto.FLOAT))],
        [helper.make_tensor_value_info("names", TensorProto.STRING, [None]),
         helper.make_tensor_value_info("bits", TensorProto.FLOAT, [None, 3]),
         helper.make_tensor_value_info("dense", TensorProto.FLOAT, [1, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 2)],
                              ir_version=8)
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    feeds = {"S": np.array(["a", "c", "q", "b"], object), "X": X, "M": {0: 1.5, 3: -2.0}}
    got_s, want_s = onyxrt.InferenceSession(data), ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got, want = got_s.run(None, feeds), want_s.run(None, feeds)
    assert [o.type for o in got_s.get_outputs()] == [o.type for o in want_s.get_outputs()]
    assert np.asarray(got[0]).tolist() == want[0].tolist() == ["ten", "thirty", "other", "other"]
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])


def test_bad_attributes_and_inputs(numpy_bound):
    """Attribute errors are InvalidGraph naming the node; bad data a clear ValueError."""
    bad = [
        node("TreeEnsembleClassifier", [X], 2, nodes_treeids=[0], nodes_nodeids=[0], nodes_modes=["LEAF"]),
        node("CastMap", [X], cast_to="TO_BYTES"),
        node("DictVectorizer", [X], string_vocabulary=["a"], int64_vocabulary=[1]),
        node("LinearClassifier", [X], 2, coefficients=[1.0, 2.0, 3.0], intercepts=[0.0, 1.0], classlabels_ints=[0]),
        node("SVMRegressor", [X], coefficients=[1.0], kernel_params=[0.0, 0.0, 0.0]),
        node("ZipMap", [X]),
    ]
    for n in bad:
        kdef, _ = numpy_bound.registry.lookup(ML, n.op_type, 3 if n.op_type.startswith("Tree") else 1)
        with pytest.raises(InvalidGraph, match=f"{n.op_type}_node"):
            kdef.factory(KernelInfo.from_node(n, 1, since_version=kdef.since_version))
    runs = [
        (node("ZipMap", [X], classlabels_int64s=[1, 2]), [X], "columns"),
        (node("LinearRegressor", [X], coefficients=[1.0, 2.0]), [X], "features"),
        (node("SVMRegressor", [X], coefficients=[1.0, 2.0], rho=[0.0], kernel_params=[0.0, 0.0, 0.0]), [X], "features"),
        (node("DictVectorizer", [X], string_vocabulary=["a"]), [X], "map"),
        (node("CastMap", [{7: 1.0}], map_form="SPARSE", max_map=2), [{7: 1.0}], "max_map"),
        (node("FeatureVectorizer", [X], inputdimensions=[1, 2]), [X], "inputdimensions"),
        (_tree("BRANCH_LEQ", [0, 1, 2, 1], [0.5, 1.5, -0.25, 0.3]), [X[:, :1]], "feature"),
    ]
    for n, inputs, message in runs:
        with pytest.raises(ValueError, match=message):
            run_node(numpy_bound, n, inputs, opset=3 if n.op_type.startswith("Tree") else 1)
