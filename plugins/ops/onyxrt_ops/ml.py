"""The ai.onnx.ml domain: the classic machine-learning operators (scikit-learn converters').

Semantics follow onnxruntime's CPU kernels (the oracle), including their quirks:

* post transforms (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT) are applied as
  onnxruntime's ``batched_update_scores_inplace``: on a single score column only PROBIT
  applies; PROBIT uses onnxruntime's closed-form ``ErfInv`` approximation (Winitzki,
  a = 0.147; about 1e-3 off the exact inverse), SOFTMAX_ZERO leaves |score| <= 1e-7 out;
* binary classifiers with one score column expand it to two as onnxruntime 1.32 does
  (checked against it, which differs from older sources): ``[1 - s, s]`` or, with weights
  of mixed signs, ``[-s, s]``; under LOGISTIC ``[1 - logistic(s), logistic(s)]`` (the
  logistic applied first, LinearClassifier and SVMClassifier included). Labels follow
  onnxruntime's rules (LinearClassifier: score > 0, and one score column needs exactly
  two labels; SVMClassifier: pairwise votes, ``ChooseClass``; TreeEnsembleClassifier:
  ``_set_score_binary``, where a two-class model whose leaves vote for both classes
  labels 1/0 literally, not by ``classlabels_int64s``);
* TreeEnsembleClassifier sums votes in float32 (float64 for a double input) as
  onnxruntime does — a binary label is decided by a tie at 0 or 0.5 — and writes 0 for a
  class no reached leaf voted for, base value or not (onnxruntime 1.32);
* SVMClassifier with prob_a/prob_b: Platt scaling per pair, then libsvm's pairwise coupling
  (``multiclass_probability``: at most 100 sweeps, stopping per sample); the label is still
  the vote winner.

Numeric operators (LinearClassifier, LinearRegressor, SVMClassifier, SVMRegressor, Scaler,
Normalizer, Binarizer, Imputer, FeatureVectorizer, ArrayFeatureExtractor, OneHotEncoder over
numbers) are written over ``self.xp``, so GPU providers get them. Host algorithms, computed
with numpy on ``self.host()`` copies and handed back as ``self.xp.asarray``: tree walks
(TreeEnsemble, TreeEnsembleClassifier, TreeEnsembleRegressor — every (sample, tree) pair
walks down one level per vectorized step), string look-ups (LabelEncoder, CategoryMapper,
string labels, OneHotEncoder over strings) and maps/sequences (ZipMap returns a Python list
of dicts, DictVectorizer and CastMap take a Python dict), which only the numpy backend holds.

TreeEnsemble (version 5) reads ``post_transform`` as the ONNX spec numbers it (1 SOFTMAX,
2 LOGISTIC); onnxruntime 1.31+ reads 1 as LOGISTIC and 2 as SOFTMAX.

ZipMap's dicts come in key order (onnxruntime's are std::map); CastMap's SPARSE form
fills missing string values with "0.f", as onnxruntime does.

Known gaps, where onnxruntime writes memory it never initialised (no oracle): a two-class
TreeEnsembleClassifier whose second class has no score and no binary special case, a
binary SVMClassifier without probabilities under PROBIT, and a binary LinearClassifier
under PROBIT (onnxruntime writes past its packed scores); we write [probit(s), 0] or
[1 - probit(s), probit(s)].
"""

from __future__ import annotations

from math import prod
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph

from .library import OpKernel, dtype_name, library

__all__: list[str] = []

_ML = "ai.onnx.ml"
_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _as_strings(x: np.ndarray) -> np.ndarray:
    """A string tensor as an object array of ``str`` (bytes are decoded as UTF-8)."""
    x = np.asarray(x)
    if x.dtype.kind == "O":
        if x.size and isinstance(x.flat[0], bytes):
            return np.vectorize(lambda s: s.decode("utf-8"), otypes=[object])(x)
        return x
    if x.dtype.kind == "S":
        return np.char.decode(x, "utf-8").astype(object)
    return x.astype(object)


# --------------------------------------------------------------- post transforms


def _logistic(xp: Any, s: Any) -> Any:
    """onnxruntime's ComputeLogistic (exp of -|s| only, so it never overflows)."""
    v = 1.0 / (1.0 + xp.exp(-xp.abs(s)))
    return xp.where(s < 0, 1.0 - v, v)


def _probit(xp: Any, s: Any) -> Any:
    """onnxruntime's ComputeProbit: sqrt(2) * ErfInv(2s - 1), ErfInv by Winitzki's formula."""
    x = 2.0 * s - 1.0
    sgn = xp.sign(x)  # onnxruntime's 1 at x = 0 multiplies 0 there
    log = xp.log((1.0 - x) * (1.0 + x))
    v = 2.0 / (float(np.pi) * 0.147) + 0.5 * log
    return 1.4142135623730951 * sgn * xp.sqrt(-v + xp.sqrt(v * v - log / 0.147))


def _transform(xp: Any, s: Any, kind: int, softmax: Any = None) -> Any:
    """Post transform ``kind`` of float32 scores (N, C) as onnxruntime's
    ``batched_update_scores_inplace``: with a single column only PROBIT applies.
    ``softmax``: the backend's compiled row softmax (its ``softmax`` extra: ``softmax(s)``
    → the result, or None where it does not apply), for SOFTMAX on host scores."""
    if kind == 0:
        return s
    if s.shape[-1] == 1:
        return _probit(xp, s) if kind == 4 else s
    if kind == 2:
        return _logistic(xp, s)
    if kind == 4:
        return _probit(xp, s)
    if kind == 1 and softmax is not None and xp is np:
        # one call instead of five (a one-row classifier's softmax was 4 µs of numpy calls)
        y = softmax(s)
        if y is not None:
            return y
    if kind == 1 and xp is np:
        # the same operations as ufunc calls and in place: numpy's function wrappers
        # (np.max, ndarray.sum) cost most of a one-row model's softmax
        e = s - np.maximum.reduce(s, axis=-1, keepdims=True)
        np.exp(e, out=e)
        e /= np.add.reduce(e, axis=-1, keepdims=True)
        return e
    top = xp.max(s, axis=-1, keepdims=True)
    if kind == 1:
        e = xp.exp(s - top)
        return e / xp.sum(e, axis=-1, keepdims=True)
    nonzero = xp.abs(s) > 1e-7  # SOFTMAX_ZERO: near-zero scores stay (almost) zero
    e = xp.where(nonzero, xp.exp(s - top), s * xp.exp(-top))
    return e / xp.sum(xp.where(nonzero, e, xp.zeros_like(e)), axis=-1, keepdims=True)


def _expand_binary(xp: Any, s: Any, kind: int, mode: Any) -> Any:
    """One score column (N, 1) to two, as onnxruntime 1.32 writes a binary classifier's
    scores; ``mode`` is its ``add_second_class`` (a scalar or per row): 0/1 (weights all
    positive) → [1 - s, s]; 2/3 (mixed signs) → [-s, s]; -1 → [s, 0] (the second column
    left unwritten there). LOGISTIC gives [1 - logistic(s), logistic(s)] under every mode
    but -1, PROBIT [probit(s), 0]."""
    if kind == 4:
        return xp.concat([_probit(xp, s), xp.zeros_like(s)], axis=1)
    mode = xp.asarray(mode)
    if kind == 2:
        second = _logistic(xp, s)
        first = 1.0 - second
    else:
        first, second = xp.where((mode >= 2) & (mode <= 3), -s, 1.0 - s), s
    unwritten = mode < 0
    return xp.concat([xp.where(unwritten, s, first), xp.where(unwritten, xp.zeros_like(s), second)], axis=1)


def _argmax(xp: Any, s: Any) -> Any:
    """onnxruntime's arg-max scan (``score > best``, the first column the start): a NaN
    never wins, except a NaN first column, which nothing beats."""
    if xp is np and len(s) == 1 and s.shape[1]:
        # numpy's arg-max is the scan without NaN, and picks a row's first NaN if it has
        # one: one row needs only its pick tested (0.4 µs; the NaN mask and its reduction
        # below cost 1.2)
        idx = s.argmax(axis=1)
        picked = s.item(int(idx[0]))
        if picked == picked:
            return idx
    nan = xp.isnan(s)
    if xp is np and not np.logical_or.reduce(nan, axis=None):  # numpy's arg-max is the scan without NaN
        return s.argmax(axis=1)
    idx = xp.argmax(xp.where(nan, xp.full_like(s, -np.inf), s), axis=1)
    return xp.where(nan[:, 0], xp.zeros_like(idx), idx)


