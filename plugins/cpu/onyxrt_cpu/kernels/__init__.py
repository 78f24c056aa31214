"""The CPU provider's kernels: one module per operator family, all in one registry.

Importing this package imports every family module, whose decorators fill ``registry``,
then binds the operator library (:mod:`onyxrt_ops`) over numpy: every library operator
the family modules did not register themselves (their CPU fast paths, which override the
library's kernels) is registered from the library.
"""

from __future__ import annotations

from onyxrt.kernels import KernelRegistry
from onyxrt_ops import library

registry = KernelRegistry("CPUExecutionProvider")

# Family modules register themselves on import; the order does not matter.
from . import (  # noqa: E402,F401
    activation,
    contrib_misc,
    contrib_nchwc,
    contrib_quantization,
    contrib_transformer,
    controlflow,
    conv,
    detection,
    elementwise,
    fused,
    image,
    indexing,
    linalg,
    logical,
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
)
from ._backend import BACKEND  # noqa: E402

# After the family modules: their kernels are the overrides ``bind`` leaves in place.
library.bind(BACKEND, registry)

__all__ = ["registry"]
