"""The CPU provider's backend for the operator library (:mod:`onyxrt_ops`): numpy, every
element type numpy holds, the float64 ``erf`` of :mod:`._special` (numpy has none), and
``sigmoid``/``tanh`` as onnxruntime computes them in float32 (:func:`.native.logistic`,
bit-identical to its MLAS kernels where the compiled module is built), which the library's
recurrent operators take for their gates; ``tree_leaves``/``tree_scores``, the compiled
walk of the ai.onnx.ml tree ensembles (:func:`.native.tree_leaves`, and the leaves'
weights summed in it); ``row_product``, the compiled one-row product
(:func:`.native.one_row_product`) of the linear classifiers and their whole one-row
classification (``classify_row``, :func:`.native.classify_row`); ``softmax``, the compiled row
softmax their SOFTMAX post-transform takes (:func:`.native.softmax_last_axis`); and
``normalize_rows``, the Normalizer's compiled rows (:func:`.native.normalize_rows`); and
``pad``, Pad in one compiled pass (:func:`.native.pad`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt_ops import numpy_backend
from onyxrt_ops.activation import _sigmoid

from .. import native
from ._special import erf

__all__ = ["BACKEND", "sigmoid", "tanh"]

_F32 = np.dtype(np.float32)


def sigmoid(x: Any) -> Any:
    """Sigmoid: onnxruntime's float32 numerics where compiled, else the exact function."""
    if x.dtype == _F32:
        y = native.logistic(np.ascontiguousarray(x))
        if y is not None:
            return y
    return _sigmoid(np, x)


def tanh(x: Any) -> Any:
    """Tanh: onnxruntime's float32 numerics where compiled, else numpy's."""
    if x.dtype == _F32:
        y = native.tanh(np.ascontiguousarray(x))
        if y is not None:
            return y
    return np.tanh(x)


#: What the library's operators compute with on the CPU (bound in ``kernels/__init__``).
BACKEND = numpy_backend(extras={"erf": erf, "sigmoid": sigmoid, "tanh": tanh,
                                # only where compiled: the library walks the trees itself
                                **({"tree_leaves": native.tree_leaves, "tree_scores": native.tree_scores,
                                    "svm_rbf": native.svm_rbf, "svm_couple": native.svm_couple,
                                    "svm_decide": native.svm_decide, "unary_activation": native.unary_activation,
                                    "row_product": native.one_row_product,
                                    "classify_row": native.classify_row,
                                    "normalize_rows": native.normalize_rows,
                                    "softmax": native.softmax_last_axis,
                                    "pad": native.pad} if native.ENABLED else {})})