class _MLKernel(OpKernel):
    """Attribute helpers shared by the domain's kernels."""

    def need(self, name: str) -> Any:
        value = self.info.attr(name)
        if value is None:
            raise InvalidGraph(f"{self.where()}: required attribute {name!r} is missing")
        return value

    def floats(self, name: str, tensor: bool = False) -> np.ndarray:
        """A floats attribute (or its ``*_as_tensor`` form) as a 1-D array ([] if absent)."""
        value = self.info.attr(f"{name}_as_tensor") if tensor else None
        if value is None:
            value = self.info.attr(name, [])
        return np.asarray(value, dtype=np.float64 if tensor else np.float32).reshape(-1)

    def post_attr(self) -> int:
        name = self.info.attr("post_transform", "NONE")
        if name not in _POST:
            raise InvalidGraph(f"{self.where()}: unknown post_transform {name!r}")
        return _POST.index(name)

    def labels(self, strings: str = "classlabels_strings", ints: str = "classlabels_ints") -> None:
        """``self.classes``: the class labels (object strings or int64), ``self.strings``."""
        s, i = self.info.attr(strings), self.info.attr(ints)
        self.strings = bool(s)
        self.classes = np.asarray(s, dtype=object) if s else np.asarray(i or [], dtype=np.int64)

    def label_out(self, index: Any) -> Any:
        """The labels at class indices ``index`` (strings on the host, ints over xp)."""
        if self.strings:
            return self.classes[self.host(index).astype(np.int64)]
        if self.xp is np:
            return self.classes[index]
        return self.xp.take(self.xp.asarray(self.classes), self.xp.astype(index, self.xp.int64))

    def rows(self, x: Any) -> Any:
        """``x`` as float32 (N, features): a 1-D input is one sample."""
        if x.ndim == 2 and self.xp is np and x.dtype == np.float32:
            return x
        x = self.xp.astype(x, self.backend.dtype(np.float32))
        return self.xp.reshape(x, (1, -1)) if x.ndim < 2 else self.xp.reshape(x, (x.shape[0], prod(x.shape[1:])))

    def const(self, a: np.ndarray) -> Any:
        return self.xp.asarray(a)

    @property
    def softmax(self) -> Any:
        """The backend's compiled row softmax for :func:`_transform` (None: numpy's)."""
        return self.backend.extras.get("softmax")


# ------------------------------------------------------------------ LabelEncoder


class _Table:
    """A key → value look-up table searched with ``np.searchsorted`` (works on object
    arrays of strings too); NaN keys match NaN inputs; the last repeated key wins."""

    def __init__(self, keys: np.ndarray, values: np.ndarray, default: Any) -> None:
        if len(keys) != len(values):
            raise ValueError(f"{len(keys)} keys but {len(values)} values")
        self.default = default
        self.values_dtype = values.dtype
        self.nan_value = None
        if keys.dtype.kind == "f":
            nan = np.isnan(keys)
            if nan.any():
                self.nan_value = values[np.flatnonzero(nan)[-1]]
            keys, values = keys[~nan], values[~nan]
        uniq, first = np.unique(keys[::-1], return_index=True)
        self.keys = uniq
        self.values = values[::-1][first]
        #: The table as a dict, for a few elements at a time (an isolation forest's
        #: conversion looks up one value per tree: ~1 us against ~5 for the search).
        #: Python's == is numpy's here: -0.0 finds 0.0, NaN (kept apart above) nothing.
        self.lookup = dict(zip(self.keys.tolist(), self.values.tolist()))
        #: The input kinds :attr:`lookup` answers for (floats only without a NaN key).
        self.lookup_kinds = "iufO" if self.nan_value is None else "iuO"

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if x.size <= 16 and x.dtype.kind in self.lookup_kinds:
            get, default = self.lookup.get, self.default
            return np.array([get(v, default) for v in x.reshape(-1).tolist()],
                            dtype=self.values_dtype).reshape(x.shape)
        out = np.full(x.shape, self.default, dtype=self.values_dtype)
        if len(self.keys) and x.size:
            pos = np.minimum(np.searchsorted(self.keys, x), len(self.keys) - 1)
            found = np.asarray(self.keys[pos] == x, dtype=bool)
            out[found] = self.values[pos[found]]
        if self.nan_value is not None and x.dtype.kind == "f":
            out[np.isnan(x)] = self.nan_value
        return out


def _attr_array(info: Any, kind: str) -> np.ndarray | None:
    """The keys_*/values_* attribute ``kind`` ('keys' or 'values') as an array, or None."""
    for name, dtype in (("strings", object), ("int64s", np.int64), ("floats", np.float32)):
        value = info.attr(f"{kind}_{name}")
        if value is not None:
            return np.asarray(value, dtype=dtype)
    tensor = info.attr(f"{kind}_tensor")
    if tensor is not None:
        arr = np.asarray(tensor).reshape(-1)
        return _as_strings(arr) if arr.dtype.kind in "OSU" else arr
    return None


@library.define("LabelEncoder", (1, 2, 4), domain=_ML)
class LabelEncoder(_MLKernel):
    """Map each element through the keys_* → values_* table (default_* when absent);
    version 1 maps strings to their index in classes_strings and back. A host look-up."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.v1 = info.since_version == 1
        self._one = False
        if self.v1:
            self.classes = np.asarray(info.attr("classes_strings", []), dtype=object)
            self.default_str = info.attr("default_string", "_Unused")
            idx = np.arange(len(self.classes), dtype=np.int64)
            self.to_int = _Table(self.classes, idx, int(info.attr("default_int64", -1)))
            return
        keys, values = _attr_array(info, "keys"), _attr_array(info, "values")
        if keys is None or values is None:
            raise InvalidGraph(f"{self.where()}: needs one keys_* and one values_* attribute")
        default_t = info.attr("default_tensor")
        if default_t is not None:
            default = np.asarray(default_t).reshape(-1)[0]
            if isinstance(default, bytes):
                default = default.decode("utf-8")
        elif values.dtype.kind == "O":
            default = info.attr("default_string", "_Unused")
        elif values.dtype.kind == "f":
            default = info.attr("default_float", -0.0)
        else:
            default = info.attr("default_int64", -1)
        try:
            self.table = _Table(keys, values, default)
        except ValueError as exc:
            raise InvalidGraph(f"{self.where()}: {exc}") from None
        # onnx's own cases declare an output type narrower than values_tensor's (int16 for
        # int32 values); follow a declared integer output type of the same kind.
        self.out_dtype = values.dtype
        declared = info.output_types[0].dtype if info.output_types and info.output_types[0] else None
        if declared is not None and declared.kind == values.dtype.kind:
            self.out_dtype = declared
        #: One number over host numpy (an isolation forest's conversion looks up one leaf
        #: per tree, 100 such nodes): the table's dict straight from compute, the same
        #: look-up as its few-element path without its list and wrappers (1.65 -> ~0.6 µs).
        self._one = self.xp is np and values.dtype.kind != "O"
        self._one_kinds = self.table.lookup_kinds.replace("O", "")  # (strings are normalized first)

    def compute(self, x: Any) -> tuple[Any]:
        if self._one and type(x) is np.ndarray and x.size == 1 and x.dtype.kind in self._one_kinds:
            table = self.table
            y = np.array(table.lookup.get(x.item(), table.default), dtype=table.values_dtype).reshape(x.shape)
            return (y if y.dtype == self.out_dtype else y.astype(self.out_dtype),)
        x = self.host(x)
        if x.dtype.kind in "OSU":
            x = _as_strings(x)
        if not self.v1:
            return (self._out(self.table(x).astype(self.out_dtype, copy=False)),)
        if x.dtype.kind == "O":
            return (self._out(self.to_int(x)),)
        xi = x.astype(np.int64)
        ok = (xi >= 0) & (xi < len(self.classes))
        out = np.full(x.shape, self.default_str, dtype=object)
        out[ok] = self.classes[xi[ok]]
        return (out,)

    def _out(self, y: np.ndarray) -> Any:
        return y if y.dtype.kind == "O" else self.xp.asarray(y)


@library.define("CategoryMapper", 1, domain=_ML)
class CategoryMapper(_MLKernel):
    """Strings → int64 through the (cats_strings[i], cats_int64s[i]) pairs, or int64 →
    strings (default_int64 / default_string when absent). A host look-up."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        strings = np.asarray(info.attr("cats_strings", []), dtype=object)
        ints = np.asarray(info.attr("cats_int64s", []), dtype=np.int64)
        if len(strings) != len(ints):
            raise InvalidGraph(f"{self.where()}: cats_strings and cats_int64s differ in length")
        self.to_int = _Table(strings, ints, int(info.attr("default_int64", -1)))
        self.to_str = _Table(ints, strings, info.attr("default_string", "_Unused"))

    def compute(self, x: Any) -> tuple[Any]:
        x = self.host(x)
        if x.dtype.kind in "OSU":
            return (self.xp.asarray(self.to_int(_as_strings(x))),)
        return (self.to_str(x.astype(np.int64)),)


# ------------------------------------------------------------------ tree ensembles

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_MODE_NAMES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
_AGG_NAMES = ("AVERAGE", "SUM", "MIN", "MAX")


