"""onyxrt's operator library: each ONNX operator written once, against an array namespace.

A provider that computes with numpy, CuPy or any array-API library does not write its own
copy of every operator: it describes its array library as a
:class:`~onyxrt_ops.backend.Backend` (the namespace, the element types it holds, the few
functions beyond the standard it offers, such as ``erf``) and binds the library into its
kernel registry, after registering its own fast paths (compiled, fused) as overrides::

    from onyxrt_ops import library, numpy_backend

    backend = numpy_backend(extras={"erf": my_erf})

    @registry.register("Softmax", since=(1, 11, 13))
    class Softmax(library.kernel("Softmax", 13, backend)):
        def along(self, x, axis):
            y = compiled_softmax(x, axis)          # None when it does not apply
            return y if y is not None else super().along(x, axis)

    library.bind(backend, registry)                # every other operator

The family modules define their operators in :data:`library` when imported; the package
imports each the first time a provider asks for one of its operators (the generated
``_index.py`` says which module defines which operator: see :mod:`onyxrt.kernel_index`):

* :mod:`onyxrt_ops.activation` — activations and the softmax family;
* :mod:`onyxrt_ops.elementwise` — arithmetic, math functions, Max/Min/Sum/Mean, bitwise,
  BitCast (over the backend's ``bitcast`` byte view);
* :mod:`onyxrt_ops.logical` — comparisons, boolean logic and Where;
* :mod:`onyxrt_ops.shape` — Reshape, Transpose, Concat, Split, Pad, Tile, Expand and the
  other data-movement operators;
* :mod:`onyxrt_ops.indexing` — Slice, Gather*, Scatter*, OneHot, NonZero, Unique;
* :mod:`onyxrt_ops.reduction` — Reduce*, ArgMax/ArgMin, CumSum;
* :mod:`onyxrt_ops.normalization` — BatchNormalization, LayerNormalization and the rest;
* :mod:`onyxrt_ops.linalg` — MatMul, Gemm, MatMulInteger, Det, Einsum (over the backend's
  ``einsum``);
* :mod:`onyxrt_ops.spatial` — convolutions and pooling;
* :mod:`onyxrt_ops.resize` — Resize, Upsample;
* :mod:`onyxrt_ops.quantization` — QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
  QLinearMatMul;
* :mod:`onyxrt_ops.recurrent` — RNN, GRU, LSTM;
* :mod:`onyxrt_ops.generator` — Constant, ConstantOfShape, EyeLike, Range, random numbers
  (RandomNormal, RandomUniform, their ``*Like`` forms, Multinomial, Bernoulli);
* :mod:`onyxrt_ops.signal` — DFT, STFT, MelWeightMatrix;
* :mod:`onyxrt_ops.detection` — GridSample, RoiAlign, NonMaxSuppression, Col2Im, MaxUnpool,
  DeformConv;
* :mod:`onyxrt_ops.training` — the ai.onnx.preview.training optimizers Adam, Adagrad,
  Momentum;
* :mod:`onyxrt_ops.ml` — the whole ai.onnx.ml domain (linear models, SVMs, tree
  ensembles, ZipMap, encoders, scalers), with its map and sequence-of-map values;
* :mod:`onyxrt_ops.contrib_transformer` — com.microsoft attention, layer norms, the Gelu
  family, rotary embeddings (what onnxruntime's transformer optimizer emits);
* :mod:`onyxrt_ops.contrib_quantization` — com.microsoft quantized operators (QLinear*,
  QGemm, MatMulIntegerToFloat, DynamicQuantizeMatMul, MatMulNBits, GatherBlockQuantized);
* :mod:`onyxrt_ops.contrib_misc` — the fused operators onnxruntime's graph optimizer
  writes (FusedConv, FusedGemm, FusedMatMul...), the other com.microsoft operators and
  the old experimental default-domain ones;
* :mod:`onyxrt_ops.contrib_nchwc` — com.microsoft.nchwc, onnxruntime's blocked layout.

Not in the library (provider kernels, with the reason in their module): operators the
array API standard cannot express (strings, float8/sub-byte quantization and casts), and
control flow and sequences (the core's). onnxruntime's CPU operators still missing are
listed with their reason in docs/operators.md.
"""

from __future__ import annotations

import importlib
import threading

from onyxrt.kernel_index import operators_by_module, render
from onyxrt.kernels import declare_signature

from .backend import Backend, namespace_backend, numpy_backend
from .library import OpKernel, OpLibrary, library

__all__ = ["Backend", "numpy_backend", "namespace_backend", "OpKernel", "OpLibrary", "library",
           "FAMILIES", "render_index"]

#: The family modules, each defining its operators in ``library`` when imported.
FAMILIES = (
    "activation", "contrib_generation", "contrib_llm", "contrib_misc", "contrib_moe",
    "contrib_nchwc", "contrib_quantization", "contrib_transformer", "detection", "elementwise",
    "generator", "indexing", "linalg", "logical", "ml", "normalization", "quantization",
    "recurrent", "reduction", "resize", "shape", "signal", "spatial", "training",
)

_lock = threading.Lock()
_loaded: set[tuple[str, str]] = set()
_all_loaded = False


def _load_op(domain: str, op_type: str) -> None:
    """Import the family modules that define ``op_type`` (per the generated index)."""
    if _all_loaded or (domain, op_type) in _loaded:
        return
    from ._index import MODULES

    for name in MODULES.get((domain, op_type), ()):
        importlib.import_module(f"{__name__}.{name}")
    with _lock:
        _loaded.add((domain, op_type))


def _load_all() -> None:
    """Import every family module."""
    global _all_loaded
    if not _all_loaded:
        for name in FAMILIES:
            importlib.import_module(f"{__name__}.{name}")
        _all_loaded = True


def render_index() -> str:
    """The text of this package's ``_index.py`` as the family modules define it now (see
    :mod:`onyxrt.kernel_index`); call in a fresh process."""
    modules = operators_by_module(__name__, FAMILIES)
    signatures = {(d.domain, d.op_type): d.signature for d in library._defs if d.signature is not None}
    return render("Which family module of the operator library defines each operator, and the "
                  "type-constraint signatures of the operators onnx has no schema for.",
                  {"MODULES": modules, "SIGNATURES": dict(sorted(signatures.items()))})


def _declare_signatures() -> None:
    """Declare the operators onnx has no schema for before their modules are imported: the
    model loader accepts their nodes (``SimplifiedLayerNormalization``...) by them."""
    try:
        from ._index import SIGNATURES
    except ImportError:  # the index is being generated
        return
    for (domain, op_type), (inputs, outputs) in SIGNATURES.items():
        declare_signature(domain, op_type, inputs, outputs)


# Family modules are imported when a provider first asks for one of their operators.
library.load_on_demand(_load_op, _load_all)
_declare_signatures()
