"""CPU overrides of the operator library's com.microsoft transformer operators
(:mod:`onyxrt_ops.contrib_transformer`).

Gelu, BiasGelu and FastGelu (what onnxruntime's optimizer and transformer optimizer write
for BERT's and GPT-2's GELU) take the CPU's compiled GELU passes for float32 — the erf form
through :func:`._special.gelu_float32_native`, the tanh form through
:func:`..native.gelu_tanh` — as the CPU's ai.onnx Gelu does; the library's kernels (with
float64 erf on the host) otherwise. Measured on a dynamically quantized 4-layer BERT saved
by onnxruntime: the four com.microsoft::Gelu nodes on [128, 3072] took 21.4 ms per run
through the library. Every other operator is the library's, bound over numpy in
``kernels/__init__``.
"""

from __future__ import annotations

import numpy as np

from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND
from ._special import gelu_float32_native

__all__ = ["Gelu", "BiasGelu", "FastGelu"]

_MS = "com.microsoft"
_TYPES = {"T": (np.float32, np.float16)}


def _compiled(x: np.ndarray, bias: np.ndarray | None, tanh_form: bool) -> np.ndarray | None:
    """GELU of ``x`` (+ ``bias``) by the compiled pass, or None where it does not apply."""
    if x.dtype != np.float32 or (bias is not None and bias.dtype != np.float32):
        return None
    v = np.ascontiguousarray(x if bias is None else x + bias)
    return native.gelu_tanh(v) if tanh_form else gelu_float32_native(v)


class _CompiledGelu:
    """``compute`` through :func:`_compiled`, the library's otherwise (mixed in below)."""

    def compute(self, x, bias=None):
        y = _compiled(x, bias, self.approximate == "tanh")  # type: ignore[attr-defined]
        return (y,) if y is not None else super().compute(x, bias)  # type: ignore[misc]


@registry.register("Gelu", since=1, domain=_MS, types=_TYPES)
class Gelu(_CompiledGelu, library.kernel("Gelu", 1, BACKEND, _MS)):
    """com.microsoft Gelu (erf form), compiled for float32."""


@registry.register("BiasGelu", since=1, domain=_MS, types=_TYPES)
class BiasGelu(_CompiledGelu, library.kernel("BiasGelu", 1, BACKEND, _MS)):
    """com.microsoft BiasGelu (erf form of x + bias), compiled for float32."""


@registry.register("FastGelu", since=1, domain=_MS, types=_TYPES)
class FastGelu(_CompiledGelu, library.kernel("FastGelu", 1, BACKEND, _MS)):
    """com.microsoft FastGelu (tanh form of x + the optional bias), compiled for float32."""