class _Forest:
    """Flattened trees. Node ``i`` tests ``x[feature[i]] <mode[i]> split[i]`` and goes to
    ``true_id[i]`` (a leaf index when ``true_leaf[i]``, else a node index) or the false side.
    Leaf ``j`` adds ``weights[j]`` to target ``targets[j]`` (a leaf may appear several times
    in these lists, once per contribution).

    ``walker``, when a backend offers one (its ``tree_leaves`` extra: ``walker(x, forest)``
    → the (N, trees) leaves, or None where it does not apply), walks the trees instead of
    the level-by-level numpy walk of :meth:`leaves`."""

    walker: Any = None
    #: the backend's ``tree_scores`` (``scorer(x, forest, weights)`` → the summed
    #: weights, or None where it does not apply)
    scorer: Any = None

    def __init__(self, *, roots: np.ndarray, feature: np.ndarray, split: np.ndarray, mode: np.ndarray,
                 true_id: np.ndarray, true_leaf: np.ndarray, false_id: np.ndarray, false_leaf: np.ndarray,
                 missing_true: np.ndarray, members: dict[int, np.ndarray], contrib_leaf: np.ndarray,
                 contrib_target: np.ndarray, contrib_weight: np.ndarray, n_leaves: int,
                 n_targets: int) -> None:
        self.roots = roots
        self.feature, self.split, self.mode = feature, split, mode
        self.true_id, self.true_leaf = true_id, true_leaf.astype(bool)
        self.false_id, self.false_leaf = false_id, false_leaf.astype(bool)
        self.missing_true = missing_true.astype(bool)
        self.max_feature = int(feature.max(initial=-1))
        self.members = members
        self.n_targets = n_targets
        self._converted: dict[Any, np.ndarray] = {}
        if len(contrib_target) and ((contrib_target < 0) | (contrib_target >= n_targets)).any():
            raise ValueError(f"a leaf votes for a target outside [0, {n_targets})")
        # Dense leaf x target tables: summed weight, and whether the leaf votes at all.
        self.weight = np.zeros((n_leaves, n_targets), dtype=np.float64)
        np.add.at(self.weight, (contrib_leaf, contrib_target), contrib_weight)
        self.votes = np.zeros((n_leaves, n_targets), dtype=bool)
        self.votes[contrib_leaf, contrib_target] = True
        n_nodes = len(feature)
        for name, ids, leaf in (("true", true_id, self.true_leaf), ("false", false_id, self.false_leaf)):
            if len(ids) and ((ids[leaf] >= n_leaves).any() or (ids[~leaf] >= n_nodes).any() or (ids < 0).any()):
                raise ValueError(f"a {name} branch points outside the nodes or leaves")
        if len(roots) and ((roots < 0) | (roots >= max(n_nodes, 1))).any():
            raise ValueError("a tree root points outside the nodes")

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """The leaf each (sample, tree) reaches: int array of shape (N, n_trees)."""
        n, n_trees = x.shape[0], len(self.roots)
        if self.max_feature >= x.shape[1]:
            raise ValueError(f"a node reads feature {self.max_feature} of {x.shape[1]}")
        if self.walker is not None and n:
            walked = self.walker(x, self)
            if walked is not None:
                return walked
        cur = np.broadcast_to(self.roots, (n, n_trees)).copy()
        done = np.zeros((n, n_trees), dtype=bool)
        rows = np.broadcast_to(np.arange(n)[:, None], (n, n_trees))
        while not done.all():
            active = np.flatnonzero(~done.ravel())
            node = cur.ravel()[active]
            cond = self._test(node, x[rows.ravel()[active], self.feature[node]])
            cur.reshape(-1)[active] = np.where(cond, self.true_id[node], self.false_id[node])
            done.reshape(-1)[active] = np.where(cond, self.true_leaf[node], self.false_leaf[node])
        return cur

    def _test(self, node: np.ndarray, xv: np.ndarray) -> np.ndarray:
        mode, split = self.mode[node], self.split[node]
        with np.errstate(invalid="ignore"):
            cond = np.select([mode == _LEQ, mode == _LT, mode == _GTE, mode == _GT, mode == _EQ],
                             [xv <= split, xv < split, xv >= split, xv > split, xv == split],
                             default=xv != split)
        for m, values in self.members.items():
            at = node == m
            if at.any():
                cond[at] = np.isin(xv[at], values)
        # NaN compares false except under BRANCH_NEQ; nodes tracking missing values go true.
        nan = np.isnan(xv)
        if nan.any():
            cond[nan] |= self.missing_true[node[nan]]
        return cond

    def evaluate(self, x: np.ndarray, dtype: Any = np.float64) -> tuple[np.ndarray, np.ndarray]:
        """Per (sample, tree, target) weights (as ``dtype``) and whether the reached leaf
        votes for it."""
        x = x[None, :] if x.ndim == 1 else x
        leaf = self.leaves(x.reshape(x.shape[0], prod(x.shape[1:])).astype(np.float64, copy=False))
        return self._weights(dtype)[leaf], self.votes[leaf]

    def summed(self, x: np.ndarray, dtype: Any) -> np.ndarray:
        """Per sample (rows of 2-D ``x``), the sum over the trees of the reached leaves'
        weights in ``dtype``, added in tree order: the backend's compiled walk summing as
        it goes where it has one (``tree_scores``), else the gathered weights' sum."""
        if self.max_feature >= x.shape[1]:
            raise ValueError(f"a node reads feature {self.max_feature} of {x.shape[1]}")
        weights = self._weights(dtype)
        if self.scorer is not None and len(x):
            s = self.scorer(x, self, weights)
            if s is not None:
                return s
        picked = weights[self.leaves(x.astype(np.float64))]  # (N, trees, targets)
        if picked.shape[1] == 0:
            return np.zeros((picked.shape[0], picked.shape[2]), dtype)
        # cumsum adds one tree after another; add.reduce may pair them up (another rounding)
        return np.cumsum(picked, axis=1, dtype=dtype)[:, -1]

    def _weights(self, dtype: Any) -> np.ndarray:
        """The leaf x target weights as ``dtype``, converted once (the same values as
        converting the picked weights on every call)."""
        if dtype == np.float64:
            return self.weight
        table = self._converted.get(dtype)
        if table is None:
            table = self._converted[dtype] = self.weight.astype(dtype)
        return table

    def scores(self, x: np.ndarray, aggregate: int, base: np.ndarray | None) -> np.ndarray:
        """Aggregated (N, n_targets) float64 scores, base values added."""
        if aggregate in (0, 1):  # a sum or an average: the votes are not needed
            x = x[None, :] if x.ndim == 1 else x
            leaf = self.leaves(x.reshape(x.shape[0], prod(x.shape[1:])).astype(np.float64, copy=False))
            out = np.add.reduce(self.weight[leaf], axis=1)
            if aggregate == 0 and len(self.roots):
                out /= len(self.roots)
            return out if base is None else out + base
        w, votes = self.evaluate(x)  # a minimum or a maximum over the trees that vote
        picked = np.where(votes, w, np.inf if aggregate == 2 else -np.inf)
        out = picked.min(axis=1) if aggregate == 2 else picked.max(axis=1)
        out = np.where(votes.any(axis=1), out, 0.0)
        return out if base is None else out + base


