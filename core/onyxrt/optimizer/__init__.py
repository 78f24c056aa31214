"""The graph optimizer: passes applied before partitioning, by ``graph_optimization_level``.

Levels follow onnxruntime's:

========================  ==================================================================
``ORT_DISABLE_ALL``       nothing (shape inference still runs)
``ORT_ENABLE_BASIC``      Constant nodes → initializers, Identity/Dropout removal, constant
                          folding (incl. Shape of static shapes) alternating with shape
                          inference to a fixpoint, Cast folding, zero Pad → Conv/AveragePool
                          pads, Conv + BatchNormalization folding, common subexpression
                          elimination (after the fusions), dead-node elimination —
                          standard ONNX in, standard ONNX out
``ORT_ENABLE_EXTENDED``   fusions: Conv [+ residual Add] + activation → FusedConv;
                          [Transpose →] MatMul [→ scale] [→ bias] → Gemm / FusedMatMul;
                          layer normalization and GELU patterns → LayerNormalization, Gelu;
                          DynamicQuantizeLinear → MatMulInteger → Cast → Mul [→ bias] →
                          com.microsoft MatMulIntegerToFloat / DynamicQuantizeMatMul;
                          Gemm → activation → FusedGemm; skl2onnx's PolynomialFeatures
                          columns (ArrayFeatureExtractor → ReduceProd, ~2 nodes a column)
                          → Gather → Reshape → ReduceProd per run of columns;
                          opt-in (``session.extra_optimizers``): groups of float32
                          elementwise operators → FusedElementwise
``ORT_ENABLE_LAYOUT``     float32 convolutions to the blocked channel layout NCHWc (16 channels
                          per vector; :mod:`.layout`), where the CPU provider offers its
                          NCHWc kernels (compiled, on a CPU with AVX-512)
``ORT_ENABLE_ALL``        everything above (the default)
========================  ==================================================================

Every pass takes an ``onnx.ModelProto`` and returns it (edited in place) with outputs
unchanged up to float rounding; each has an equivalence test in ``tests/test_optimizer.py``.
Structural passes run first, then shape inference (the session's, which keeps big weights
out of the copy), then the type-aware passes and fusions, which read the inferred types.
Fused operators outside standard ONNX are produced only when every provider of the session
can run them (:class:`PassContext`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Set

import onnx

from ..records import record
from ..session_options import GraphOptimizationLevel
from .cleanup import eliminate_dead_nodes, eliminate_identities, fold_casts, fold_constant_nodes
from .common_subexpressions import eliminate_common_subexpressions
from .constant_folding import fold_constants
from .conv_fusions import fold_batch_norm_into_conv, fuse_conv_activation, fuse_gemm_activation
from .elementwise_fusion import fuse_elementwise
from .feature_products import fuse_feature_products
from .layout import convert_to_nchwc
from .matmul_fusions import fuse_matmul
from .pad_fusion import fuse_pad
from .quantization_fusions import fuse_integer_matmul, fuse_matmul_nbits_bias, fuse_qdq_groups
from .support import FUSED_DOMAIN, FUSED_DOMAIN_VERSION, PassContext
from .transformer_fusions import fuse_gelu, fuse_layer_norm

__all__ = [
    "optimize", "Pass", "PASSES", "OPT_IN", "STRUCTURAL_PASSES", "PassContext", "FUSED_DOMAIN",
    "FUSED_DOMAIN_VERSION", "ONNXRUNTIME_OPTIMIZER_NAMES", "passes_named",
]


@record(frozen=True)
class Pass:
    """One optimization: its name (for logs and tests), level, and function."""

    name: str
    level: GraphOptimizationLevel
    run: Callable[[onnx.ModelProto, PassContext], onnx.ModelProto]
    #: Off unless the session names it (``session.extra_optimizers``): passes whose result
    #: onnxruntime users would see differ from onnxruntime's (per-node profiles and
    #: provider assignments of graphs onnxruntime leaves as they are).
    opt_in: bool = False


def _plain(fn: Callable[[onnx.ModelProto], onnx.ModelProto]) -> Callable[[onnx.ModelProto, PassContext], onnx.ModelProto]:
    return lambda model, ctx: fn(model)


BASIC = GraphOptimizationLevel.ORT_ENABLE_BASIC
EXTENDED = GraphOptimizationLevel.ORT_ENABLE_EXTENDED
LAYOUT = GraphOptimizationLevel.ORT_ENABLE_LAYOUT

# Before shape inference: passes that need no types (and make inference cheaper).
STRUCTURAL_PASSES: tuple[Pass, ...] = (
    Pass("fold_constant_nodes", BASIC, _plain(fold_constant_nodes)),
    Pass("eliminate_identities", BASIC, _plain(eliminate_identities)),
)

# After shape inference, in order.
PASSES: tuple[Pass, ...] = (
    # Before constant folding, which would dequantize the QDQ groups' weights into floats.
    Pass("fuse_qdq_groups", EXTENDED, fuse_qdq_groups),
    Pass("fold_constants", BASIC, fold_constants),
    Pass("fold_casts", BASIC, _plain(fold_casts)),
    Pass("fuse_pad", BASIC, fuse_pad),
    Pass("fold_batch_norm_into_conv", BASIC, fold_batch_norm_into_conv),
    Pass("fuse_layer_norm", EXTENDED, fuse_layer_norm),
    Pass("fuse_gelu", EXTENDED, fuse_gelu),
    Pass("fuse_matmul", EXTENDED, fuse_matmul),
    Pass("fuse_integer_matmul", EXTENDED, fuse_integer_matmul),
    Pass("fuse_matmul_nbits_bias", EXTENDED, fuse_matmul_nbits_bias),
    Pass("fuse_gemm_activation", EXTENDED, fuse_gemm_activation),
    Pass("fuse_conv_activation", EXTENDED, fuse_conv_activation),
    Pass("fuse_feature_products", EXTENDED, fuse_feature_products),
    Pass("fuse_elementwise", EXTENDED, fuse_elementwise, opt_in=True),
    Pass("convert_to_nchwc", LAYOUT, convert_to_nchwc),
    # After the fusions: merging two readers' inputs into one value would stop the
    # patterns that want a value read once.
    Pass("eliminate_common_subexpressions", BASIC, _plain(eliminate_common_subexpressions)),
    Pass("eliminate_dead_nodes", BASIC, _plain(eliminate_dead_nodes)),
)


#: Passes that run only when the session names them (``session.extra_optimizers``).
OPT_IN: frozenset[str] = frozenset(p.name for p in PASSES if p.opt_in)

#: onnxruntime's names of its graph transformers (``InferenceSession(...,
#: disabled_optimizers=[...])``) → the passes here that do that work. Names onnxruntime has
#: and onyxrt has no pass for disable nothing.
ONNXRUNTIME_OPTIMIZER_NAMES: dict[str, tuple[str, ...]] = {
    "ConstantFolding": ("fold_constant_nodes", "fold_constants"),
    "EliminateIdentity": ("eliminate_identities",),
    "EliminateDropout": ("eliminate_identities",),
    "CastElimination": ("fold_casts",),
    "CommonSubexpressionElimination": ("eliminate_common_subexpressions",),
    "ConvBNFusion": ("fold_batch_norm_into_conv",),
    "PadFusion": ("fuse_pad",),
    "LayerNormFusion": ("fuse_layer_norm",),
    "SimplifiedLayerNormFusion": ("fuse_layer_norm",),
    "GeluFusion": ("fuse_gelu",),
    "BiasGeluFusion": ("fuse_gelu",),
    "FastGeluFusion": ("fuse_gelu",),
    "MatMulAddFusion": ("fuse_matmul",),
    "MatMulScaleFusion": ("fuse_matmul",),
    "TransposeMatMulFusion": ("fuse_matmul",),
    "GemmActivationFusion": ("fuse_gemm_activation",),
    "ConvActivationFusion": ("fuse_conv_activation",),
    "MatMulIntegerToFloatFusion": ("fuse_integer_matmul",),
    "DynamicQuantizeMatMulFusion": ("fuse_integer_matmul",),
    "ConvAddActivationFusion": ("fuse_conv_activation",),
    "NchwcTransformer": ("convert_to_nchwc",),
    "QDQSelectorActionTransformer": ("fuse_qdq_groups",),
}


def passes_named(names: Iterable[str]) -> tuple[set[str], list[str]]:
    """The passes ``names`` stand for (onyxrt's pass names, or onnxruntime's transformer
    names), and the names that match nothing here."""
    own = {p.name for p in (*STRUCTURAL_PASSES, *PASSES)}
    found: set[str] = set()
    unknown: list[str] = []
    for name in names:
        if name in own:
            found.add(name)
        elif name in ONNXRUNTIME_OPTIMIZER_NAMES:
            found.update(ONNXRUNTIME_OPTIMIZER_NAMES[name])
        else:
            unknown.append(name)
    return found, unknown


def optimize(
    model: onnx.ModelProto,
    level: GraphOptimizationLevel,
    infer_shapes: Callable[[onnx.ModelProto], onnx.ModelProto],
    ctx: PassContext | None = None,
    disabled: Set[str] = frozenset(),
    extra: Set[str] = frozenset(),
) -> onnx.ModelProto:
    """Apply every pass enabled at ``level`` and not named in ``disabled`` (an opt-in pass
    only when named in ``extra``); returns the shape-inferred result.

    ``infer_shapes`` runs once, between the structural passes and the others, whose
    rewrites keep the inferred types of the values they keep (fused nodes write the
    values their pattern's last node wrote).
    """
    ctx = ctx or PassContext()
    for p in STRUCTURAL_PASSES:
        if level >= p.level and p.name not in disabled:
            model = p.run(model, ctx)
    model = infer_shapes(model)
    for p in PASSES:
        if level >= p.level and p.name not in disabled and (not p.opt_in or p.name in extra):
            model = p.run(model, ctx)
    return model
