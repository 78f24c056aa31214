"""CPU kernels: the ai.onnx.ml domain (classic machine-learning operators).

LabelEncoder maps each element through a key → value table given as attributes (lists of
strings, int64s or floats; from version 4 also 1-D tensors of any allowed type). Look-ups
are vectorized: the keys are sorted once and the input is searched with ``np.searchsorted``
(which also works on object arrays of strings); NaN keys match any NaN input.

TreeEnsemble (version 5 of the domain) and the older TreeEnsembleRegressor share one tree
evaluator: nodes are flattened into arrays (feature, threshold, mode, true/false child and
whether that child is a leaf) and every (sample, tree) pair walks down one level per
iteration, so a forest of depth ``d`` costs ``d`` vectorized steps. Leaves contribute
weights to targets, which are aggregated (SUM, AVERAGE, MIN, MAX), offset by base values and
post-transformed (NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT).

Also here: ArrayFeatureExtractor, Binarizer, Scaler, Normalizer, Imputer, LinearRegressor.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry

_ML = "ai.onnx.ml"


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _as_strings(x: np.ndarray) -> np.ndarray:
    """A string tensor as an object array of ``str`` (bytes are decoded as UTF-8)."""
    if x.dtype.kind == "O":
        if x.size and isinstance(x.flat[0], bytes):
            return np.vectorize(lambda s: s.decode("utf-8"), otypes=[object])(x)
        return x
    if x.dtype.kind == "S":
        return np.char.decode(x, "utf-8").astype(object)
    return x.astype(object)


# --------------------------------------------------------------- post transforms


def _erfinv(y: np.ndarray) -> np.ndarray:
    """Inverse error function (Giles' single-precision polynomial, ~1e-7 relative)."""
    y = np.asarray(y, dtype=np.float64)
    w = -np.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws = w - 2.5
    p_small = 2.81022636e-08
    for c in (3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087, -0.00125372503,
              -0.00417768164, 0.246640727, 1.50140941):  # fmt: skip
        p_small = c + p_small * ws
    wl = np.sqrt(np.maximum(w, 5.0)) - 3.0
    p_large = -0.000200214257
    for c in (0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773, -0.0076224613,
              0.00943887047, 1.00167406, 2.83297682):  # fmt: skip
        p_large = c + p_large * wl
    return np.where(small, p_small, p_large) * y


_POST_NAMES = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _post_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    """Apply post transform ``kind`` (index into ``_POST_NAMES``) along the last axis."""
    if kind == 0:
        return scores
    if kind == 1:
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    if kind == 2:
        return 1.0 / (1.0 + np.exp(-scores))
    if kind == 3:
        nonzero = scores != 0
        e = np.where(nonzero, np.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
        total = e.sum(axis=-1, keepdims=True)
        return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)
    return np.sqrt(2.0) * _erfinv(2.0 * scores - 1.0)


def _post_transform_attr(info: KernelInfo) -> int:
    """The post_transform attribute given as a string (older ml ops)."""
    name = info.attr("post_transform", "NONE")
    if name not in _POST_NAMES:
        raise InvalidGraph(f"{_node(info)}: unknown post_transform {name!r}")
    return _POST_NAMES.index(name)


# ------------------------------------------------------------------ LabelEncoder


class _Table:
    """A key → value look-up table searched with ``np.searchsorted``."""

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
        # The last occurrence of a repeated key wins: unique over the reversed keys.
        uniq, first = np.unique(keys[::-1], return_index=True)
        self.keys = uniq
        self.values = values[::-1][first]

    def __call__(self, x: np.ndarray) -> np.ndarray:
        out = np.full(x.shape, self.default, dtype=self.values_dtype)
        if len(self.keys):
            pos = np.searchsorted(self.keys, x)
            pos = np.minimum(pos, len(self.keys) - 1)
            found = np.asarray(self.keys[pos] == x, dtype=bool)
            out[found] = self.values[pos[found]]
        if self.nan_value is not None and x.dtype.kind == "f":
            out[np.isnan(x)] = self.nan_value
        return out


def _attr_array(info: KernelInfo, suffix: str, kind: str) -> np.ndarray | None:
    """The keys_/values_ attribute ``kind`` ('keys' or 'values') as an array, or None."""
    for name, dtype in (("strings", object), ("int64s", np.int64), ("floats", np.float32)):
        value = info.attr(f"{kind}_{name}")
        if value is not None:
            return np.asarray(value, dtype=dtype)
    tensor = info.attr(f"{kind}_tensor")
    if tensor is not None:
        arr = np.asarray(tensor).reshape(-1)
        return _as_strings(arr) if arr.dtype.kind in "OSU" else arr
    return None


@registry.register("LabelEncoder", since=(1, 2, 4), domain=_ML)
class LabelEncoder(Kernel):
    """Map each element through the keys_* → values_* table (default_* when absent)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.v1 = info.since_version == 1
        if self.v1:
            self.classes = np.asarray(info.attr("classes_strings", []), dtype=object)
            self.default_int = int(info.attr("default_int64", -1))
            self.default_str = info.attr("default_string", "_Unused")
            idx = np.arange(len(self.classes), dtype=np.int64)
            self.to_int = _Table(self.classes, idx, self.default_int)
            return
        keys = _attr_array(info, "", "keys")
        values = _attr_array(info, "", "values")
        if keys is None or values is None:
            raise InvalidGraph(f"{_node(info)}: needs one keys_* and one values_* attribute")
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
            raise InvalidGraph(f"{_node(info)}: {exc}") from None
        # onnx's own cases declare an output type narrower than values_tensor's (int16 for
        # int32 values); follow a declared integer output type of the same kind.
        self.out_dtype = values.dtype
        declared = (
            info.output_types[0].dtype if info.output_types and info.output_types[0] else None
        )
        if declared is not None and declared.kind == values.dtype.kind:
            self.out_dtype = declared

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        if x.dtype.kind in "OSU":
            x = _as_strings(x)
        if self.v1:
            if x.dtype.kind == "O":
                return (self.to_int(x),)
            xi = x.astype(np.int64)
            ok = (xi >= 0) & (xi < len(self.classes))
            out = np.full(x.shape, self.default_str, dtype=object)
            out[ok] = self.classes[xi[ok]]
            return (out,)
        return (self.table(x).astype(self.out_dtype, copy=False),)


# ------------------------------------------------------------------ tree ensembles

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_MODE_NAMES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
_AGG_NAMES = ("AVERAGE", "SUM", "MIN", "MAX")


class _Forest:
    """Flattened trees. Node ``i`` tests ``x[feature[i]] <mode[i]> split[i]`` and goes to
    ``true_id[i]`` (a leaf index when ``true_leaf[i]``, else a node index) or the false side.
    Leaf ``j`` adds ``weights[j]`` to target ``targets[j]`` (a leaf may appear several times
    in these lists, once per contribution)."""

    def __init__(
        self,
        *,
        roots: np.ndarray,
        feature: np.ndarray,
        split: np.ndarray,
        mode: np.ndarray,
        true_id: np.ndarray,
        true_leaf: np.ndarray,
        false_id: np.ndarray,
        false_leaf: np.ndarray,
        missing_true: np.ndarray,
        members: dict[int, np.ndarray],
        contrib_leaf: np.ndarray,
        contrib_target: np.ndarray,
        contrib_weight: np.ndarray,
        n_leaves: int,
        n_targets: int,
    ) -> None:
        self.roots = roots
        self.feature, self.split, self.mode = feature, split, mode
        self.true_id, self.true_leaf = true_id, true_leaf.astype(bool)
        self.false_id, self.false_leaf = false_id, false_leaf.astype(bool)
        self.missing_true = missing_true.astype(bool)
        self.members = members
        self.n_targets = n_targets
        # Dense leaf x target tables: summed weight, and whether the leaf votes at all.
        self.weight = np.zeros((n_leaves, n_targets), dtype=np.float64)
        np.add.at(self.weight, (contrib_leaf, contrib_target), contrib_weight)
        self.votes = np.zeros((n_leaves, n_targets), dtype=bool)
        self.votes[contrib_leaf, contrib_target] = True
        n_nodes = len(feature)
        for name, ids, leaf in (
            ("true", true_id, self.true_leaf),
            ("false", false_id, self.false_leaf),
        ):
            if len(ids) and (
                (ids[leaf] >= n_leaves).any() or (ids[~leaf] >= n_nodes).any() or (ids < 0).any()
            ):
                raise ValueError(f"a {name} branch points outside the nodes or leaves")
        if len(roots) and ((roots < 0) | (roots >= max(n_nodes, 1))).any():
            raise ValueError("a tree root points outside the nodes")

    def leaves(self, x: np.ndarray) -> np.ndarray:
        """The leaf each (sample, tree) reaches: int array of shape (N, n_trees)."""
        n = x.shape[0]
        n_trees = len(self.roots)
        cur = np.broadcast_to(self.roots, (n, n_trees)).copy()
        done = np.zeros((n, n_trees), dtype=bool)
        rows = np.broadcast_to(np.arange(n)[:, None], (n, n_trees))
        if len(self.feature) and self.feature.max(initial=0) >= x.shape[1]:
            raise ValueError(f"a node reads feature {self.feature.max()} of {x.shape[1]}")
        while not done.all():
            active = np.flatnonzero(~done.ravel())
            node = cur.ravel()[active]
            xv = x[rows.ravel()[active], self.feature[node]]
            cond = self._test(node, xv)
            nxt = np.where(cond, self.true_id[node], self.false_id[node])
            leaf = np.where(cond, self.true_leaf[node], self.false_leaf[node])
            flat_cur, flat_done = cur.reshape(-1), done.reshape(-1)
            flat_cur[active] = nxt
            flat_done[active] = leaf
        return cur

    def _test(self, node: np.ndarray, xv: np.ndarray) -> np.ndarray:
        mode, split = self.mode[node], self.split[node]
        with np.errstate(invalid="ignore"):
            cond = np.select(
                [mode == _LEQ, mode == _LT, mode == _GTE, mode == _GT, mode == _EQ],
                [xv <= split, xv < split, xv >= split, xv > split, xv == split],
                default=xv != split,
            )
        for m, values in self.members.items():
            at = node == m
            if at.any():
                cond[at] = np.isin(xv[at], values)
        # NaN compares false except under BRANCH_NEQ; nodes tracking missing values go true.
        nan = np.isnan(xv)
        if nan.any():
            cond[nan] |= self.missing_true[node[nan]]
        return cond

    def scores(self, x: np.ndarray, aggregate: int, base: np.ndarray | None) -> np.ndarray:
        """Aggregated (N, n_targets) float64 scores, base values added."""
        if x.ndim == 1:
            x = x[None, :]
        x = x.reshape(x.shape[0], -1).astype(np.float64, copy=False)
        leaf = self.leaves(x)
        w = self.weight[leaf]  # (N, trees, targets)
        if aggregate in (0, 1):
            out = w.sum(axis=1)
            if aggregate == 0 and len(self.roots):
                out /= len(self.roots)
        else:
            votes = self.votes[leaf]
            fill = np.inf if aggregate == 2 else -np.inf
            picked = np.where(votes, w, fill)
            out = picked.min(axis=1) if aggregate == 2 else picked.max(axis=1)
            out = np.where(votes.any(axis=1), out, 0.0)
        if base is not None:
            out = out + base
        return out


@registry.register("TreeEnsemble", since=5, domain=_ML)
class TreeEnsemble(Kernel):
    """Evaluate a forest given in the TreeEnsemble-5 encoding (nodes_* and leaf_* tuples)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        where = _node(info)

        def ints(name: str, default: Any = None) -> np.ndarray:
            value = info.attr(name, default)
            if value is None:
                raise InvalidGraph(f"{where}: required attribute {name!r} is missing")
            return np.asarray(value, dtype=np.int64).reshape(-1)

        def tensor(name: str, required: bool = True) -> np.ndarray | None:
            value = info.attr(name)
            if value is None:
                if required:
                    raise InvalidGraph(f"{where}: required attribute {name!r} is missing")
                return None
            return np.asarray(value).reshape(-1)

        self.aggregate = int(info.attr("aggregate_function", 1))
        self.post = int(info.attr("post_transform", 0))
        if self.aggregate not in range(4):
            raise InvalidGraph(f"{where}: aggregate_function must be 0..3, got {self.aggregate}")
        if self.post not in range(5):
            raise InvalidGraph(f"{where}: post_transform must be 0..4, got {self.post}")
        feature = ints("nodes_featureids")
        mode = tensor("nodes_modes").astype(np.int64)  # type: ignore[union-attr]
        split = tensor("nodes_splits").astype(np.float64)  # type: ignore[union-attr]
        n = len(feature)
        missing = ints("nodes_missing_value_tracks_true", [0] * n)
        fields = {
            k: ints(k)
            for k in ("nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
                      "nodes_falseleafs")
        }  # fmt: skip
        if any(len(v) != n for v in (mode, split, missing, *fields.values())):
            raise InvalidGraph(f"{where}: the nodes_* attributes differ in length")
        if ((mode < 0) | (mode > _MEMBER)).any():
            raise InvalidGraph(f"{where}: nodes_modes must be 0..6")
        members: dict[int, np.ndarray] = {}
        member_nodes = np.flatnonzero(mode == _MEMBER)
        if len(member_nodes):
            values = tensor("membership_values").astype(np.float64)  # type: ignore[union-attr]
            cuts = np.flatnonzero(np.isnan(values))
            sets = np.split(values, cuts)
            sets = [s[~np.isnan(s)] for s in sets]
            if len(sets) < len(member_nodes):
                raise InvalidGraph(
                    f"{where}: membership_values has {len(sets)} sets for "
                    f"{len(member_nodes)} BRANCH_MEMBER nodes"
                )
            members = {int(m): sets[i] for i, m in enumerate(member_nodes)}
        targets = ints("leaf_targetids")
        weights = tensor("leaf_weights").astype(np.float64)  # type: ignore[union-attr]
        if len(targets) != len(weights):
            raise InvalidGraph(f"{where}: leaf_targetids and leaf_weights differ in length")
        n_targets = int(info.attr("n_targets", int(targets.max(initial=-1)) + 1))
        if len(targets) and ((targets < 0) | (targets >= n_targets)).any():
            raise InvalidGraph(f"{where}: leaf_targetids must be in [0, {n_targets})")
        try:
            self.forest = _Forest(
                roots=ints("tree_roots"),
                feature=feature,
                split=split,
                mode=mode,
                true_id=fields["nodes_truenodeids"],
                true_leaf=fields["nodes_trueleafs"],
                false_id=fields["nodes_falsenodeids"],
                false_leaf=fields["nodes_falseleafs"],
                missing_true=missing,
                members=members,
                contrib_leaf=np.arange(len(targets)),
                contrib_target=targets,
                contrib_weight=weights,
                n_leaves=len(targets),
                n_targets=n_targets,
            )
        except ValueError as exc:
            raise InvalidGraph(f"{where}: {exc}") from None

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        scores = self.forest.scores(x, self.aggregate, None)
        return (_post_transform(scores, self.post).astype(x.dtype),)


def _tensor_or_floats(info: KernelInfo, name: str) -> np.ndarray | None:
    value = info.attr(f"{name}_as_tensor")
    if value is None:
        value = info.attr(name)
    return None if value is None else np.asarray(value, dtype=np.float64).reshape(-1)


def _old_forest(info: KernelInfo, prefix: str) -> _Forest:
    """A :class:`_Forest` from the TreeEnsembleRegressor/Classifier encoding (tree and node
    ids; a LEAF mode marks leaves; votes in ``{prefix}_treeids/nodeids/ids/weights``)."""
    where = _node(info)
    tree_ids = np.asarray(info.attr("nodes_treeids", []), dtype=np.int64)
    node_ids = np.asarray(info.attr("nodes_nodeids", []), dtype=np.int64)
    n = len(tree_ids)
    modes_s = info.attr("nodes_modes", [])
    feature = np.asarray(info.attr("nodes_featureids", [0] * n), dtype=np.int64)
    split = _tensor_or_floats(info, "nodes_values")
    split = np.zeros(n) if split is None else split
    true_ids = np.asarray(info.attr("nodes_truenodeids", [0] * n), dtype=np.int64)
    false_ids = np.asarray(info.attr("nodes_falsenodeids", [0] * n), dtype=np.int64)
    missing = np.asarray(info.attr("nodes_missing_value_tracks_true", [0] * n), dtype=np.int64)
    if any(len(v) != n for v in (node_ids, modes_s, feature, split, true_ids, false_ids)):
        raise InvalidGraph(f"{where}: the nodes_* attributes differ in length")
    if len(missing) != n:
        missing = np.zeros(n, dtype=np.int64)
    try:
        mode = np.asarray(
            [len(_MODE_NAMES) if m == "LEAF" else _MODE_NAMES.index(m) for m in modes_s],
            dtype=np.int64,
        )
    except ValueError:
        raise InvalidGraph(f"{where}: unknown mode in nodes_modes {modes_s}") from None
    is_leaf = mode == len(_MODE_NAMES)
    # Global position of each (tree, node id); leaves are numbered among themselves.
    pos = {(int(t), int(i)): k for k, (t, i) in enumerate(zip(tree_ids, node_ids))}
    leaf_index = np.cumsum(is_leaf) - 1
    interior_index = np.cumsum(~is_leaf) - 1

    def child(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out_id = np.zeros(n, dtype=np.int64)
        out_leaf = np.zeros(n, dtype=bool)
        for k in np.flatnonzero(~is_leaf):
            p = pos.get((int(tree_ids[k]), int(ids[k])))
            if p is None:
                raise InvalidGraph(f"{where}: node {k} branches to a missing node {ids[k]}")
            out_leaf[k] = is_leaf[p]
            out_id[k] = leaf_index[p] if is_leaf[p] else interior_index[p]
        return out_id[~is_leaf], out_leaf[~is_leaf]

    t_id, t_leaf = child(true_ids)
    f_id, f_leaf = child(false_ids)
    # Roots: node id 0 of each tree, else the first node of the tree.
    trees = sorted(set(tree_ids.tolist()))
    root_pos = [pos.get((t, 0), int(np.flatnonzero(tree_ids == t)[0])) for t in trees]
    # A tree that is a single leaf: give it an interior node whose both sides are the leaf.
    feature_i, split_i, mode_i, missing_i = (
        feature[~is_leaf], split[~is_leaf], mode[~is_leaf], missing[~is_leaf]
    )  # fmt: skip
    roots = []
    extra = []
    for p in root_pos:
        if is_leaf[p]:
            extra.append(int(leaf_index[p]))
            roots.append(int((~is_leaf).sum()) + len(extra) - 1)
        else:
            roots.append(int(interior_index[p]))
    if extra:
        e = np.asarray(extra, dtype=np.int64)
        feature_i = np.concatenate([feature_i, np.zeros(len(e), np.int64)])
        split_i = np.concatenate([split_i, np.zeros(len(e))])
        mode_i = np.concatenate([mode_i, np.zeros(len(e), np.int64)])
        missing_i = np.concatenate([missing_i, np.zeros(len(e), np.int64)])
        t_id, f_id = np.concatenate([t_id, e]), np.concatenate([f_id, e])
        t_leaf = np.concatenate([t_leaf, np.ones(len(e), bool)])
        f_leaf = np.concatenate([f_leaf, np.ones(len(e), bool)])
    v_tree = np.asarray(info.attr(f"{prefix}_treeids", []), dtype=np.int64)
    v_node = np.asarray(info.attr(f"{prefix}_nodeids", []), dtype=np.int64)
    v_target = np.asarray(info.attr(f"{prefix}_ids", []), dtype=np.int64)
    v_weight = _tensor_or_floats(info, f"{prefix}_weights")
    v_weight = np.zeros(0) if v_weight is None else v_weight
    if not len(v_tree) == len(v_node) == len(v_target) == len(v_weight):
        raise InvalidGraph(f"{where}: the {prefix}_* attributes differ in length")
    v_leaf = np.empty(len(v_tree), dtype=np.int64)
    for k, (t, i) in enumerate(zip(v_tree.tolist(), v_node.tolist())):
        p = pos.get((t, i))
        if p is None or not is_leaf[p]:
            raise InvalidGraph(f"{where}: vote {k} is for ({t}, {i}), which is not a leaf")
        v_leaf[k] = leaf_index[p]
    return _Forest(
        roots=np.asarray(roots, dtype=np.int64),
        feature=feature_i,
        split=split_i,
        mode=mode_i,
        true_id=t_id,
        true_leaf=t_leaf,
        false_id=f_id,
        false_leaf=f_leaf,
        missing_true=missing_i,
        members={},
        contrib_leaf=v_leaf,
        contrib_target=v_target,
        contrib_weight=v_weight,
        n_leaves=int(is_leaf.sum()),
        n_targets=int(info.attr("n_targets", int(v_target.max(initial=-1)) + 1)),
    )


@registry.register("TreeEnsembleRegressor", since=(1, 3, 5), domain=_ML)
class TreeEnsembleRegressor(Kernel):
    """The deprecated tree-ensemble regressor (tree/node-id encoding); float32 output."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        agg = info.attr("aggregate_function", "SUM")
        if agg not in _AGG_NAMES:
            raise InvalidGraph(f"{_node(info)}: unknown aggregate_function {agg!r}")
        self.aggregate = _AGG_NAMES.index(agg)
        self.post = _post_transform_attr(info)
        self.base = _tensor_or_floats(info, "base_values")
        try:
            self.forest = _old_forest(info, "target")
        except ValueError as exc:
            raise InvalidGraph(f"{_node(info)}: {exc}") from None
        if self.base is not None and len(self.base) not in (0, self.forest.n_targets):
            raise InvalidGraph(f"{_node(info)}: base_values must have n_targets entries")
        if self.base is not None and not len(self.base):
            self.base = None

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        scores = self.forest.scores(x, self.aggregate, self.base)
        return (_post_transform(scores, self.post).astype(np.float32),)


# ------------------------------------------------------------------ simple ops


@registry.register("ArrayFeatureExtractor", since=1, domain=_ML)
class ArrayFeatureExtractor(Kernel):
    """Select the elements at indices ``Y`` along the last axis of ``X``."""

    def compute(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray]:
        idx = np.asarray(y, dtype=np.int64).reshape(-1)
        last = x.shape[-1] if x.ndim else 1
        if ((idx < 0) | (idx >= last)).any():
            raise ValueError(f"{_node(self.info)}: index out of range [0, {last})")
        if x.ndim <= 1:
            return (x.reshape(-1)[idx].reshape(1, -1),)
        return (np.take(x, idx, axis=-1),)


@registry.register("Binarizer", since=1, domain=_ML)
class Binarizer(Kernel):
    """1 where ``X > threshold``, else 0, in ``X``'s type."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.threshold = float(info.attr("threshold", 0.0))

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        return ((x > self.threshold).astype(x.dtype),)


def _feature_vector(info: KernelInfo, name: str) -> np.ndarray:
    return np.asarray(info.attr(name, []), dtype=np.float32).reshape(-1)


def _last_axis_param(p: np.ndarray, x: np.ndarray, what: str) -> np.ndarray:
    """A per-feature attribute (length 1 or the last dimension) ready to broadcast on x."""
    feats = x.shape[-1] if x.ndim else 1
    if len(p) not in (1, feats):
        raise ValueError(f"{what} has {len(p)} entries for {feats} features")
    return p


@registry.register("Scaler", since=1, domain=_ML)
class Scaler(Kernel):
    """``Y = (X - offset) * scale`` per feature, as float32."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.offset = _feature_vector(info, "offset")
        self.scale = _feature_vector(info, "scale")
        if not len(self.offset):
            self.offset = np.zeros(1, np.float32)
        if not len(self.scale):
            self.scale = np.ones(1, np.float32)

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        off = _last_axis_param(self.offset, x, "offset")
        scale = _last_axis_param(self.scale, x, "scale")
        return (((x.astype(np.float32) - off) * scale).astype(np.float32),)


@registry.register("Normalizer", since=1, domain=_ML)
class Normalizer(Kernel):
    """Normalize each row by its max, L1 norm or L2 norm; float32 output."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.norm = info.attr("norm", "MAX")
        if self.norm not in ("MAX", "L1", "L2"):
            raise InvalidGraph(f"{_node(info)}: norm must be MAX, L1 or L2, got {self.norm!r}")

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        xf = x.astype(np.float32)
        if xf.ndim == 1:
            xf = xf[None, :]
        if self.norm == "MAX":
            div = xf.max(axis=-1, keepdims=True)
        elif self.norm == "L1":
            div = np.abs(xf).sum(axis=-1, keepdims=True)
        else:
            div = np.sqrt((xf * xf).sum(axis=-1, keepdims=True))
        safe = np.where(div == 0, 1, div).astype(np.float32)
        return ((xf / safe).astype(np.float32),)


@registry.register("Imputer", since=1, domain=_ML)
class Imputer(Kernel):
    """Replace elements equal to the replaced value (NaN matches NaN) by imputed values."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        floats = info.attr("imputed_value_floats")
        ints = info.attr("imputed_value_int64s")
        if (floats is None) == (ints is None):
            raise InvalidGraph(
                f"{_node(info)}: exactly one of imputed_value_floats/int64s must be set"
            )
        self.imputed = np.asarray(floats if floats is not None else ints).reshape(-1)
        self.replaced_f = float(info.attr("replaced_value_float", 0.0))
        self.replaced_i = int(info.attr("replaced_value_int64", 0))

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        imputed = _last_axis_param(self.imputed, x, "imputed values").astype(x.dtype)
        if x.dtype.kind == "f":
            r = self.replaced_f
            hit = np.isnan(x) if np.isnan(r) else x == x.dtype.type(r)
        else:
            hit = x == self.replaced_i
        return (np.where(hit, imputed, x).astype(x.dtype, copy=False),)


@registry.register("LinearRegressor", since=1, domain=_ML)
class LinearRegressor(Kernel):
    """``Y = X @ coefficients.T + intercepts`` (targets rows of coefficients), post-transformed."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.targets = int(info.attr("targets", 1))
        coef = np.asarray(info.attr("coefficients", []), dtype=np.float32)
        if self.targets <= 0 or len(coef) % self.targets:
            raise InvalidGraph(f"{_node(info)}: coefficients do not split into targets rows")
        self.coef = coef.reshape(self.targets, -1)
        icpt = np.asarray(info.attr("intercepts", []), dtype=np.float32)
        if len(icpt) not in (0, self.targets):
            raise InvalidGraph(f"{_node(info)}: intercepts must have one entry per target")
        self.intercepts = icpt if len(icpt) else None
        self.post = _post_transform_attr(info)

    def compute(self, x: np.ndarray) -> tuple[np.ndarray]:
        xf = x.astype(np.float32)
        if xf.ndim == 1:
            xf = xf[None, :]
        y = xf.reshape(xf.shape[0], -1) @ self.coef.T
        if self.intercepts is not None:
            y = y + self.intercepts
        return (_post_transform(y, self.post).astype(np.float32),)