@library.define("TreeEnsemble", 5, domain=_ML)
class TreeEnsemble(_MLKernel):
    """Evaluate a forest given in the TreeEnsemble-5 encoding (nodes_* and leaf_* tuples);
    a host tree walk."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)

        def ints(name: str, default: Any = None) -> np.ndarray:
            value = info.attr(name, default)
            return np.asarray(self.need(name) if value is None else value, dtype=np.int64).reshape(-1)

        def tensor(name: str) -> np.ndarray:
            return np.asarray(self.need(name)).reshape(-1)

        self.aggregate = int(info.attr("aggregate_function", 1))
        self.post = int(info.attr("post_transform", 0))
        if self.aggregate not in range(4):
            raise InvalidGraph(f"{self.where()}: aggregate_function must be 0..3, got {self.aggregate}")
        if self.post not in range(5):
            raise InvalidGraph(f"{self.where()}: post_transform must be 0..4, got {self.post}")
        feature = ints("nodes_featureids")
        mode = tensor("nodes_modes").astype(np.int64)
        split = tensor("nodes_splits").astype(np.float64)
        n = len(feature)
        missing = ints("nodes_missing_value_tracks_true", [0] * n)
        fields = {k: ints(k) for k in ("nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                                       "nodes_falseleafs")}
        if any(len(v) != n for v in (mode, split, missing, *fields.values())):
            raise InvalidGraph(f"{self.where()}: the nodes_* attributes differ in length")
        if ((mode < 0) | (mode > _MEMBER)).any():
            raise InvalidGraph(f"{self.where()}: nodes_modes must be 0..6")
        members: dict[int, np.ndarray] = {}
        member_nodes = np.flatnonzero(mode == _MEMBER)
        if len(member_nodes):
            # The sets of the BRANCH_MEMBER nodes, in node order, separated by NaN.
            values = tensor("membership_values").astype(np.float64)
            sets = [s[~np.isnan(s)] for s in np.split(values, np.flatnonzero(np.isnan(values)))]
            if len(sets) < len(member_nodes):
                raise InvalidGraph(f"{self.where()}: membership_values has {len(sets)} sets for "
                                   f"{len(member_nodes)} BRANCH_MEMBER nodes")
            members = {int(m): sets[i] for i, m in enumerate(member_nodes)}
        targets = ints("leaf_targetids")
        weights = tensor("leaf_weights").astype(np.float64)
        if len(targets) != len(weights):
            raise InvalidGraph(f"{self.where()}: leaf_targetids and leaf_weights differ in length")
        try:
            self.forest = _Forest(
                roots=ints("tree_roots"), feature=feature, split=split, mode=mode,
                true_id=fields["nodes_truenodeids"], true_leaf=fields["nodes_trueleafs"],
                false_id=fields["nodes_falsenodeids"], false_leaf=fields["nodes_falseleafs"],
                missing_true=missing, members=members, contrib_leaf=np.arange(len(targets)),
                contrib_target=targets, contrib_weight=weights, n_leaves=len(targets),
                n_targets=int(info.attr("n_targets", int(targets.max(initial=-1)) + 1)))
        except ValueError as exc:
            raise InvalidGraph(f"{self.where()}: {exc}") from None
        self.forest.walker = self.backend.extras.get("tree_leaves")

    def compute(self, x: Any) -> tuple[Any]:
        xh = self.host(x)
        scores = self.forest.scores(xh, self.aggregate, None).astype(np.float32)
        return (self.xp.asarray(_transform(np, scores, self.post, self.softmax).astype(xh.dtype)),)


def _old_forest(k: _MLKernel, prefix: str, n_targets: int) -> _Forest:
    """A :class:`_Forest` from the TreeEnsembleRegressor/Classifier encoding (tree and node
    ids; a LEAF mode marks leaves; votes in ``{prefix}_treeids/nodeids/ids/weights``)."""
    info, where = k.info, k.where()
    tree_ids = np.asarray(info.attr("nodes_treeids", []), dtype=np.int64)
    node_ids = np.asarray(info.attr("nodes_nodeids", []), dtype=np.int64)
    n = len(tree_ids)
    modes_s = info.attr("nodes_modes", [])
    feature = np.asarray(info.attr("nodes_featureids", [0] * n), dtype=np.int64)
    split = k.floats("nodes_values", tensor=True)
    split = np.zeros(n) if not len(split) else split
    true_ids = np.asarray(info.attr("nodes_truenodeids", [0] * n), dtype=np.int64)
    false_ids = np.asarray(info.attr("nodes_falsenodeids", [0] * n), dtype=np.int64)
    missing = np.asarray(info.attr("nodes_missing_value_tracks_true", [0] * n), dtype=np.int64)
    if any(len(v) != n for v in (node_ids, modes_s, feature, split, true_ids, false_ids)):
        raise InvalidGraph(f"{where}: the nodes_* attributes differ in length")
    if len(missing) != n:
        missing = np.zeros(n, dtype=np.int64)
    try:
        mode = np.asarray([len(_MODE_NAMES) if m == "LEAF" else _MODE_NAMES.index(m) for m in modes_s],
                          dtype=np.int64)
    except ValueError:
        raise InvalidGraph(f"{where}: unknown mode in nodes_modes {modes_s}") from None
    is_leaf = mode == len(_MODE_NAMES)
    # Global position of each (tree, node id); leaves are numbered among themselves.
    pos = {(int(t), int(i)): j for j, (t, i) in enumerate(zip(tree_ids, node_ids))}
    leaf_index = np.cumsum(is_leaf) - 1
    interior_index = np.cumsum(~is_leaf) - 1

    def child(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out_id = np.zeros(n, dtype=np.int64)
        out_leaf = np.zeros(n, dtype=bool)
        for j in np.flatnonzero(~is_leaf):
            p = pos.get((int(tree_ids[j]), int(ids[j])))
            if p is None:
                raise InvalidGraph(f"{where}: node {j} branches to a missing node {ids[j]}")
            out_leaf[j] = is_leaf[p]
            out_id[j] = leaf_index[p] if is_leaf[p] else interior_index[p]
        return out_id[~is_leaf], out_leaf[~is_leaf]

    t_id, t_leaf = child(true_ids)
    f_id, f_leaf = child(false_ids)
    # Roots: node id 0 of each tree, else the first node of the tree.
    trees = sorted(set(tree_ids.tolist()))
    root_pos = [pos.get((t, 0), int(np.flatnonzero(tree_ids == t)[0])) for t in trees]
    # A tree that is a single leaf: give it an interior node whose both sides are the leaf.
    feature_i, split_i, mode_i, missing_i = feature[~is_leaf], split[~is_leaf], mode[~is_leaf], missing[~is_leaf]
    roots, extra = [], []
    for p in root_pos:
        if is_leaf[p]:
            extra.append(int(leaf_index[p]))
            roots.append(int((~is_leaf).sum()) + len(extra) - 1)
        else:
            roots.append(int(interior_index[p]))
    if extra:
        e = np.asarray(extra, dtype=np.int64)
        zeros = np.zeros(len(e), np.int64)
        feature_i, mode_i, missing_i = (np.concatenate([a, zeros]) for a in (feature_i, mode_i, missing_i))
        split_i = np.concatenate([split_i, np.zeros(len(e))])
        t_id, f_id = np.concatenate([t_id, e]), np.concatenate([f_id, e])
        t_leaf, f_leaf = (np.concatenate([a, np.ones(len(e), bool)]) for a in (t_leaf, f_leaf))
    v_tree = np.asarray(info.attr(f"{prefix}_treeids", []), dtype=np.int64)
    v_node = np.asarray(info.attr(f"{prefix}_nodeids", []), dtype=np.int64)
    v_target = np.asarray(info.attr(f"{prefix}_ids", []), dtype=np.int64)
    v_weight = k.floats(f"{prefix}_weights", tensor=True)
    if not len(v_tree) == len(v_node) == len(v_target) == len(v_weight):
        raise InvalidGraph(f"{where}: the {prefix}_* attributes differ in length")
    v_leaf = np.empty(len(v_tree), dtype=np.int64)
    for j, (t, i) in enumerate(zip(v_tree.tolist(), v_node.tolist())):
        p = pos.get((t, i))
        if p is None or not is_leaf[p]:
            raise InvalidGraph(f"{where}: vote {j} is for ({t}, {i}), which is not a leaf")
        v_leaf[j] = leaf_index[p]
    try:
        return _Forest(roots=np.asarray(roots, dtype=np.int64), feature=feature_i, split=split_i,
                       mode=mode_i, true_id=t_id, true_leaf=t_leaf, false_id=f_id, false_leaf=f_leaf,
                       missing_true=missing_i, members={}, contrib_leaf=v_leaf, contrib_target=v_target,
                       contrib_weight=v_weight, n_leaves=int(is_leaf.sum()), n_targets=n_targets)
    except ValueError as exc:
        raise InvalidGraph(f"{where}: {exc}") from None


@library.define("TreeEnsembleRegressor", (1, 3, 5), domain=_ML)
class TreeEnsembleRegressor(_MLKernel):
    """The tree/node-id encoded regressor (v3: ``*_as_tensor`` attributes); float32
    output; a host tree walk."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        agg = info.attr("aggregate_function", "SUM")
        if agg not in _AGG_NAMES:
            raise InvalidGraph(f"{self.where()}: unknown aggregate_function {agg!r}")
        self.aggregate = _AGG_NAMES.index(agg)
        self.post = self.post_attr()
        base = self.floats("base_values", tensor=True)
        v_target = np.asarray(info.attr("target_ids", []), dtype=np.int64)
        self.forest = _old_forest(self, "target", int(info.attr("n_targets", int(v_target.max(initial=-1)) + 1)))
        self.forest.walker = self.backend.extras.get("tree_leaves")
        self.forest.scorer = self.backend.extras.get("tree_scores")
        if len(base) not in (0, self.forest.n_targets):
            raise InvalidGraph(f"{self.where()}: base_values must have n_targets entries")
        self.base = base if len(base) else None
        #: onnxruntime adds the leaves' weights in the type of the thresholds: float32
        #: unless the *_as_tensor (double) attributes are given. A float32 sum or average
        #: of float32 rows is then computed as it does (tree order, float32 steps).
        self.float_sums = self.aggregate in (0, 1) and all(
            info.attr(f"{name}_as_tensor") is None for name in ("nodes_values", "target_weights", "base_values"))
        self.base32 = None if self.base is None else self.base.astype(np.float32)

    def compute(self, x: Any) -> tuple[Any]:
        xh = self.host(x)
        if self.float_sums and xh.dtype == np.float32 and xh.ndim == 2:
            scores = self.forest.summed(xh, np.float32)
            if self.aggregate == 0 and len(self.forest.roots):
                scores /= np.float32(len(self.forest.roots))
            if self.base32 is not None:
                scores += self.base32
        else:
            scores = self.forest.scores(xh, self.aggregate, self.base).astype(np.float32)
        return (self.xp.asarray(_transform(np, scores, self.post, self.softmax)),)


