"""The CPU provider's kernels: one module per operator family, all in one registry.

The family modules' decorators fill ``registry`` with the CPU's own kernels (compiled and
fused fast paths, which override the library's), and the operator library
(:mod:`onyxrt_ops`) bound over numpy supplies every other operator. Both happen per
operator, the first time a session asks for it: the family modules that register it are
imported (the generated ``_index.py`` says which; see :mod:`onyxrt.kernel_index`), then the
library's kernels for it are bound where the family modules left a version free. A
process thus imports the modules of the operators its models use, not all fifty.
"""

from __future__ import annotations

import importlib

from onyxrt.kernel_index import operators_by_module, render
from onyxrt.kernels import KernelRegistry
from onyxrt_ops import library

from ._backend import BACKEND

__all__ = ["registry", "FAMILIES", "render_index"]

registry = KernelRegistry("CPUExecutionProvider")

#: The family modules, each registering its kernels in ``registry`` when imported.
FAMILIES = (
    "activation", "contrib_misc", "contrib_nchwc", "contrib_quantization", "contrib_transformer",
    "controlflow", "conv", "detection", "elementwise", "fused", "image", "indexing", "linalg",
    "logical", "ml", "nchwc", "normalization", "pool", "quantization", "reduction", "resize",
    "rnn", "sequence", "shape", "signal", "text",
)


def _load_op(domain: str, op_type: str) -> None:
    """Register ``op_type``'s kernels: its family modules' first (the overrides), then the
    library's for the versions they leave."""
    from ._index import MODULES

    for name in MODULES.get((domain, op_type), ()):
        importlib.import_module(f"{__name__}.{name}")
    library.bind(BACKEND, registry, only=(domain, op_type))


def _load_all() -> None:
    """Register every kernel (for listings: ``definitions()``, the operator tables)."""
    for name in FAMILIES:
        importlib.import_module(f"{__name__}.{name}")
    library.bind(BACKEND, registry)


def render_index() -> str:
    """The text of this package's ``_index.py`` as the family modules register kernels now
    (see :mod:`onyxrt.kernel_index`); call in a fresh process."""
    return render("Which family modules of the CPU provider register kernels for each operator.",
                  {"MODULES": operators_by_module(__name__, FAMILIES)})


registry.load_on_demand(_load_op, _load_all)
