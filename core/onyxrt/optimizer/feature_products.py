"""Feature products (extended level): skl2onnx's PolynomialFeatures as a few whole-matrix
nodes instead of two nodes per output column.

skl2onnx writes each column of scikit-learn's ``PolynomialFeatures`` as
``ReduceProd(ArrayFeatureExtractor(X, [i, j, ...]), axes=[1], keepdims=1)`` and concatenates
them: a 20-feature degree-2 expansion is 231 columns, 460 nodes of a few values each, where
per-node dispatch is the whole cost (onnxruntime ~0.3 ms a row, onyxrt more). Here each run
of consecutive columns in the ``Concat`` that multiply the same number of features of the
same 2-D ``X`` becomes::

    Gather(X, indices (k * j,), axis=1) -> Reshape [0, k, j] -> ReduceProd(axes=[2], keepdims=0)

The same products in the same order (each (row, column) multiplies its j features left to
right, as ReduceProd over one row of the extracted block does), so the same bits; columns
that are not such products (the bias column) stay as they are.

Fused only when: the Concat joins along axis 1 of 2-D values; each column's ReduceProd
reduces axis 1 (attribute, or constant input from opset 18) keeping it, and feeds that
Concat alone; its ArrayFeatureExtractor (``ai.onnx.ml``) takes X of known rank 2 and
constant non-negative indices, and feeds that ReduceProd alone; the run has at least two
columns; the session's providers run Gather, Reshape and ReduceProd.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from ..kernels import parse_attribute
from .rewrite import DEFAULT_DOMAINS, Rewrite, has_op
from .support import PassContext

__all__ = ["fuse_feature_products"]

_ML = "ai.onnx.ml"

#: One product column: (X, its feature indices, the nodes computing it).
_Column = tuple[str, np.ndarray, list[onnx.NodeProto]]


def fuse_feature_products(model: onnx.ModelProto, ctx: PassContext) -> onnx.ModelProto:
    """Runs of product columns into Gather/Reshape/ReduceProd (see the module doc)."""
    if not has_op(model.graph, "ArrayFeatureExtractor", domains=(_ML,)) or not all(
            ctx.can_run("", op) for op in ("Gather", "Reshape", "ReduceProd")):
        return model
    rw = Rewrite(model, ctx.arrays)
    for concat in rw.graph.node:
        if concat.op_type == "Concat" and concat.domain in DEFAULT_DOMAINS and not rw.is_removed(concat):
            _fuse_concat(rw, concat)
    return rw.commit()


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: parse_attribute(a) for a in node.attribute}


def _column(rw: Rewrite, name: str, concat: onnx.NodeProto) -> _Column | None:
    """The product column ``name`` of ``concat``, or None."""
    prod = rw.produced_by(name, "ReduceProd")
    if prod is None or not rw.feeds_only(name, concat):
        return None
    attrs = _attrs(prod)
    if attrs.get("keepdims", 1) != 1:
        return None
    if rw.opset() >= 18:
        axes = rw.array(prod.input[1]) if len(prod.input) > 1 and prod.input[1] else None
        if axes is None or axes.dtype.kind not in "iu" or axes.reshape(-1).tolist() not in ([1], [-1]):
            return None
    elif attrs.get("axes") not in ([1], [-1]):
        return None
    afe = rw.producer.get(prod.input[0])
    if afe is None or afe.op_type != "ArrayFeatureExtractor" or afe.domain != _ML or rw.is_removed(afe) \
            or not rw.feeds_only(prod.input[0], prod):
        return None
    x, indices = afe.input[0], rw.array(afe.input[1])
    shape = rw.shape(x)
    if shape is None or len(shape) != 2 or indices is None or indices.dtype.kind not in "iu" or not indices.size:
        return None
    flat = indices.reshape(-1).astype(np.int64)
    if (flat < 0).any() or (isinstance(shape[1], int) and (flat >= shape[1]).any()):
        return None  # ArrayFeatureExtractor's own error at run time, not Gather's wrap-around
    return x, flat, [afe, prod]


def _fuse_concat(rw: Rewrite, concat: onnx.NodeProto) -> None:
    axis = _attrs(concat).get("axis", 0)
    out_shape = rw.shape(concat.output[0])
    if axis not in (1, -1) or (out_shape is not None and len(out_shape) != 2):
        return
    columns = [_column(rw, name, concat) for name in concat.input]
    # Runs of consecutive columns over the same X with the same number of features.
    runs: list[list[_Column]] = []
    for column in columns:
        if column is not None and runs and runs[-1][-1] is not None and runs[-1][-1][0] == column[0] \
                and runs[-1][-1][1].size == column[1].size:
            runs[-1].append(column)
        else:
            runs.append([column])  # type: ignore[list-item]
    if not any(len(run) > 1 for run in runs):
        return
    new_nodes: list[onnx.NodeProto] = []
    pattern: list[onnx.NodeProto] = [concat]
    inputs: list[str] = []
    name_iter = iter(concat.input)
    for run in runs:
        if len(run) < 2 or run[0] is None:
            inputs.extend(next(name_iter) for _ in run)
            continue
        for _ in run:
            next(name_iter)
        x, j, k = run[0][0], run[0][1].size, len(run)
        base = f"{concat.output[0]}_products"
        indices = rw.add_initializer(f"{base}_indices", np.concatenate([c[1] for c in run]))
        target = rw.add_initializer(f"{base}_shape", np.array([0, k, j], np.int64))
        gathered, blocks, products = (rw.fresh_name(f"{base}_{what}") for what in ("gathered", "blocks", "values"))
        new_nodes.append(helper.make_node("Gather", [x, indices], [gathered], axis=1,
                                          name=rw.fresh_name(f"{base}_gather")))
        new_nodes.append(helper.make_node("Reshape", [gathered, target], [blocks],
                                          name=rw.fresh_name(f"{base}_reshape")))
        if rw.opset() >= 18:
            axes = rw.add_initializer(f"{base}_axes", np.array([2], np.int64))
            new_nodes.append(helper.make_node("ReduceProd", [blocks, axes], [products], keepdims=0,
                                              name=rw.fresh_name(f"{base}_prod")))
        else:
            new_nodes.append(helper.make_node("ReduceProd", [blocks], [products], axes=[2], keepdims=0,
                                              name=rw.fresh_name(f"{base}_prod")))
        inputs.append(products)
        pattern.extend(node for column in run for node in column[2])
    if not rw.claimable(pattern):
        return
    fused = helper.make_node("Concat", inputs, list(concat.output), name=concat.name)
    fused.attribute.extend(concat.attribute)
    rw.replace(pattern, [*new_nodes, fused])