@library.define("TreeEnsembleClassifier", (1, 3, 5), domain=_ML)
class TreeEnsembleClassifier(_MLKernel):
    """The tree/node-id encoded classifier (v3: ``*_as_tensor`` attributes): summed leaf
    votes per class plus base values, the label and scores as onnxruntime's
    ``TreeAggregatorClassifier`` (binary special cases in the module docstring); a host
    tree walk."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.labels("classlabels_strings", "classlabels_int64s")
        n = len(self.classes)
        if not n:
            raise InvalidGraph(f"{self.where()}: needs classlabels_strings or classlabels_int64s")
        self.post = self.post_attr()
        self.base = self.floats("base_values", tensor=True)
        self.forest = _old_forest(self, "class", n)
        self.forest.walker = self.backend.extras.get("tree_leaves")
        self.forest.scorer = self.backend.extras.get("tree_scores")
        ids = np.asarray(info.attr("class_ids", []), dtype=np.int64)
        self.binary_case = n == 2 and len(set(ids.tolist())) == 1
        self.all_positive = bool((self.floats("class_weights", tensor=True) >= 0).all())
        #: every leaf votes for every class and there are no base values (a random
        #: forest's leaves hold each class's share): the scores are the summed weights
        #: and every class has a vote, so the vote masks need not be gathered
        self.dense = n > 2 and not len(self.base) and bool(self.forest.votes.all())

    def compute(self, x: Any) -> tuple[Any, Any]:
        xh = self.host(x)
        if self.dense and xh.dtype == np.float32 and xh.ndim == 2:
            s = self.forest.summed(xh, np.float32)
            return self._out(s.argmax(axis=1)), self.xp.asarray(_transform(np, s, self.post, self.softmax))
        # onnxruntime sums in float32 unless the input is double (a tie at 0 or 0.5 decides
        # the binary label, so the precision matters).
        w, votes = self.forest.evaluate(xh, xh.dtype if xh.dtype == np.float64 else np.float32)
        s = np.add.reduce(w, axis=1)  # w.sum(axis=1) without its wrapper, as below
        has = np.logical_or.reduce(votes, axis=1)
        if len(self.classes) > 2 and not len(self.base) and np.logical_and.reduce(has, axis=None):
            # every class has a vote (a random forest's leaves hold every class's share):
            # the general case below with its masks all true
            return self._out(s.argmax(axis=1)), self.xp.asarray(_transform(np, s.astype(np.float32), self.post, self.softmax))
        base = self.base.astype(s.dtype)
        if len(self.classes) > 2:
            s[:, :len(base)] += base
            has[:, :len(base)] = True
            label = np.argmax(np.where(has, s, -np.inf), axis=1)
            z = _transform(np, np.where(has, s, 0).astype(np.float32), self.post, self.softmax)
            return self._out(label), self.xp.asarray(z)
        s0, s1, has0, has1 = s[:, 0], s[:, 1], has[:, 0], has[:, 1]
        mode = np.full(len(s), -1)
        if len(base) == 2:
            # onnxruntime: with a score for class 1, base[1] + the class-0 score, negated for 0.
            s1 = np.where(has1, base[1] + s0, s1 + base[1])
            s0 = np.where(has1, -s1, s0 + base[0])
            two = np.ones(len(s), bool)
        else:
            if len(base) == 1:
                s0 = s0 + base[0]
            else:
                mode[:] = 3
            two = has1
        pos = np.where(two & has1, s1, np.where(has0, s0, 0.0))
        if self.binary_case:
            win = pos > 0.5 if self.all_positive else pos > 0
            mode = np.where(win, 0, 1) + (0 if self.all_positive else 2)
        else:
            win = pos > 0
        label = win.astype(np.int64)  # an index into the labels, or 1/0 (see _out)
        # onnxruntime 1.32 writes 0 for a class no reached leaf votes for (base or not).
        pair = np.stack([np.where(has0, s0, 0), np.where(has1, s1, 0)], axis=1).astype(np.float32)
        z = np.where(two[:, None], _transform(np, pair, self.post, self.softmax),
                     _expand_binary(np, pair[:, :1], self.post, mode[:, None]))
        return self._out(label, literal=not self.binary_case), self.xp.asarray(z.astype(np.float32))

    def _out(self, index: np.ndarray, literal: bool = False) -> Any:
        # onnxruntime's two-class non-binary case labels 1/0 (a string model: classes[1/0]).
        if literal and not self.strings:
            return self.xp.asarray(index)
        return self.classes[index] if self.strings else self.xp.asarray(self.classes[index])


# ------------------------------------------------------------------ linear models and SVMs


@library.define("LinearRegressor", 1, domain=_ML)
class LinearRegressor(_MLKernel):
    """``Y = X @ coefficients.T + intercepts`` (targets rows of coefficients), post-transformed."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.targets = int(info.attr("targets", 1))
        coef = self.floats("coefficients")
        if self.targets <= 0 or len(coef) % self.targets:
            raise InvalidGraph(f"{self.where()}: coefficients do not split into targets rows")
        self.coef = coef.reshape(self.targets, -1)
        icpt = self.floats("intercepts")
        if len(icpt) not in (0, self.targets):
            raise InvalidGraph(f"{self.where()}: intercepts must have one entry per target")
        self.intercepts = icpt if len(icpt) else np.zeros(self.targets, np.float32)
        self.post = self.post_attr()

    def compute(self, x: Any) -> tuple[Any]:
        xf = self.rows(x)
        if xf.shape[1] != self.coef.shape[1]:
            raise ValueError(f"X has {xf.shape[1]} features, the coefficients {self.coef.shape[1]}")
        y = xf @ self.const(self.coef.T) + self.const(self.intercepts)
        return (_transform(self.xp, y, self.post, self.softmax),)


