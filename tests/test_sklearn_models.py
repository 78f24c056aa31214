"""scikit-learn models converted by skl2onnx, run by onyxrt and onnxruntime side by side.

Each case fits a small estimator or pipeline, converts it (classifiers with and without
ZipMap), runs both runtimes on the same inputs and asserts: labels identical,
probabilities/scores within rtol 1e-5 / atol 1e-6 (ZipMap outputs dict by dict), and the
outputs' NodeArg type strings equal. skl2onnx and scikit-learn are test requirements.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from skl2onnx import to_onnx
from skl2onnx.common.data_types import (
    DictionaryType,
    FloatTensorType,
    Int64TensorType,
    StringTensorType,
)
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    ExtraTreesClassifier,
    GradientBoostingClassifier,
    GradientBoostingRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.feature_extraction import DictVectorizer
from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
from sklearn.impute import SimpleImputer
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge, SGDClassifier
from sklearn.naive_bayes import BernoulliNB, GaussianNB, MultinomialNB
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import (
    MinMaxScaler,
    Normalizer,
    OneHotEncoder,
    RobustScaler,
    StandardScaler,
)
from sklearn.svm import SVC, SVR, LinearSVC, LinearSVR
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

import onyxrt

RTOL, ATOL = 1e-5, 1e-6
# scikit-learn 1.9 deprecates SVC(probability=True); its models still convert and run.
pytestmark = pytest.mark.filterwarnings("ignore:.*(probability|probA_|probB_).*:FutureWarning")


@pytest.fixture(autouse=True)
def _hist_gradient_boosting_fix(monkeypatch):
    """skl2onnx 1.20 passes a Python bool (``missing = False`` for leaves) as
    nodes_missing_value_tracks_true, which onnx refuses ("Expected an int, got a boolean")
    for every HistGradientBoosting model: convert it to an int, nothing else changes."""
    import skl2onnx.common.tree_ensemble as te

    add_node = te.add_node

    def fixed(*args, nodes_missing_value_tracks_true=0, **kwargs):
        return add_node(*args, nodes_missing_value_tracks_true=int(nodes_missing_value_tracks_true), **kwargs)

    monkeypatch.setattr(te, "add_node", fixed)
_rng = np.random.default_rng(0)
X = _rng.normal(size=(40, 4)).astype(np.float32)
Y_MULTI = (X[:, 0] + X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 0.5)  # 3 classes
Y_BIN = (X[:, 0] - X[:, 3] > 0).astype(np.int64)
Y_REG = (X @ np.array([1.0, -2.0, 0.5, 0.25], np.float32) + 0.1).astype(np.float32)
NAMES = np.array(["cat", "dog", "emu"], dtype=object)


def _compare(onx, feeds):
    """Run both runtimes on ``feeds`` and compare every output and its type string."""
    data = onx.SerializeToString()
    want_sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    got_sess = onyxrt.InferenceSession(data)
    want = want_sess.run(None, feeds)
    got = got_sess.run(None, feeds)
    assert [o.type for o in got_sess.get_outputs()] == [o.type for o in want_sess.get_outputs()]
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, list):  # ZipMap: a list of dicts
            assert isinstance(g, list) and len(g) == len(w)
            for gd, wd in zip(g, w):
                assert list(gd) == list(wd)
                np.testing.assert_allclose(list(gd.values()), list(wd.values()), rtol=RTOL, atol=ATOL)
            continue
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.kind in "fc":
            np.testing.assert_allclose(g, w, rtol=RTOL, atol=ATOL)
        else:
            assert g.tolist() == w.tolist()


def _check(model, x=X, zipmap=(True, False), **kw):
    """Convert ``model`` (fitted) and compare on ``x``; classifiers with/without ZipMap."""
    # Only a model with probabilities has a ZipMap (and the option).
    for zm in zipmap if hasattr(model, "predict_proba") else (True,):
        options = None if zm else {id(model): {"zipmap": False}}
        onx = to_onnx(model, x[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3}, **kw)
        _compare(onx, {onx.graph.input[0].name: x})


CLASSIFIERS = {
    "logistic_multi": lambda: LogisticRegression(max_iter=200),
    "logistic_binary": lambda: LogisticRegression(max_iter=200),
    "sgd_hinge": lambda: SGDClassifier(random_state=0),
    "linear_svc": lambda: LinearSVC(),
    "svc_rbf": lambda: SVC(),
    "svc_poly_proba": lambda: SVC(kernel="poly", degree=3, probability=True, random_state=0),
    "svc_sigmoid": lambda: SVC(kernel="sigmoid"),
    "svc_linear_proba": lambda: SVC(kernel="linear", probability=True, random_state=0),
    "decision_tree": lambda: DecisionTreeClassifier(max_depth=4, random_state=0),
    "random_forest": lambda: RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0),
    "extra_trees": lambda: ExtraTreesClassifier(n_estimators=5, max_depth=4, random_state=0),
    "gradient_boosting": lambda: GradientBoostingClassifier(n_estimators=5, max_depth=2, random_state=0),
    "hist_gradient_boosting": lambda: HistGradientBoostingClassifier(max_iter=5, random_state=0),
    "knn": lambda: KNeighborsClassifier(n_neighbors=3),
    "gaussian_nb": lambda: GaussianNB(),
    "bernoulli_nb": lambda: BernoulliNB(),
}


@pytest.mark.parametrize("name", ["logistic_multi", "random_forest", "extra_trees", "decision_tree",
                                  "gradient_boosting"])
def test_classifier_one_row(name):
    """A single sample, as a service scores it: the one-row paths (a random forest's
    scores without vote masks, the compiled softmax) against onnxruntime, row by row."""
    model = CLASSIFIERS[name]().fit(X, Y_MULTI)
    onx = to_onnx(model, X[:1], target_opset={"": 17, "ai.onnx.ml": 3})
    for i in range(0, len(X), 7):
        _compare(onx, {onx.graph.input[0].name: X[i:i + 1]})


@pytest.mark.parametrize("labels", ["int", "str"])
@pytest.mark.parametrize("binary", [False, True], ids=["multi", "binary"])
@pytest.mark.parametrize("name", sorted(CLASSIFIERS))
def test_classifier(name, binary, labels):
    y = Y_BIN if binary else Y_MULTI
    if labels == "str":
        y = NAMES[y]
    model = CLASSIFIERS[name]().fit(X, y)
    _check(model)


def test_multinomial_nb():
    xc = np.abs(X).round().astype(np.float32)
    _check(MultinomialNB().fit(xc, NAMES[Y_MULTI]), x=xc)
    _check(MultinomialNB().fit(xc, Y_BIN), x=xc)


REGRESSORS = {
    "linear_regression": LinearRegression,
    "ridge": Ridge,
    "linear_svr": lambda: LinearSVR(random_state=0),
    "svr_rbf": SVR,
    "svr_poly": lambda: SVR(kernel="poly", degree=2),
    "decision_tree": lambda: DecisionTreeRegressor(max_depth=4, random_state=0),
    "random_forest": lambda: RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0),
    "gradient_boosting": lambda: GradientBoostingRegressor(n_estimators=5, max_depth=2, random_state=0),
    "hist_gradient_boosting": lambda: HistGradientBoostingRegressor(max_iter=5, random_state=0),
    "knn": lambda: KNeighborsRegressor(n_neighbors=3),
}


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_regressor(name):
    _check(REGRESSORS[name]().fit(X, Y_REG))


@pytest.mark.parametrize("scaler", [StandardScaler, MinMaxScaler, RobustScaler, lambda: Normalizer("l1"),
                                    lambda: Normalizer("l2"), lambda: Normalizer("max")],
                         ids=["standard", "minmax", "robust", "norm_l1", "norm_l2", "norm_max"])
def test_transformer(scaler):
    _check(scaler().fit(X))


def test_simple_imputer_pipeline():
    xm = X.copy()
    xm[::3, 1] = np.nan
    xm[::5, 2] = np.nan
    _check(SimpleImputer(strategy="mean").fit(xm), x=xm)
    _check(make_pipeline(SimpleImputer(strategy="median"), StandardScaler(),
                         LogisticRegression(max_iter=200)).fit(xm, NAMES[Y_MULTI]), x=xm)


def test_one_hot_encoder():
    xs = np.array([["a", "x"], ["b", "y"], ["a", "y"], ["c", "x"]], dtype=object)
    _check(OneHotEncoder(handle_unknown="ignore").fit(xs), x=xs)
    xi = np.array([[1, 7], [2, 7], [3, 8], [1, 9]], dtype=np.int64)
    _check(OneHotEncoder(handle_unknown="ignore").fit(xi), x=xi)


def test_dict_vectorizer():
    rows = [{"a": 1.0, "b": 2.0}, {"b": 3.0, "c": -1.0}, {"a": 0.5}]
    model = DictVectorizer(sparse=False).fit(rows)
    onx = to_onnx(model, initial_types=[("input", DictionaryType(StringTensorType([1]), FloatTensorType([1])))],
                  target_opset={"": 17, "ai.onnx.ml": 3})
    for row in [*rows, {"zzz": 4.0, "c": 2.0}]:
        _compare(onx, {"input": row})


@pytest.mark.parametrize("vectorizer", [CountVectorizer, TfidfVectorizer])
def test_text_pipeline(vectorizer):
    texts = np.array(["the cat sat", "the dog ran", "a cat ran far", "dogs and cats", "the emu",
                      "an emu ran"], dtype=object)
    y = np.array([0, 1, 0, 1, 2, 2])
    model = make_pipeline(vectorizer(), LogisticRegression(max_iter=200)).fit(texts, y)
    onx = to_onnx(model, initial_types=[("text", StringTensorType([None, 1]))],
                  target_opset={"": 17, "ai.onnx.ml": 3},
                  # onnxruntime's StringNormalizer needs the locale to exist on the machine.
                  options={id(model[-1]): {"zipmap": False}, id(model[0]): {"locale": "C"}})
    _compare(onx, {"text": texts.reshape(-1, 1)})


def test_column_transformer_pipeline():
    ct = ColumnTransformer([("std", StandardScaler(), [0, 1]), ("minmax", MinMaxScaler(), [2, 3]),
                            ("norm", Normalizer(), [0, 2])])
    model = make_pipeline(ct, RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0))
    _check(model.fit(X, NAMES[Y_MULTI]))
    _check(make_pipeline(ct, SVC(probability=True, random_state=0)).fit(X, Y_MULTI))


def test_int64_input_linear():
    xi = np.round(X * 3).astype(np.int64)
    model = LogisticRegression(max_iter=300).fit(xi, Y_MULTI)
    onx = to_onnx(model, initial_types=[("X", Int64TensorType([None, 4]))],
                  target_opset={"": 17, "ai.onnx.ml": 3})
    _compare(onx, {"X": xi})
