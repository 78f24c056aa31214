"""Common subexpression elimination: nodes that compute the same value once.

Converters repeat work: skl2onnx's IsolationForest gathers the same input columns once per
tree (50 identical ``Gather`` nodes) and casts each tree's leaf indices twice; dynamic torch
exports take ``Shape`` of the same tensor in every layer. Two nodes are the same
computation when they have the same operator (domain and type), the same inputs (the
same value names, in order), the same number of outputs and the same attributes; the
later one is removed and its readers read the earlier one's outputs. onnxruntime does this
at its basic level (``CommonSubexpressionElimination``).

Left alone: random operators (each draw differs), nodes with subgraphs, operators outside
the standard domains (a custom operator may keep state), and a duplicate whose output is a
graph output or is read inside a subgraph (the name must stay). Equal initializers under
different names are not merged, so the pass never compares tensor contents.
"""

from __future__ import annotations

import onnx

from .rewrite import Rewrite

__all__ = ["eliminate_common_subexpressions"]

#: Operators whose every evaluation differs (or, for Dropout in training, may).
NONDETERMINISTIC = frozenset({
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial",
    "Bernoulli", "Dropout",
})
#: The domains whose operators are pure functions of their inputs and attributes.
PURE_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
_SUBGRAPHS = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)

_Key = tuple[str, str, tuple[str, ...], int, tuple[tuple[str, bytes], ...]]


def _key(node: onnx.NodeProto) -> _Key | None:
    """What identifies ``node``'s computation, or None where it must not be merged."""
    if node.domain not in PURE_DOMAINS or node.op_type in NONDETERMINISTIC or not node.input or not node.output:
        return None
    if any(a.type in _SUBGRAPHS for a in node.attribute):
        return None
    attributes = tuple(sorted((a.name, a.SerializeToString(deterministic=True)) for a in node.attribute))
    domain = "" if node.domain == "ai.onnx" else node.domain
    return domain, node.op_type, tuple(node.input), len(node.output), attributes


def eliminate_common_subexpressions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Remove every node that repeats an earlier node's computation (see the module
    docstring), rewiring its readers to the earlier node's outputs.

    Nodes are visited in graph order and readers are rewired as duplicates are found, so
    in a sorted graph a whole repeated chain collapses in one pass.
    """
    # Without a first pair of equal nodes there is nothing to merge (later pairs only
    # arise from merged readers): skip the producer and consumer maps of a Rewrite.
    keys = [k for k in map(_key, model.graph.node) if k is not None]
    if len(set(keys)) == len(keys):
        return model
    rw = Rewrite(model)
    first: dict[_Key, onnx.NodeProto] = {}
    for node in model.graph.node:
        key = _key(node)
        if key is None:
            continue
        kept = first.setdefault(key, node)
        if kept is node:
            continue
        outputs = [(mine, theirs) for mine, theirs in zip(node.output, kept.output) if mine]
        if any(mine in rw.pinned or not theirs for mine, theirs in outputs):
            continue  # a name that must stay, or an optional output the first node omits
        for mine, theirs in outputs:
            rw.rename_input(mine, theirs)
        rw.remove(node)
    return rw.commit()