@library.define("LinearClassifier", 1, domain=_ML)
class LinearClassifier(_MLKernel):
    """Scores ``X @ coefficients.T + intercepts``; label the arg-max class, or for one
    score column (two labels) ``score > 0``, the scores then ``[1 - t, t]`` with t the
    post-transformed score (onnxruntime's rule)."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.labels()
        self.post = self.post_attr()
        self.intercepts = self.floats("intercepts")
        n = len(self.intercepts)
        coef = self.floats("coefficients")
        if not n or len(coef) % n:
            raise InvalidGraph(f"{self.where()}: needs intercepts, and coefficients in {n} rows")
        self.coef = coef.reshape(n, -1)
        if n == 1 and len(self.classes) != 2:  # onnxruntime 1.32 refuses it too
            raise InvalidGraph(f"{self.where()}: one score column needs exactly 2 class labels")
        if n > 1 and len(self.classes) < n:
            raise InvalidGraph(f"{self.where()}: {n} score columns but {len(self.classes)} class labels")
        # laid out once: a contiguous (features, classes) operand, and the intercepts as a
        # row of the scores' rank (numpy broadcasts unequal ranks through a slower path)
        self._coef_t = np.ascontiguousarray(self.coef.T)
        self._intercept_row = self.intercepts.reshape(1, -1)
        # the backend's one-row product (``row_product(W)``: None for this W, or a
        # compiled ``product(x, y, b)`` writing y = x @ W + b for one float32 row): a
        # service scoring one sample at a time
        row_product = self.backend.extras.get("row_product")
        self._row_product = row_product(self._coef_t) if row_product is not None else None
        # the backend's whole one-row classification (``classify_row(product, x, scores,
        # bias, post)`` → the arg-max, the scores written and transformed in place) for
        # several score columns under NONE or SOFTMAX, where the product is compiled
        classify = self.backend.extras.get("classify_row")
        self._classify_row = (classify if classify is not None and self._row_product is not None
                              and n > 1 and self.post in (0, 1) else None)

    def compute(self, x: Any) -> tuple[Any, Any]:
        xp = self.xp
        xf = self.rows(x)
        if xf.shape[1] != self.coef.shape[1]:
            raise ValueError(f"X has {xf.shape[1]} features, the coefficients {self.coef.shape[1]}")
        if self._classify_row is not None and xf.shape[0] == 1 and xf.flags.c_contiguous:
            s = np.empty((1, self._coef_t.shape[1]), np.float32)
            best = self._classify_row(self._row_product, xf, s, self.intercepts, self.post)
            return self.classes[[best]], s  # a new (1,) array of the label
        if xp is np and self._row_product is not None and xf.shape[0] == 1 and xf.flags.c_contiguous:
            s = np.empty((1, self._coef_t.shape[1]), np.float32)
            self._row_product(xf, s, self.intercepts)
        elif xp is np:
            s = xf @ self._coef_t
            s += self._intercept_row  # in place: the product is this call's own
        else:
            s = xf @ self.const(self.coef.T) + self.const(self.intercepts)
        if s.shape[1] == 1:
            # onnxruntime 1.32 transforms the score, then writes [1 - t, t] (its PROBIT
            # writes past the packed scores: we give [1 - probit, probit]).
            t = _logistic(xp, s) if self.post == 2 else _probit(xp, s) if self.post == 4 else s
            return self.label_out(xp.astype(s[:, 0] > 0, xp.int64)), xp.concat([1.0 - t, t], axis=1)
        return self.label_out(_argmax(xp, s)), _transform(xp, s, self.post, self.softmax)


class _SVM(_MLKernel):
    """The kernel function shared by SVMClassifier and SVMRegressor (onnxruntime's
    SVMCommon: LINEAR, POLY, RBF, SIGMOID with kernel_params = gamma, coef0, degree)."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        name = info.attr("kernel_type", "LINEAR")
        if name not in ("LINEAR", "POLY", "RBF", "SIGMOID"):
            raise InvalidGraph(f"{self.where()}: unknown kernel_type {name!r}")
        self.kernel_type = name
        params = self.floats("kernel_params")
        self.gamma, self.coef0, self.degree = (float(v) for v in params[:3]) if len(params) >= 3 else (0.0, 0.0, 0.0)
        self.coefficients = self.floats("coefficients")
        self.rho = self.floats("rho")
        self.sv = self.floats("support_vectors")
        #: The backend's compiled RBF kernel values (``svm_rbf(x, sv_t, gamma)``), if any,
        #: and the support vectors it was given transposed.
        self._rbf = self.backend.extras.get("svm_rbf")
        self._sv_t: tuple[np.ndarray, np.ndarray] | None = None

    def kernel(self, x: Any, sv: np.ndarray) -> Any:
        """K(x, sv): (N, V) float32."""
        xp = self.xp
        if x.shape[1] != sv.shape[1]:
            raise ValueError(f"X has {x.shape[1]} features, the model {sv.shape[1]}")
        if self.kernel_type == "RBF" and self._rbf is not None and isinstance(x, np.ndarray):
            if self._sv_t is None or self._sv_t[0] is not sv:
                self._sv_t = (sv, np.ascontiguousarray(sv.T, dtype=np.float32))
            found = self._rbf(x, self._sv_t[1], self.gamma)
            if found is not None:
                return found
        v = self.const(sv)
        if self.kernel_type == "RBF":
            # Differences, as onnxruntime sums them (no |x|^2 + |v|^2 - 2 x.v cancellation),
            # in row blocks of at most 2^24 elements.
            step = max(1, (1 << 24) // max(1, v.shape[0] * v.shape[1]))
            blocks = []
            for start in range(0, x.shape[0], step):
                d = xp.expand_dims(x[start:min(start + step, x.shape[0]), :], axis=1) - xp.expand_dims(v, axis=0)
                blocks.append(xp.exp(-self.gamma * xp.sum(d * d, axis=2)))
            return xp.concat(blocks, axis=0) if blocks else xp.zeros((0, v.shape[0]), dtype=x.dtype)
        g = x @ xp.permute_dims(v, (1, 0))
        if self.kernel_type == "LINEAR":
            return g
        g = self.gamma * g + self.coef0
        return xp.pow(g, self.degree) if self.kernel_type == "POLY" else xp.tanh(g)


@library.define("SVMRegressor", 1, domain=_ML)
class SVMRegressor(_SVM):
    """``K(X, support_vectors) @ coefficients + rho[0]`` (linear when n_supports is 0);
    one_class maps the score to ±1. Output (N, 1) float32."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        n_sv = int(info.attr("n_supports", 0))
        self.one_class = bool(info.attr("one_class", 0))
        if not len(self.rho):
            raise InvalidGraph(f"{self.where()}: rho is required")
        if n_sv > 0:
            if len(self.sv) % n_sv or len(self.coefficients) < n_sv:
                raise InvalidGraph(f"{self.where()}: support_vectors do not split into {n_sv} vectors")
            self.sv = self.sv.reshape(n_sv, -1)
            self.coefficients = self.coefficients[:n_sv]
        else:  # liblinear: the coefficients are the one "support vector"
            self.kernel_type = "LINEAR"
            self.sv, self.coefficients = self.coefficients.reshape(1, -1), np.ones(1, np.float32)

    def compute(self, x: Any) -> tuple[Any]:
        k = self.kernel(self.rows(x), self.sv)
        y = k @ self.const(self.coefficients.reshape(-1, 1)) + float(self.rho[0])
        if self.one_class:
            y = self.xp.where(y > 0, self.xp.ones_like(y), -self.xp.ones_like(y))
        return (self.xp.astype(y, self.backend.dtype(np.float32)),)


@library.define("SVMClassifier", 1, domain=_ML)
class SVMClassifier(_SVM):
    """libsvm's one-vs-one SVC (or liblinear's one score per class when vectors_per_class
    is absent): pairwise decision values, votes for the label, and with prob_a/prob_b
    Platt-scaled pairwise probabilities coupled into class probabilities."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.labels()
        self.post = self.post_attr()
        c = len(self.classes)
        per_class = np.asarray(info.attr("vectors_per_class", []), dtype=np.int64)
        self.proba, self.probb = self.floats("prob_a"), self.floats("prob_b")
        if not c or len(self.proba) != len(self.probb) or not len(self.coefficients) or not len(self.rho):
            raise InvalidGraph(f"{self.where()}: needs class labels, coefficients, rho and prob_a/prob_b "
                               "of one length")
        self.svc = int(per_class.sum()) > 0
        self.pairs = [(i, j) for i in range(c - 1) for j in range(i + 1, c)]
        self.all_positive = bool((self.coefficients >= 0).all())
        if not self.svc:
            self.kernel_type = "LINEAR"
            if len(self.coefficients) % c:
                raise InvalidGraph(f"{self.where()}: coefficients do not split into {c} rows")
            self.sv = self.coefficients.reshape(c, -1)
            return
        n_v = int(per_class.sum())
        m = len(self.pairs)
        if len(per_class) != c or len(self.sv) % n_v or len(self.coefficients) < (c - 1) * n_v \
                or len(self.rho) < m or (len(self.proba) and len(self.proba) < m):
            raise InvalidGraph(f"{self.where()}: vectors_per_class, support_vectors, coefficients, rho "
                               "or prob_a do not fit the classes")
        self.sv = self.sv.reshape(n_v, -1)
        coef = self.coefficients[: (c - 1) * n_v].reshape(c - 1, n_v)
        start = np.concatenate([[0], np.cumsum(per_class)])
        # Decision value of pair (i, j) = K @ W[:, pair] + rho: class i's vectors weighted by
        # coefficient row j-1, class j's by row i (libsvm's layout).
        self.w = np.zeros((n_v, m), np.float64)
        self.vote_i = np.zeros((m, c), np.float32)
        self.vote_j = np.zeros((m, c), np.float32)
        for p, (i, j) in enumerate(self.pairs):
            self.w[start[i]:start[i + 1], p] = coef[j - 1, start[i]:start[i + 1]]
            self.w[start[j]:start[j + 1], p] = coef[i, start[j]:start[j + 1]]
            self.vote_i[p, i] = self.vote_j[p, j] = 1.0
        # The backend's compiled decisions (``svm_decide``: values and vote winners), with
        # its operands laid out once.
        decide = self.backend.extras.get("svm_decide")
        self._decide = None if decide is None else (
            decide, np.ascontiguousarray(self.w.T), self.rho[:m].astype(np.float64),
            np.array([i for i, _ in self.pairs], np.int64), np.array([j for _, j in self.pairs], np.int64))

    def compute(self, x: Any) -> tuple[Any, Any]:
        xp = self.xp
        f32, f64 = self.backend.dtype(np.float32), self.backend.dtype(np.float64)
        k = self.kernel(self.rows(x), self.sv)
        c, have_proba = len(self.classes), len(self.proba) > 0
        if not self.svc:
            s = k + float(self.rho[0])
            label = _argmax(xp, s)
            top = xp.max(s, axis=1) if s.shape[0] else s[:, 0]
        else:
            found = None
            if self._decide is not None and isinstance(k, np.ndarray):
                decide, *operands = self._decide
                found = decide(k, *operands, c)
            if found is not None:
                s, label = found
            else:
                # onnxruntime sums the decision values in double.
                s = xp.astype(xp.astype(k, f64) @ self.const(self.w) + self.const(self.rho[: len(self.pairs)]
                                                                                   .astype(np.float64)), f32)
                votes = (xp.astype(s > 0, f32) @ self.const(self.vote_i)
                         + xp.astype(s <= 0, f32) @ self.const(self.vote_j))
                label = xp.argmax(votes, axis=1)
            top = xp.zeros(s.shape[0], dtype=f32)
            if have_proba:
                s = self._coupled(s)
        if c == 2 and not have_proba:
            # onnxruntime's ChooseClass on the top score (0 in SVC mode: the vote decides).
            one = xp.ones_like(label)
            label = xp.where((top >= 0.5) if self.all_positive else (top > 0), one, label)
        if self.svc and not have_proba and c <= 2:
            z = _expand_binary(xp, s, self.post, 2 if self.post == 0 else 0)
        else:
            z = _transform(xp, s, self.post, self.softmax)
        return self.label_out(label), z

    def _coupled(self, s: Any) -> Any:
        """Platt-scaled pairwise probabilities coupled into (N, C) class probabilities
        (libsvm's coupling, as onnxruntime's multiclass_probability iterates it)."""
        xp, c = self.xp, len(self.classes)
        m = len(self.pairs)
        couple = self.backend.extras.get("svm_couple")
        if couple is not None and isinstance(s, np.ndarray):
            found = couple(s, c, 0.005 / c, (self.proba, self.probb))  # Platt's step included
            if found is not None:
                return found
        val = s * self.const(self.proba[:m]) + self.const(self.probb[:m])
        p = xp.clip(1.0 - _logistic(xp, val), 1e-7, 1.0 - 1e-7)  # (N, pairs)
        return self.couple(p)

    def couple(self, p: Any) -> Any:
        """libsvm's coupling of the pair probabilities ``p`` (N, pairs) into (N, C) class
        probabilities, in whole-array steps (a finished sample's updates are zeros)."""
        xp, c = self.xp, len(self.classes)
        m = len(self.pairs)
        eps = 0.005 / c
        n = p.shape[0]
        f32 = self.backend.dtype(np.float32)
        # r[i, j] = p(pair), r[j, i] = 1 - p(pair), as (N, C, C) by one-hot products.
        r_ij = np.zeros((m, c * c), np.float32)
        r_ji = np.zeros((m, c * c), np.float32)
        for q, (i, j) in enumerate(self.pairs):
            r_ij[q, i * c + j] = 1.0
            r_ji[q, j * c + i] = 1.0
        r = xp.reshape(p @ self.const(r_ij) + (1.0 - p) @ self.const(r_ji), (n, c, c))
        rt = xp.permute_dims(r, (0, 2, 1))
        eye = self.const(np.eye(c, dtype=np.float32))
        # Q[i, i] = sum_{j != i} r[j, i]^2, Q[i, j] = -r[j, i] * r[i, j].
        q = -rt * r * (1.0 - eye) + xp.expand_dims(xp.sum(rt * rt * (1.0 - eye), axis=2), axis=2) * eye
        diag = xp.sum(q * eye, axis=2)
        prob = xp.full((n, c), 1.0 / c, dtype=f32)
        active = xp.ones(n, dtype=xp.bool)
        for _ in range(max(100, c)):
            qp = xp.sum(q * xp.expand_dims(prob, axis=1), axis=2)
            pqp = xp.sum(prob * qp, axis=1)
            active = active & ~(xp.max(xp.abs(qp - xp.expand_dims(pqp, axis=1)), axis=1) < eps)
            if not bool(xp.any(active)):
                break
            for i in range(c):
                # A finished sample gets diff 0: every update below leaves it unchanged.
                diff = xp.where(active, (pqp - qp[:, i]) / diag[:, i], xp.zeros_like(pqp))
                prob = prob + xp.expand_dims(diff, axis=1) * eye[i, :]
                pqp = (pqp + diff * (diff * diag[:, i] + 2.0 * qp[:, i])) / (1.0 + diff) / (1.0 + diff)
                scale = xp.expand_dims(1.0 + diff, axis=1)
                qp = (qp + xp.expand_dims(diff, axis=1) * q[:, i, :]) / scale
                prob = prob / scale
        return xp.astype(prob, f32)


