"""The CPU provider's kernels: one module per operator family, all in one registry.

Importing this package imports every family module, whose decorators fill ``registry``.
"""

from __future__ import annotations

from onyxrt.kernels import KernelRegistry

registry = KernelRegistry("CPUExecutionProvider")

# Family modules register themselves on import; the order does not matter.
from . import (  # noqa: E402,F401
    activation,
    controlflow,
    conv,
    detection,
    elementwise,
    fused,
    generator,
    image,
    indexing,
    linalg,
    logical,
    misc,
    ml,
    nchwc,
    normalization,
    pool,
    quantization,
    reduction,
    resize,
    rnn,
    sequence,
    shape,
    signal,
    text,
    training,
)

__all__ = ["registry"]
