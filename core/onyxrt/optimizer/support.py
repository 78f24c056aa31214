"""What the fusion passes may produce: the fused-operator domain and the session's say.

Fused operators that standard ONNX lacks (``FusedConv``, ``FusedMatMul``, and ``Gelu`` or
``LayerNormalization`` below the opsets that define them) live in the ``ai.onyxrt``
domain. A provider runs them only if it registers kernels for them, so a fusion is
applied only when *every* provider of the session can run its result: a session whose
NPU compiles the plain operators keeps them plain (see :class:`FusionContext`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FUSED_DOMAIN", "FUSED_DOMAIN_VERSION", "FusionContext"]

FUSED_DOMAIN = "ai.onyxrt"
FUSED_DOMAIN_VERSION = 1


def _everyone(domain: str, op_type: str) -> bool:
    return True


@dataclass(frozen=True)
class FusionContext:
    """The session's answer to "may a pass produce this operator?".

    ``can_run(domain, op_type)`` is true when every provider of the session has a kernel
    for the operator (in the fused domain, at :data:`FUSED_DOMAIN_VERSION`; in the
    default domain, at the model's opset).
    """

    can_run: Callable[[str, str], bool] = _everyone