# ------------------------------------------------------------------ feature transforms


@library.define("Scaler", 1, domain=_ML)
class Scaler(_MLKernel):
    """``Y = (X - offset) * scale`` per feature (last axis), as float32."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.offset = self.floats("offset")
        self.scale = self.floats("scale")
        if not len(self.offset):
            self.offset = np.zeros(1, np.float32)
        if not len(self.scale):
            self.scale = np.ones(1, np.float32)
        self._offset_row, self._scale_row = self.offset.reshape(1, -1), self.scale.reshape(1, -1)
        self.features = -1  # the last input's feature count, once the attributes fit it

    def compute(self, x: Any) -> tuple[Any]:
        if self.xp is np and x.ndim and x.shape[-1] == self.features:
            # the attributes were checked against this many features already; as rows of
            # x's rank for the usual 2-D x (numpy broadcasts unequal ranks more slowly)
            two_d = x.ndim == 2
            y = (x if x.dtype == np.float32 else x.astype(np.float32)) - (self._offset_row if two_d else self.offset)
            y *= self._scale_row if two_d else self.scale  # in place: y is this call's own (the same rounding)
            return (y,)
        xf = self.xp.astype(x, self.backend.dtype(np.float32))
        off, scale = (self.const(_per_feature(p, x, what)) for p, what in ((self.offset, "offset"),
                                                                            (self.scale, "scale")))
        self.features = x.shape[-1] if x.ndim else 1
        return ((xf - off) * scale,)


def _per_feature(p: np.ndarray, x: Any, what: str) -> np.ndarray:
    """A per-feature attribute (length 1 or the last dimension) ready to broadcast on x."""
    feats = x.shape[-1] if x.ndim else 1
    if len(p) not in (1, feats):
        raise ValueError(f"{what} has {len(p)} entries for {feats} features")
    return p


@library.define("Normalizer", 1, domain=_ML)
class Normalizer(_MLKernel):
    """Divide each row by its max, L1 norm or L2 norm (a zero divisor leaves the row); float32."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.norm = info.attr("norm", "MAX")
        if self.norm not in ("MAX", "L1", "L2"):
            raise InvalidGraph(f"{self.where()}: norm must be MAX, L1 or L2, got {self.norm!r}")
        self._rows = self.backend.extras.get("normalize_rows")

    def compute(self, x: Any) -> tuple[Any]:
        xp = self.xp
        if xp is np and x.dtype == np.float32:
            xf = x  # only read: the result is a new array
        else:
            xf = xp.astype(x, self.backend.dtype(np.float32))
        xf = xp.reshape(xf, (1, -1)) if xf.ndim == 1 else xf
        rows = self._rows if xp is np else None
        if rows is not None:  # the backend's compiled rows (``normalize_rows``)
            y = rows(xf, self.norm)
            if y is not None:
                return (y,)
        if xp is np:  # ufunc calls: numpy's function wrappers are most of a row's cost
            if self.norm == "MAX":
                # onnxruntime's running std::max skips NaN (it never compares greater)
                div = np.fmax.reduce(xf, axis=-1, keepdims=True)
            elif self.norm == "L1":
                div = np.add.reduce(np.abs(xf), axis=-1, keepdims=True)
            else:
                div = np.sqrt(np.add.reduce(xf * xf, axis=-1, keepdims=True))
            if div.size == 1:  # one row: a Python comparison, not a mask and a scatter
                if div.item() == 0:
                    div.fill(1)
            else:
                div[div == 0] = 1
            return (xf / div,)
        if self.norm == "MAX":
            div = xp.max(xf, axis=-1, keepdims=True)
        elif self.norm == "L1":
            div = xp.sum(xp.abs(xf), axis=-1, keepdims=True)
        else:
            div = xp.sqrt(xp.sum(xf * xf, axis=-1, keepdims=True))
        return (xf / xp.where(div == 0, xp.ones_like(div), div),)


@library.define("Binarizer", 1, domain=_ML)
class Binarizer(_MLKernel):
    """1 where ``X > threshold``, else 0, in ``X``'s type."""

    def compute(self, x: Any) -> tuple[Any]:
        xp = self.xp
        # Compared in float64: the array API leaves an int array against a float scalar undefined.
        wide = x if dtype_name(x.dtype).startswith("float") else xp.astype(x, self.backend.dtype(np.float64))
        return (xp.astype(wide > float(self.info.attr("threshold", 0.0)), x.dtype),)


