"""The GPU providers' kernels (CUDA and ROCm share them): one module per operator family,
all in one registry, written against CuPy.

Importing this package imports every family module, whose decorators fill ``registry``,
then binds the operator library (:mod:`onyxrt_ops`) over CuPy
(:data:`._common.BACKEND`): every library operator the family modules did not register
themselves (their fused fast paths, which override the library's kernels) is registered
from the library, with its types narrowed to what CuPy holds. Kernels get CuPy from
:func:`onyxrt_gpu.cupy_loader.cupy_module` when they are built, so the same code runs on
the real CuPy (CUDA or HIP build) and on the simulated one.
"""

from __future__ import annotations

from onyxrt.kernels import KernelRegistry
from onyxrt_ops import library

registry = KernelRegistry("GPU (CUDA/ROCm)")

# Family modules register themselves on import; the order does not matter.
from . import (  # noqa: E402,F401
    activation,
    conv,
    elementwise,
    fused,
    indexing,
    linalg,
    normalization,
    pool,
    quantization,
    reduction,
    shape,
)
from ._common import BACKEND  # noqa: E402

# After the family modules: their kernels are the overrides ``bind`` leaves in place.
library.bind(BACKEND, registry)

_CONTROL_FLOW = ("control flow runs on the CPU provider, which reads conditions and trip "
                 "counts on the host; its bodies' nodes are placed on the GPU where they can run")
_CONTAINERS = "sequences and optionals are host containers of tensors; GPU kernels take tensors"

#: The CPU provider's operators the GPU providers leave to it, with the reason the placement
#: report gives for their nodes (Shape and Size: the provider's shape policy).
LEFT_TO_THE_CPU = {
    **dict.fromkeys(("If", "Loop", "Scan", "SequenceMap"), _CONTROL_FLOW),
    **dict.fromkeys(("SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase",
                     "SequenceInsert", "SequenceLength", "SplitToSequence", "ConcatFromSequence",
                     "Optional", "OptionalGetElement", "OptionalHasElement"), _CONTAINERS),
    **dict.fromkeys(("StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch"),
                    "CuPy holds no strings"),
    "ImageDecoder": "decoding image files (Pillow) is a host algorithm on host bytes",
    "TfIdfVectorizer": "n-gram matching walks each row's tokens on the host (onnxruntime's "
                       "CUDA provider has no kernel either)",
}
for _op, _reason in LEFT_TO_THE_CPU.items():
    registry.refuse(_op, _reason)

__all__ = ["registry", "LEFT_TO_THE_CPU"]
