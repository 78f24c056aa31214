"""What the passes share with the session: which operators they may produce, and where
the weights they create go.

Fused operators that standard ONNX lacks (``FusedConv``, ``FusedMatMul``, and ``Gelu`` or
``LayerNormalization`` below the opsets that define them) live in the ``ai.onyxrt``
domain. A provider runs them only if it registers kernels for them, so a fusion is
applied only when *every* provider of the session can run its result: a session whose
NPU compiles the plain operators keeps them plain.

Weights a pass computes (BatchNormalization folded into a Conv) stay numpy arrays in
:attr:`PassContext.arrays`; the model gets a tensor with their name, type and dims only,
so the bytes are not copied into the protobuf and back (the session hands the arrays to
its graph, and fills the bytes in only to save ``optimized_model_filepath``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import field

import numpy as np
import onnx

from ..records import record

__all__ = ["FUSED_DOMAIN", "FUSED_DOMAIN_VERSION", "Evaluate", "PassContext"]

FUSED_DOMAIN = "ai.onyxrt"
FUSED_DOMAIN_VERSION = 1


#: Runs a model without inputs and returns its outputs' values, in order; the mapping
#: holds the values of the model's initializers that carry no data (name → array).
Evaluate = Callable[[onnx.ModelProto, Mapping[str, np.ndarray]], Sequence[np.ndarray]]


def _everyone(domain: str, op_type: str) -> bool:
    return True


@record(frozen=True)
class PassContext:
    """The session's answers for the passes.

    ``can_run(domain, op_type)`` is true when every provider of the session has a kernel
    for the operator (in the fused domain, at :data:`FUSED_DOMAIN_VERSION`; in the
    default domain, at the model's opset). ``arrays`` receives the values of initializers
    the passes create (see the module docstring).

    ``evaluate(model, arrays)`` computes what constant folding folds. The session's runs the
    nodes on onyxrt's CPU provider with the optimizer off, so that folding computes
    exactly what running would; the session passes it in because it builds on the
    optimizer, not the other way round. Without one only ``Shape`` and ``Size`` of
    static shapes fold.
    """

    can_run: Callable[[str, str], bool] = _everyone
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    evaluate: Evaluate | None = None
    #: The session's shape inference (``model → model`` with value_info filled in): constant
    #: folding runs it again after each round that folded something, to a fixpoint.
    infer_shapes: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None
    #: Whether DequantizeLinear of constants (a QDQ model's weights) may fold into float
    #: constants: false when a provider of the session reads QDQ groups
    #: (:attr:`~onyxrt.protocol.ExecutionProvider.uses_qdq_groups`).
    fold_dequantized_weights: bool = False
    #: Whether every provider of the session runs QDQ groups as integer operators
    #: (:attr:`~onyxrt.protocol.ExecutionProvider.integer_qdq`).
    fuse_qdq_groups: bool = False