@library.define("Imputer", 1, domain=_ML)
class Imputer(_MLKernel):
    """Replace elements equal to the replaced value (NaN matches NaN) by imputed values
    (one, or one per feature of the last axis)."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        floats, ints = info.attr("imputed_value_floats"), info.attr("imputed_value_int64s")
        if (floats is None) == (ints is None):
            raise InvalidGraph(f"{self.where()}: exactly one of imputed_value_floats/int64s must be set")
        self.imputed = np.asarray(floats if floats is not None else ints).reshape(-1)
        self.replaced_f = float(info.attr("replaced_value_float", 0.0))
        self.replaced_i = int(info.attr("replaced_value_int64", 0))

    def compute(self, x: Any) -> tuple[Any]:
        xp = self.xp
        imputed = xp.astype(self.const(_per_feature(self.imputed, x, "imputed values")), x.dtype)
        if dtype_name(x.dtype).startswith("float"):
            r = self.replaced_f
            hit = xp.isnan(x) if np.isnan(r) else x == xp.astype(xp.asarray(r), x.dtype)
        else:
            hit = x == self.replaced_i
        return (xp.where(hit, imputed, x),)


@library.define("ArrayFeatureExtractor", 1, domain=_ML, host_inputs=(1,))
class ArrayFeatureExtractor(_MLKernel):
    """Select the elements at indices ``Y`` along the last axis of ``X`` (a 1-D ``X``
    gives a row)."""

    def compute(self, x: Any, y: Any) -> tuple[Any]:
        last = x.shape[-1] if x.ndim else 1
        if type(x) is np.ndarray and type(y) is np.ndarray and y.dtype.kind == "i":
            # Host arrays (a classifier's label look-up, skl2onnx's polynomial features: a
            # few indices per call): the same selection without the conversions, ~4x faster.
            idx = y.reshape(-1)
            if idx.size <= 16 and not all(0 <= i < last for i in idx.tolist()) or \
                    idx.size > 16 and ((idx < 0) | (idx >= last)).any():
                raise ValueError(f"index out of range [0, {last})")
            return ((x.reshape(1, -1) if x.ndim <= 1 else x).take(idx, axis=-1),)
        idx = np.asarray(self.host_ints(y), dtype=np.int64)
        if ((idx < 0) | (idx >= last)).any():
            raise ValueError(f"index out of range [0, {last})")
        if x.ndim <= 1:
            x = self.xp.reshape(x, (1, -1))
        return (self.xp.take(x, self.xp.asarray(idx), axis=x.ndim - 1),)


@library.define("FeatureVectorizer", 1, domain=_ML)
class FeatureVectorizer(_MLKernel):
    """Concatenate the inputs' features (each (N, ...) flattened per row, cut or
    zero-padded to its inputdimensions entry) into one float32 (N, sum) tensor."""

    def compute(self, *xs: Any) -> tuple[Any]:
        xp = self.xp
        dims = [int(d) for d in self.info.attr("inputdimensions", [])]
        if len(dims) != len(xs):
            raise ValueError(f"inputdimensions has {len(dims)} entries for {len(xs)} inputs")
        parts = []
        for x, d in zip(xs, dims):
            xf = self.rows(x)
            have = xf.shape[1]
            if have >= d:
                parts.append(xf[:, :d])
            else:
                parts.append(xp.concat([xf, xp.zeros((xf.shape[0], d - have), dtype=xf.dtype)], axis=1))
        return (xp.concat(parts, axis=1),)


@library.define("OneHotEncoder", 1, domain=_ML)
class OneHotEncoder(_MLKernel):
    """One float32 indicator per category along a new last axis (numbers are truncated to
    int64 first); an unknown value is all zeros, or an error when ``zeros`` is 0."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.cats_s = info.attr("cats_strings")
        self.cats_i = info.attr("cats_int64s")
        if not self.cats_s and not self.cats_i:
            raise InvalidGraph(f"{self.where()}: needs cats_strings or cats_int64s")
        self.zeros = int(info.attr("zeros", 1))
        self._ints = np.asarray(self.cats_i or [], np.int64)
        self._strings = np.asarray(self.cats_s or [], dtype=object)

    def compute(self, x: Any) -> tuple[Any]:
        xp = self.xp
        if not isinstance(x, np.ndarray) or x.dtype.kind not in "OSU":
            if not self.cats_i:
                raise ValueError("a numeric input needs cats_int64s")
            if xp is np and isinstance(x, np.ndarray):  # (expand_dims costs more than the rest)
                hit = x.astype(np.int64)[..., None] == self._ints
            else:
                hit = xp.expand_dims(xp.astype(x, xp.int64), axis=-1) == self.const(self._ints)
        else:
            if not self.cats_s:
                raise ValueError("a string input needs cats_strings")
            hit = xp.asarray(_as_strings(x)[..., None] == self._strings[None])
        if not self.zeros and not bool(xp.all(xp.any(hit, axis=-1))):
            raise ValueError("a value is not among the categories and zeros is 0")
        return (xp.astype(hit, self.backend.dtype(np.float32)),)


# ------------------------------------------------------------------ maps and sequences


@library.define("ZipMap", 1, domain=_ML)
class ZipMap(_MLKernel):
    """Each row of a float (N, C) tensor as a dict {class label: probability}: a Python
    list of N dicts (onnxruntime's seq(map(string|int64, float)))."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        self.labels("classlabels_strings", "classlabels_int64s")
        if not len(self.classes):
            raise InvalidGraph(f"{self.where()}: needs classlabels_strings or classlabels_int64s")
        # onnxruntime's maps are std::map: the dicts come back in key order.
        keys = [str(k) if self.strings else int(k) for k in self.classes]
        self.order = sorted(range(len(keys)), key=keys.__getitem__)
        self.keys = [keys[i] for i in self.order]
        self.in_order = self.order == list(range(len(keys)))

    def compute(self, x: Any) -> tuple[list[dict[Any, float]]]:
        xh = np.asarray(self.host(x), dtype=np.float32)
        if xh.ndim not in (1, 2):
            raise ValueError(f"ZipMap takes a 1-D or 2-D input, got rank {xh.ndim}")
        xh = xh.reshape(1, -1) if xh.ndim == 1 else xh
        if xh.shape[1] != len(self.keys):
            raise ValueError(f"{xh.shape[1]} columns for {len(self.keys)} class labels")
        rows = (xh if self.in_order else xh[:, self.order]).tolist()
        return ([dict(zip(self.keys, row)) for row in rows],)


def _as_map(m: Any) -> Any:
    """A map input as a dict (a 0-d object array holding one is unwrapped)."""
    return m.item() if isinstance(m, np.ndarray) and m.dtype == object and m.ndim == 0 else m


def _map_out(info: Any, values: list[Any]) -> np.dtype[Any]:
    """The element type of a tensor made of a map's values: the declared output's, else
    from the values (str → string, int → int64, float → float32)."""
    declared = info.output_types[0].dtype if info.output_types and info.output_types[0] else None
    if declared is not None:
        return declared
    kind = np.asarray(values[:1]).dtype.kind if values else "f"
    return np.dtype(object if kind in "OSU" else np.int64 if kind in "iub" else np.float32)


@library.define("DictVectorizer", 1, domain=_ML)
class DictVectorizer(_MLKernel):
    """A map (a Python dict) as a (1, vocabulary) tensor: the value of each vocabulary
    key, 0 (or "") where the map lacks it."""

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        s, i = info.attr("string_vocabulary"), info.attr("int64_vocabulary")
        if bool(s) == bool(i):
            raise InvalidGraph(f"{self.where()}: needs exactly one of string_vocabulary, int64_vocabulary")
        self.vocab = list(s) if s else [int(v) for v in i]

    def compute(self, m: Any) -> tuple[Any]:
        m = _as_map(m)
        if not isinstance(m, dict):
            raise ValueError(f"DictVectorizer takes a map (a dict), got {type(m).__name__}")
        dtype = _map_out(self.info, list(m.values()))
        fill = "" if dtype.kind == "O" else 0
        row = [m.get(k, fill) for k in self.vocab]
        out = np.asarray([row], dtype=dtype).reshape(1, len(self.vocab))
        return (out if dtype.kind == "O" else self.xp.asarray(out),)


@library.define("CastMap", 1, domain=_ML)
class CastMap(_MLKernel):
    """A map int64 → (string | float) as a (1, n) tensor of strings, floats or int64:
    DENSE keeps the values in key order; SPARSE puts value k at column k of max_map."""

    _TO = {"TO_FLOAT": np.float32, "TO_STRING": object, "TO_INT64": np.int64}

    def __init__(self, info: Any) -> None:
        super().__init__(info)
        to, form = info.attr("cast_to", "TO_FLOAT"), info.attr("map_form", "DENSE")
        if to not in self._TO or form not in ("DENSE", "SPARSE"):
            raise InvalidGraph(f"{self.where()}: cast_to {to!r} or map_form {form!r} is unknown")
        self.to, self.sparse = np.dtype(self._TO[to]), form == "SPARSE"
        self.max_map = int(info.attr("max_map", 1))
        if self.sparse and self.max_map <= 0:
            raise InvalidGraph(f"{self.where()}: max_map must be positive")

    def _cast(self, v: Any) -> Any:
        if self.to.kind == "O":
            return v if isinstance(v, str) else f"{float(v):f}"  # std::to_string(float)
        return self.to.type(float(v))

    def compute(self, m: Any) -> tuple[Any]:
        m = _as_map(m)
        if not isinstance(m, dict):
            raise ValueError(f"CastMap takes a map (a dict), got {type(m).__name__}")
        items = sorted((int(k), v) for k, v in m.items())
        if not self.sparse:
            out = np.asarray([[self._cast(v) for _, v in items]], dtype=self.to).reshape(1, len(items))
        else:
            # onnxruntime fills the missing keys' strings with "0.f" (sic).
            out = np.full((1, self.max_map), "0.f" if self.to.kind == "O" else 0, dtype=self.to)
            for k, v in items:
                if not 0 <= k < self.max_map:
                    raise ValueError(f"key {k} is outside [0, max_map={self.max_map})")
                out[0, k] = self._cast(v)
        return (out if self.to.kind == "O" else self.xp.asarray(out),)
