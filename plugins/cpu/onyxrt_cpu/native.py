"""The CPU provider's compiled inner loops, when they were built (``onyxrt_cpu._native``).

numpy runs a 3x3 depthwise convolution, an im2col, a conv epilogue (bias + residual +
activation), a max pool, GELU, a row-wise Softmax or LayerNormalization as several
whole-array passes, many of them over short rows; the C extension runs each as one
vectorized pass (and the transforms of :mod:`onyxrt_cpu.kernels.winograd`), split over
the thread pool it shares with OpenBLAS (:mod:`onyxrt_cpu.blas_threads`). It also has a
GEMM for products with a constant operand, packed once, that applies the epilogue to
each tile before storing it (:func:`gemm`). It is built by ``pip install`` when a C
compiler is present (setup.py) and is optional: without it, or with
``ONYXRT_CPU_NATIVE=0`` in the environment, every kernel runs its numpy path, which
computes the same values (the tests compare the two).

The wrappers below take numpy arrays, check what the C code requires (float32,
C-contiguous, shapes that agree) and return ``False``/``None`` when a call does not
qualify, so callers keep their numpy path as the general case. The C functions validate
their buffers again and never read or write out of bounds.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from math import prod
from typing import Any

import numpy as np

from onyxrt.records import record

__all__ = [
    "AVAILABLE",
    "ENABLED",
    "UNAVAILABLE_REASON",
    "ACT_NONE",
    "ACT_RELU",
    "ACT_CLIP",
    "ACT_LEAKY",
    "status",
    "gelu_erf",
    "gelu_tanh",
    "logistic",
    "tanh",
    "RECURRENT",
    "recurrent",
    "recurrent_panels",
    "column_panels",
    "quantize8",
    "dequantize8",
    "dequantize4",
    "accumulators_to_float",
    "tree_leaves",
    "tree_scores",
    "elementwise_group",
    "PackedInt8",
    "QGEMM",
    "pack_int8",
    "qgemm_u8s8",
    "qgemm_float",
    "where_scalar",
    "qconv",
    "qlinear_add",
    "qconv_depthwise",
    "epilogue",
    "epilogue_ready",
    "depthwise2d",
    "im2col2d",
    "maxpool2d",
    "window_geometry",
    "winograd_input",
    "winograd_output",
    "softmax_last_axis",
    "layernorm_last_axis",
    "share_with_blas",
    "threads",
    "HAS_AVX512",
    "GEMM_PREFERRED",
    "NCHWC_WIDE_TILES",
    "NCHWC_ENABLED",
    "PackedMatrix",
    "pack_gemm_a",
    "pack_gemm_b",
    "transposed",
    "gemm",
    "GEMV_MAX_WEIGHTS",
    "one_row_product",
    "classify_row",
    "dequantize4_packed",
    "normalize_rows",
    "RowProduct",
    "NCHWC_BLOCK",
    "compiled_module",
    "pack_nchwc_filters",
    "pack_nchwc_depthwise",
    "pad_channels",
    "nchwc_conv",
    "NchwcRunner",
    "nchwc_runner",
    "nchwc_depthwise",
    "nchwc_maxpool",
    "nchwc_global_average",
    "to_nchwc",
    "from_nchwc",
]

_native: Any
try:
    _native = importlib.import_module("onyxrt_cpu._native")
except ImportError as exc:  # not built: no compiler at install time, or ONYXRT_CPU_PURE=1
    _native = None
    # A plain reinstall does not bring the compiled build back: pip reuses the numpy-only
    # wheel it built and cached (tagged for this platform, as a compiled one would be).
    # Without the cache and with a compiler present it builds the extension again, or
    # picks a binary wheel where one is published for this platform.
    UNAVAILABLE_REASON: str | None = (
        f"onyxrt_cpu._native is not built ({exc}); to get the compiled kernels: pip install "
        "--force-reinstall --no-cache-dir --no-deps onyxrt-cpu (pip compiles them where a C "
        "compiler is present, or takes a binary wheel where one is published)"
    )
else:
    UNAVAILABLE_REASON = None

#: Whether the compiled module is importable.
AVAILABLE = _native is not None


def compiled_module() -> Any:
    """The compiled module itself (None when it is not built)."""
    return _native
#: Whether kernels use it: importable and not switched off by ``ONYXRT_CPU_NATIVE=0``.
#: Tests flip this to run the numpy paths.
ENABLED = AVAILABLE and os.environ.get("ONYXRT_CPU_NATIVE", "1") != "0"

# Activation codes of :func:`epilogue`: the C module's enum (fixed values without it).
ACT_NONE, ACT_RELU, ACT_CLIP, ACT_LEAKY = (
    (_native.ACT_NONE, _native.ACT_RELU, _native.ACT_CLIP, _native.ACT_LEAKY)
    if _native is not None
    else (0, 1, 2, 3)
)

_F32 = np.dtype(np.float32)
_F64 = np.dtype(np.float64)

#: Whether this CPU has AVX-512 (the compiled module's answer; False without the module):
#: the register tiles of the compiled GEMM and NCHWc convolutions are sized for it.
HAS_AVX512 = AVAILABLE and bool(_native.gemm_info()[3])

#: Whether models' float32 GEMMs go to the compiled GEMM (csrc/gemm.c) rather than BLAS:
#: where its kernel is at its best, a CPU with AVX-512 (with AVX2 alone it is correct but
#: slower than OpenBLAS). Tests flip this to run either path.
GEMM_PREFERRED = ENABLED and HAS_AVX512

#: Whether NCHWc convolutions use the register tiles sized for AVX-512's 32 registers of
#: 16 floats (up to 24 accumulators) or the narrow ones (6; csrc/nchwc.c's conv_row): by
#: the CPU. Both are correct anywhere; tests flip this to run either path.
NCHWC_WIDE_TILES = ENABLED and HAS_AVX512


def _nchwc_enabled(has_avx512: bool) -> bool:
    setting = os.environ.get("ONYXRT_CPU_NCHWC", "")
    if not ENABLED or setting == "0":
        return False
    return setting == "1" or has_avx512


#: Whether the CPU provider offers the NCHWc kernels, so that the layout pass converts
#: convolution chains: with the compiled module, on a CPU with AVX-512. Without AVX-512
#: they run 2-2.6x slower than the NCHW kernels on OpenBLAS (MobileNetV2 27.9 against 11.8
#: ms, ResNet-50 183 against 69, an AVX2 build on this machine), so models stay in NCHW.
#: ``ONYXRT_CPU_NCHWC=1`` offers them anyway (CI's tests, on whatever CPU), ``=0`` never.
NCHWC_ENABLED = _nchwc_enabled(HAS_AVX512)


def status() -> str:
    """One line for ``onyxrt providers``: which kernels this install runs."""
    if not AVAILABLE:
        return f"numpy kernels only: {UNAVAILABLE_REASON}"
    if not ENABLED:
        return "compiled kernels built, switched off by ONYXRT_CPU_NATIVE=0"
    gemm = ("GEMM for constant operands" if GEMM_PREFERRED
            else "GEMM built but not used: this CPU has no AVX-512")
    nchwc = ("NCHWc convolutions" if NCHWC_ENABLED
             else "NCHWc convolutions off: " + ("ONYXRT_CPU_NCHWC=0" if os.environ.get("ONYXRT_CPU_NCHWC") == "0"
                                                else "this CPU has no AVX-512"))
    int8 = "int8 GEMM (AVX-512 VNNI)" if QGEMM else "no int8 GEMM (this CPU has no AVX-512 VNNI)"
    return ("compiled kernels (depthwise conv, im2col, Winograd 3x3 conv, conv epilogue, "
            f"MaxPool, GELU, Softmax, LayerNormalization, Sigmoid/Tanh, RNN/GRU/LSTM recurrences, one-row GEMV, tree walks; {nchwc}; {gemm}; {int8}) enabled")


def _ready(*arrays: np.ndarray | None) -> bool:
    """Whether the extension is on and every given array is C-contiguous float32."""
    if not ENABLED:
        return False
    for a in arrays:
        if a is not None and (a.dtype != _F32 or not a.flags.c_contiguous):
            return False
    return True


def gelu_erf(
    x: np.ndarray, coefficients: np.ndarray, clamp: float, t_scale: float, scale: float
) -> np.ndarray | None:
    """``x * (0.5 + 0.5 erf(x * scale))`` with erf the float32 polynomial of
    :func:`~onyxrt_cpu.kernels._special.erf_float32` (its coefficients, clamp and
    ``t_scale = 2 / clamp**2``), in one pass; ``None`` when ``x`` does not qualify."""
    if not _ready(x, coefficients) or coefficients.size != _native.ERF_COEFFS:
        return None
    y = np.empty_like(x)
    _native.gelu_erf(x, y, coefficients, clamp, t_scale, scale)
    return y


def erf32(x: np.ndarray, coefficients: np.ndarray, clamp: float, t_scale: float) -> np.ndarray | None:
    """erf of a float32 array by :func:`~onyxrt_cpu.kernels._special.erf_float32`'s
    polynomial and operations (the same bits) in one pass; ``None`` when ``x`` does not
    qualify."""
    if not _ready(x, coefficients) or coefficients.size != _native.ERF_COEFFS or not hasattr(_native, "erf32"):
        return None
    y = np.empty_like(x)
    _native.erf32(x, y, coefficients, clamp, t_scale)
    return y


#: unary_activation's kinds (csrc/activation.c's UNARY_*).
UNARY_KINDS = {"LeakyRelu": 0, "HardSigmoid": 1, "HardSwish": 2, "ThresholdedRelu": 3, "Clip": 4}


def unary_activation(x: np.ndarray, op: str, alpha: float = 0.0, beta: float = 0.0) -> np.ndarray | None:
    """LeakyRelu, HardSigmoid, HardSwish, ThresholdedRelu or Clip (``op``) of a float32
    array in one pass, with the operator library's operations in its order (alpha, beta as
    float32; Clip's bounds, not NaN: maximum then minimum); ``None`` when ``x`` does not
    qualify or ``op`` is not one of those."""
    kind = UNARY_KINDS.get(op)
    if kind is None or not _ready(x) or not hasattr(_native, "unary_activation"):
        return None
    y = np.empty_like(x)
    _native.unary_activation(x, y, kind, alpha, beta)
    return y


def logistic(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """Sigmoid of a float32 array as onnxruntime's CPU provider computes it (MLAS's rational
    approximation with fused multiply-adds: bit-identical results), into ``out`` (may be
    ``x``); ``None`` when ``x`` does not qualify."""
    return _logistic_tanh(x, out, False)


def tanh(x: np.ndarray, out: np.ndarray | None = None) -> np.ndarray | None:
    """Tanh of a float32 array as onnxruntime's CPU provider computes it (see
    :func:`logistic`); ``None`` when ``x`` does not qualify."""
    return _logistic_tanh(x, out, True)


def _logistic_tanh(x: np.ndarray, out: np.ndarray | None, is_tanh: bool) -> np.ndarray | None:
    if not _ready(x) or not hasattr(_native, "logistic_tanh"):
        return None
    y = np.empty_like(x) if out is None else out
    _native.logistic_tanh(x, y, is_tanh)
    return y


_INT8_TYPES = (np.dtype(np.int8), np.dtype(np.uint8))


def _per_tensor(scale: np.ndarray, zero_point: np.ndarray | None, dtype: np.dtype[Any]) -> tuple[float, int] | None:
    """(scale, zero point) of a per-tensor float32 scale and ``dtype`` zero point, or None."""
    if scale.size != 1 or scale.dtype != _F32 or not ENABLED or not hasattr(_native, "quantize8"):
        return None
    if zero_point is not None and (zero_point.size != 1 or zero_point.dtype != dtype):
        return None
    return float(scale.reshape(())), 0 if zero_point is None else int(zero_point.reshape(()))


def quantize8(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None, out: np.dtype[Any]) -> np.ndarray | None:
    """Per-tensor QuantizeLinear of a float32 ``x`` into int8/uint8 ``out`` as onnxruntime
    computes it (true division, half to even, saturation, NaN to the lowest value), in one
    pass; ``None`` when the call does not qualify."""
    params = _per_tensor(scale, zero_point, out) if out in _INT8_TYPES and x.dtype == _F32 else None
    if params is None:
        return None
    y = np.empty(x.shape, out)
    _native.quantize8(np.ascontiguousarray(x), y, params[0], params[1], out == np.int8, False)
    return y


def dequantize8(x: np.ndarray, scale: np.ndarray, zero_point: np.ndarray | None) -> np.ndarray | None:
    """Per-tensor DequantizeLinear of an int8/uint8 ``x`` into float32 in one pass; ``None``
    when the call does not qualify."""
    params = _per_tensor(scale, zero_point, x.dtype) if x.dtype in _INT8_TYPES else None
    if params is None:
        return None
    y = np.empty(x.shape, _F32)
    _native.quantize8(np.ascontiguousarray(x), y, params[0], params[1], x.dtype == np.int8, True)
    return y


def elementwise_group(inputs: tuple[np.ndarray, ...], kinds: tuple[int, ...], y: np.ndarray,
                      program: np.ndarray, row: int) -> None:
    """FusedElementwise's ``program`` (int32 [steps, 3]: step code, operand, operand or -1)
    over float32 ``inputs`` (C-contiguous; ``kinds``: 0 a tensor of ``y``'s size, 1 one
    value, 2 one value per position of the last axis, of length ``row``) into ``y`` in one
    pass. See csrc/elementwise_group.c."""
    _native.elementwise_group(inputs, kinds, y, program, row)


def tree_leaves(x: np.ndarray, forest: Any) -> np.ndarray | None:
    """The leaf each (sample, tree) of ``x`` (N, features) reaches in ``forest`` (an
    :class:`onyxrt_ops.ml` forest: roots, feature, split, mode, true/false ids and leaf
    flags, missing_true), as int64 (N, trees); ``None`` when the call does not qualify
    (module not built, BRANCH_MEMBER nodes). ``ValueError`` for a walk that leaves the
    nodes or loops."""
    held = _held_forest(x, forest, None)
    if held is None:
        return None
    return _run_forest(held, x, np.empty((x.shape[0], len(forest.roots)), np.int64))


def tree_scores(x: np.ndarray, forest: Any, weights: np.ndarray) -> np.ndarray | None:
    """Each row's sum over the trees of the weights (float32 (leaves, targets)) of the
    leaves it reaches, in tree order and in float32 — the sum of the gathered weights
    :func:`tree_leaves` leads to, without the (N, trees, targets) gather; ``None`` where
    the call does not qualify (as :func:`tree_leaves`)."""
    leaves = forest.weight.shape[0]
    if weights.dtype != _F32 or weights.shape != (leaves, forest.n_targets) or not leaves:
        return None
    held = _held_forest(x, forest, weights)
    if held is None:
        return None
    return _run_forest(held, x, np.empty((x.shape[0], forest.n_targets), _F32))


def svm_rbf(x: np.ndarray, sv_t: np.ndarray, gamma: float) -> np.ndarray | None:
    """The RBF kernel values exp(-gamma * |x_n - v|^2) (N, V) of float32 ``x`` (N, F) and
    the support vectors transposed, ``sv_t`` (F, V) float32 C-contiguous; each squared
    distance summed feature by feature, as onnxruntime sums it. ``None`` when the call
    does not qualify. See csrc/svm.c."""
    if (not ENABLED or not hasattr(_native, "svm_rbf") or x.dtype != _F32 or sv_t.dtype != _F32
            or x.ndim != 2 or sv_t.ndim != 2 or x.shape[1] != sv_t.shape[0]):
        return None
    out = np.empty((x.shape[0], sv_t.shape[1]), _F32)
    _native.svm_rbf(np.ascontiguousarray(x), np.ascontiguousarray(sv_t), out, x.shape[0], x.shape[1],
                    sv_t.shape[1], gamma)
    return out


def svm_couple(p: np.ndarray, classes: int, eps: float, platt: tuple[np.ndarray, np.ndarray] | None = None
               ) -> np.ndarray | None:
    """libsvm's pairwise coupling, as onnxruntime runs it: the class probabilities (N, C)
    float32 of the pair probabilities ``p`` (N, C (C - 1) / 2) float32 (pairs (i, j), i < j,
    in order), iterated until no class is off by ``eps`` (at most max(100, C) rounds).
    With ``platt`` (a, b), ``p`` holds decision values, made pair probabilities first as
    onnxruntime's ``sigmoid_probability``: 1 - logistic(s a + b) within [1e-7, 1 - 1e-7].
    ``None`` when the call does not qualify. See csrc/svm.c."""
    pairs = classes * (classes - 1) // 2
    if (not ENABLED or not hasattr(_native, "svm_couple") or p.dtype != _F32 or p.ndim != 2
            or classes < 2 or p.shape[1] != pairs):
        return None
    out = np.empty((p.shape[0], classes), _F32)
    if platt is None:
        _native.svm_couple(np.ascontiguousarray(p), out, p.shape[0], classes, eps)
    else:
        a, b = (np.ascontiguousarray(v[:pairs], dtype=_F32) for v in platt)
        if a.size != pairs or b.size != pairs:
            return None
        _native.svm_couple(np.ascontiguousarray(p), out, p.shape[0], classes, eps, a, b)
    return out


def svm_decide(k: np.ndarray, weights_t: np.ndarray, rho: np.ndarray, pair_i: np.ndarray, pair_j: np.ndarray,
               classes: int) -> tuple[np.ndarray, np.ndarray] | None:
    """One-vs-one SVM decisions: the decision values (N, pairs) float32 — each pair's
    weights (``weights_t`` (pairs, V) float64) times the kernel values ``k`` (N, V) float32
    summed in float64 vector by vector (onnxruntime's order), plus ``rho`` — and each row's
    vote winner (int64, the first of equal counts; a NaN value votes for neither class of
    its pair). ``None`` when the call does not qualify. See csrc/svm.c."""
    if (not ENABLED or not hasattr(_native, "svm_decide") or k.dtype != _F32 or k.ndim != 2
            or weights_t.dtype != np.float64 or weights_t.ndim != 2 or weights_t.shape[1] != k.shape[1]):
        return None
    pairs = weights_t.shape[0]
    s = np.empty((k.shape[0], pairs), _F32)
    label = np.empty(k.shape[0], np.int64)
    _native.svm_decide(np.ascontiguousarray(k), np.ascontiguousarray(weights_t),
                       np.ascontiguousarray(rho, dtype=np.float64), np.ascontiguousarray(pair_i, dtype=np.int64),
                       np.ascontiguousarray(pair_j, dtype=np.int64), s, label, k.shape[0], k.shape[1], pairs, classes)
    return s, label


def _held_forest(x: np.ndarray, forest: Any, weights: np.ndarray | None) -> Any:
    """The compiled module's hold on ``forest`` (``tree_forest``: its node arrays, and
    ``weights`` for scoring), made once per forest and kind; None when the walk does not
    apply to ``x`` or the forest. The forest keeps the weights array it passes, so
    ``held[0] is weights`` recognises it on the next call."""
    if not ENABLED or not hasattr(_native, "tree_forest") or forest.members or x.ndim != 2 or x.shape[1] < 1:
        return None
    attr = "_compiled_walk" if weights is None else "_compiled_scorer"
    held = getattr(forest, attr, None)
    if held is None or held[0] is not weights:
        as64 = lambda a: np.ascontiguousarray(a, dtype=np.int64)  # noqa: E731
        as8 = lambda a: np.ascontiguousarray(a, dtype=np.uint8)  # noqa: E731
        arrays = (as64(forest.roots), as64(forest.feature), np.ascontiguousarray(forest.split, dtype=np.float64),
                  as64(forest.mode), as64(forest.true_id), as8(forest.true_leaf), as64(forest.false_id),
                  as8(forest.false_leaf), as8(forest.missing_true))
        table = None if weights is None else np.ascontiguousarray(weights)
        held = (weights, _native.tree_forest(*arrays, table, forest.weight.shape[0], forest.n_targets))
        setattr(forest, attr, held)
    return held


def _run_forest(held: Any, x: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``tree_run`` of a held forest over the rows of ``x`` (float32 or float64 as they are
    when C-contiguous) into ``out``."""
    if x.dtype not in (_F32, _F64) or not x.flags.c_contiguous:
        x = np.ascontiguousarray(x, dtype=np.float64)
    _native.tree_run(held[1], x, out, x.shape[0], x.shape[1])
    return out


def accumulators_to_float(acc: np.ndarray, scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray | None:
    """``float32(acc) * scale + bias`` for int32 ``acc`` (..., N), a float32 ``scale`` of
    one value or N, a float32 ``bias`` of N or None, in one pass (numpy's three, each with
    a temporary of the product's size); ``None`` when the call does not qualify."""
    if not ENABLED or not hasattr(_native, "accumulators_to_float") or acc.dtype != np.int32 or acc.ndim < 1:
        return None
    n = acc.shape[-1]
    if n < 1 or scale.dtype != _F32 or scale.size not in (1, n) or (scale.size == n and scale.shape[-1:] != (n,)):
        return None
    if scale.size == n and scale.ndim > 1 and any(d != 1 for d in scale.shape[:-1]):
        return None
    if bias is not None and (bias.dtype != _F32 or bias.shape != (n,)):
        return None
    y = np.empty(acc.shape, _F32)
    rows = acc.size // n
    _native.accumulators_to_float(np.ascontiguousarray(acc), np.ascontiguousarray(scale).reshape(-1),
                                  None if bias is None else np.ascontiguousarray(bias), y, rows, n)
    return y


def dequantize4(b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int, block: int) -> np.ndarray | None:
    """MatMulNBits' 4-bit weights as float32 (N, K): ``b`` uint8 (N, blocks, block / 2),
    two values a byte (low nibble first), ``scales`` float32 (N * blocks), ``zero_points``
    uint8 packed the same way (N, ceil(blocks / 2)) or None (8): ``(q - zp) * scale``, as
    the operator library computes it, in one pass; ``None`` when the call does not qualify."""
    done = _dequantize4(b, scales, zero_points, k, block, packed=False)
    return None if done is None else done[0].reshape(done[1], k)


def dequantize4_packed(
    b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int, block: int
) -> PackedMatrix | None:
    """:func:`dequantize4`'s weights transposed, (K, N), written straight into
    :func:`gemm`'s packed right operand (what ``pack_gemm_b(dequantize4(...).T)`` gives,
    in one pass: a 4-bit BERT's weights were dequantized into 340 MB and copied into as
    many again); ``None`` when the call does not qualify."""
    done = _dequantize4(b, scales, zero_points, k, block, packed=True)
    return None if done is None else PackedMatrix(done[0], (k, done[1]), "b")


def _dequantize4(
    b: np.ndarray, scales: np.ndarray, zero_points: np.ndarray | None, k: int, block: int, packed: bool
) -> tuple[np.ndarray, int] | None:
    """The compiled 4-bit dequantization into a fresh flat buffer — the (N, K) matrix, or
    with ``packed`` its transpose in :func:`gemm`'s packed layout — and N; ``None`` when
    the arguments do not qualify."""
    if not ENABLED or not hasattr(_native, "dequantize4") or b.dtype != np.uint8 or b.ndim != 3:
        return None
    n, blocks, half = b.shape
    if half * 2 != block or scales.dtype != _F32 or scales.size != n * blocks or not 0 <= k <= blocks * block:
        return None
    if zero_points is not None and (zero_points.dtype != np.uint8 or zero_points.size != n * ((blocks + 1) // 2)):
        return None
    nr = _native.gemm_info()[1]
    out = np.empty(-(-n // nr) * nr * k if packed else n * k, _F32)
    _native.dequantize4(np.ascontiguousarray(b), np.ascontiguousarray(scales).reshape(-1),
                        None if zero_points is None else np.ascontiguousarray(zero_points).reshape(-1),
                        out, n, blocks, block, k, packed)
    return out, n


#: Whether :func:`recurrent` runs here (the module built with csrc/recurrent.c, and on).
RECURRENT = ENABLED and hasattr(_native, "recurrent")

#: Cell codes of :func:`recurrent` (csrc/recurrent.c's enum).
CELL_RNN, CELL_GRU, CELL_LSTM = 0, 1, 2


def recurrent(
    cell: int,
    xw: np.ndarray,
    rt: np.ndarray,
    h: np.ndarray,
    c: np.ndarray | None,
    y: np.ndarray,
    *,
    split: int,
    peepholes: np.ndarray | None = None,
    rbh: np.ndarray | None = None,
    lens: np.ndarray | None = None,
    reverse: int = 0,
    clip: float = 0.0,
    input_forget: bool = False,
) -> bool:
    """The recurrence of RNN, GRU or LSTM (``cell``: ``CELL_*``) with default activations.

    ``xw`` (dirs, seq, batch, G): the input projections with the biases folded in; ``rt``:
    R transposed, per direction its columns [0, ``split``) then [``split``, G) as made by
    :func:`recurrent_panels`; ``h``/``c`` (dirs, batch, hidden): initial states,
    overwritten with the final ones; ``y`` (dirs, seq, batch, hidden): every step's h
    (zeros past a row's length). ``peepholes`` (dirs, 3 hidden), ``rbh`` (dirs, hidden:
    GRU's ``linear_before_reset`` bias), ``lens`` (batch, int64), ``reverse`` (bit d:
    direction d runs backwards), ``clip`` (0: none). Returns ``False`` when the arrays do
    not qualify (not C-contiguous float32, or the module lacks the kernel)."""
    if not RECURRENT or not _ready(xw, rt, h, c, y, peepholes, rbh):
        return False
    if lens is not None and (lens.dtype != np.int64 or not lens.flags.c_contiguous):
        return False
    dirs, seq, batch, _ = xw.shape
    _native.recurrent(cell, seq, batch, h.shape[2], dirs, split, xw, rt, peepholes, rbh, h, c, lens,
                      y, reverse, clip, input_forget)
    return True


def recurrent_panels(rt: np.ndarray, split: int) -> np.ndarray:
    """R^T (dirs, hidden, G) in the layout :func:`recurrent` reads: per direction, columns
    [0, ``split``) and then [``split``, G), each cut into panels of 64 columns held
    [hidden][64] contiguously (zeros past the last column), so that every 64-column block
    of the step's GEMV reads one contiguous run of weights."""
    return np.ascontiguousarray(np.concatenate(
        [column_panels(rt[:, :, :split]), column_panels(rt[:, :, split:])], axis=1))


def column_panels(m: np.ndarray) -> np.ndarray:
    """``m`` (..., K, N) with its columns cut into panels of 64, each [K][64] floats held
    contiguously (zeros past column N): (..., ceil(N / 64) * 64 * K) float32, the layout
    in which the one-row products (csrc/gemv.c) and the recurrences' GEMVs
    (csrc/recurrent.c) read a 64-column block of weights as one contiguous run."""
    *lead, k, n = m.shape
    blocks = -(-n // 64)
    padded = np.zeros((*lead, k, blocks * 64), np.float32)
    padded[..., :n] = m
    return padded.reshape(*lead, k, blocks, 64).swapaxes(-3, -2).reshape(*lead, -1)


@record(frozen=True)
class PackedInt8:
    """An int8 (K, N) right operand packed for :func:`qgemm_u8s8` (csrc/qgemm.c's layout),
    with its column sums (for the zero points' terms)."""

    data: np.ndarray
    shape: tuple[int, int]
    column_sums: np.ndarray


#: Whether :func:`qgemm_u8s8` runs here (the module built, the CPU with AVX-512 VNNI).
QGEMM = ENABLED and hasattr(_native, "qgemm_supported") and bool(_native.qgemm_supported())


def pack_int8(b: np.ndarray) -> PackedInt8 | None:
    """``b`` (K, N) int8 packed for :func:`qgemm_u8s8`; ``None`` without the kernel."""
    if not QGEMM or b.ndim != 2 or b.dtype != np.int8 or b.shape[0] >= 1 << 16:
        return None
    k, n = b.shape
    k4, n64 = -(-k // 4), -(-n // 64) * 64
    # [N / 16][K / 4][16 columns][4 k]: one 64-byte load holds four k of sixteen columns.
    data = np.empty((n64 // 16, k4, 16, 4), np.int8)
    sums = np.empty(n, np.int32)
    _native.qgemm_pack(np.ascontiguousarray(b), data, sums, k, n)
    return PackedInt8(data, (k, n), sums)


def qgemm_u8s8(a: np.ndarray, b: PackedInt8) -> np.ndarray | None:
    """``a @ b`` in int32 for a uint8 (M, K) ``a`` and a packed int8 ``b`` (raw sums: no
    zero points); ``None`` when ``a`` does not qualify."""
    if not QGEMM or a.ndim != 2 or a.dtype != np.uint8 or a.shape[1] != b.shape[0]:
        return None
    a = np.ascontiguousarray(a)
    out = np.empty((a.shape[0], b.shape[1]), np.int32)
    _native.qgemm_u8s8(a, b.data, out, a.shape[0], b.shape[1], b.shape[0])
    return out


def qlinear_add(a: np.ndarray, b: np.ndarray, za: int, zb: int, ra: np.float32, rb: np.float32,
                zc: int) -> np.ndarray | None:
    """com.microsoft QLinearAdd of two 8-bit arrays of one shape and type (``ra``, ``rb``:
    A_scale / C_scale and B_scale / C_scale in float32) in one pass; ``None`` when the call
    does not qualify (broadcasting, other types)."""
    if not ENABLED or a.dtype not in _INT8_TYPES or b.dtype != a.dtype or a.shape != b.shape:
        return None
    y = np.empty(a.shape, a.dtype)
    _native.qlinear_add(np.ascontiguousarray(a), np.ascontiguousarray(b), y, za, zb, float(ra), float(rb),
                        zc, a.dtype == np.int8)
    return y


def qconv(x: np.ndarray, a: np.ndarray, rowsum_a: np.ndarray, zp_a: np.ndarray, bias: np.ndarray,
          scale: np.ndarray, y: np.ndarray, geometry: tuple[int, ...], m: int, group: int, flip: bool,
          zp_b: int, y_scale: float, y_zero_point: int, lo: int, hi: int, int32_out: bool = False) -> None:
    """QLinearConv of 8-bit NCHW ``x`` (``geometry``: N, C, H, W, kh, kw, OH, OW, strides,
    leading pads, dilations) by the prepared weights ``a`` (uint8 [M, K]: see
    :class:`~onyxrt_cpu.kernels.quantization.IntegerFilter`) into ``y`` (csrc/qconv.c).
    ``flip``: x is uint8, read as int8 x - 128 (``zp_b`` is x's zero point moved alike);
    ``scale``: float64 [M], float32(x_scale * w_scale); int32 ``bias`` [M]. ``int32_out``:
    ``y`` (int32) takes the exact sums plus the bias, not requantized (ConvInteger)."""
    _native.qconv(x, a, rowsum_a, zp_a, bias, scale, y, geometry, m, group, int(flip), zp_b, y_scale,
                  y_zero_point, lo, hi, int32_out)


def qconv_depthwise(x: np.ndarray, centered: np.ndarray, bias: np.ndarray, scale: np.ndarray,
                    y: np.ndarray, geometry: tuple[int, ...], flip: bool, zp_x: int, y_scale: float,
                    y_zero_point: int, lo: int, hi: int, int32_out: bool = False) -> None:
    """:func:`qconv` for one input channel per group: ``centered`` (int16 [C, kh * kw]) the
    weights minus their zero points."""
    _native.qconv_depthwise(x, centered, bias, scale, y, geometry, int(flip), zp_x, y_scale,
                            y_zero_point, lo, hi, int32_out)


def where_scalar(condition: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """``np.where(condition, x, y)`` for 4-byte x and y of one dtype when the condition
    (bool) and one of them have the output's shape and the other is one value, in one
    compiled pass (numpy's where, or a copy and a masked copy, take three to six times
    longer on attention's [1, 12, 128, 128]); ``None`` otherwise."""
    if (not ENABLED or condition.dtype != np.bool_ or x.dtype != y.dtype or x.dtype.itemsize != 4
            or condition.size < 1024):
        return None
    if x.size == 1 and y.shape == condition.shape:
        full, scalar, scalar_is_x = y, x, True
    elif y.size == 1 and x.shape == condition.shape:
        full, scalar, scalar_is_x = x, y, False
    else:
        return None
    out = np.empty(condition.shape, x.dtype)
    _native.select4(np.ascontiguousarray(condition), np.ascontiguousarray(full), np.ascontiguousarray(scalar),
                    scalar_is_x, out)
    return out


def qgemm_float(a: np.ndarray, b: PackedInt8, col_sub: np.ndarray, row_sum: np.ndarray | None,
                col_zb: np.ndarray | None, scale: np.ndarray, bias: np.ndarray | None) -> np.ndarray | None:
    """``float32(a @ b - col_sub - row_sum * col_zb) * scale + bias`` (float32 (M, N)) for a
    uint8 (M, K) ``a`` and a packed int8 ``b``, the scaling done in the GEMM's registers;
    ``col_sub`` int32 [N], ``row_sum`` int32 [M] and ``col_zb`` int32 [N] (or both None),
    ``scale`` float32 of 1 or N, ``bias`` float32 [N] or None. ``None`` when ``a`` does not
    qualify."""
    if not QGEMM or a.ndim != 2 or a.dtype != np.uint8 or a.shape[1] != b.shape[0]:
        return None
    m, (k, n) = a.shape[0], b.shape
    y = np.empty((m, n), _F32)
    _native.qgemm_float(np.ascontiguousarray(a), b.data, col_sub, row_sum, col_zb, scale, bias, y, m, n, k)
    return y


def gelu_tanh(x: np.ndarray) -> np.ndarray | None:
    """GELU's tanh approximation of a float32 array in one pass (within about 4 float32 ulps
    of the float64 formula); ``None`` when ``x`` does not qualify."""
    if not _ready(x):
        return None
    y = np.empty_like(x)
    _native.gelu_tanh(x, y)
    return y


def epilogue(
    y: np.ndarray,
    bias: np.ndarray | None,
    z: np.ndarray | None,
    act: int = ACT_NONE,
    p0: float = 0.0,
    p1: float = 0.0,
) -> bool:
    """In place on a convolution's output ``y`` (N, M, *spatial):
    ``y = act(y + bias[channel] + z)`` in one pass. ``bias`` has M values, ``z`` is y's
    shape or ``None``. Returns ``False`` (nothing done) when the arrays do not qualify."""
    if not _ready(y) or not epilogue_ready(y.shape, bias, z):
        return False
    channels = y.shape[1]
    length = y.size // (y.shape[0] * channels) if y.size else 0
    _native.epilogue(y, channels, length, bias, z, act, p0, p1)
    return True


def epilogue_ready(shape: tuple[int, ...], bias: np.ndarray | None, z: np.ndarray | None) -> bool:
    """Whether an epilogue with ``bias`` (one value per channel, axis 1) and residual ``z``
    can be applied to a float32 output of ``shape`` by the compiled code."""
    if len(shape) < 2 or shape[1] == 0 or not _ready(bias, z):
        return False
    return (bias is None or bias.size == shape[1]) and (z is None or z.shape == shape)


def window_geometry(
    shape: tuple[int, ...],
    kernel: tuple[int, ...],
    out: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
) -> tuple[int, ...]:
    """The C code's Geometry tuple for an input of ``shape``: (N, C, H, W, ...) in NCHW,
    (N, blocks, H, W, 16) in NCHWc (where C counts blocks)."""
    n, c, h, w = shape[:4]
    return (n, c, h, w, kernel[0], kernel[1], out[0], out[1], strides[0], strides[1],
            pads_begin[0], pads_begin[1], dilations[0], dilations[1])


def depthwise2d(
    x: np.ndarray,
    wp: np.ndarray,
    y: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
    finish: tuple[Any, ...] | None = None,
) -> bool:
    """2-D convolution with one input channel per group: ``x`` (N, C, H, W), packed
    weights ``wp`` (C, M/C, KH*KW), into ``y`` (N, M, OH, OW), zero padding, then
    ``finish`` = (bias, z, act, p0, p1) on each output plane while it is in cache (callers
    check it with :func:`epilogue_ready`). Returns ``False`` when the call does not
    qualify (rank, dtype, layout)."""
    if x.ndim != 4 or len(kernel) != 2 or not _ready(x, wp, y):
        return False
    geometry = window_geometry(x.shape, kernel, y.shape[2:], strides, pads_begin, dilations)
    _native.depthwise(x, wp, y, geometry, wp.shape[1], *(finish or ()))
    return True


def maxpool2d(
    x: np.ndarray,
    y: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
) -> bool:
    """2-D max pooling of ``x`` (N, C, H, W) into ``y`` (N, C, OH, OW), padding counting as
    -inf and NaN propagating; ``False`` when the call does not qualify."""
    if x.ndim != 4 or len(kernel) != 2 or not _ready(x, y):
        return False
    _native.maxpool(x, y, window_geometry(x.shape, kernel, y.shape[2:], strides, pads_begin, dilations))
    return True


def global_average(x: np.ndarray) -> np.ndarray | None:
    """The mean of each (image, channel) plane of C-contiguous float32 ``x`` (N, C, ...),
    kept as size-1 spatial dims (GlobalAveragePool), summed in double (csrc/pool.c);
    ``None`` when ``x`` does not qualify."""
    if x.ndim < 3 or not _ready(x) or x.size == 0:
        return None
    rows = x.shape[0] * x.shape[1]
    y = np.empty(x.shape[:2] + (1,) * (x.ndim - 2), _F32)
    _native.global_average(x, y, rows, x.size // rows)
    return y


def im2col2d(
    x: np.ndarray,
    cols: np.ndarray,
    kernel: tuple[int, ...],
    out: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
    r0: int,
) -> bool:
    """Fill ``cols`` (C, KH*KW, N, rows, OW) with the taps of ``x`` (N, C, H, W) for
    output rows ``[r0, r0 + rows)``, zeros in the padding. ``False`` when it does not
    qualify."""
    if x.ndim != 4 or len(kernel) != 2 or cols.ndim != 5 or not _ready(x, cols):
        return False
    geometry = window_geometry(x.shape, kernel, out, strides, pads_begin, dilations)
    _native.im2col(x, cols, geometry, r0, cols.shape[3])
    return True


def winograd_input(x: np.ndarray, v: np.ndarray, geometry: tuple[int, ...]) -> None:
    """F(2x2, 3x3) input transform of ``x`` (N, C, H, W) into ``v`` (16, C, tiles); see
    :mod:`onyxrt_cpu.kernels.winograd`, which checks applicability first."""
    _native.winograd_input(x, v, geometry)


def winograd_output(
    products: np.ndarray,
    y: np.ndarray,
    geometry: tuple[int, ...],
    m: int,
    bias: np.ndarray | None,
    z: np.ndarray | None,
    act: int,
    p0: float,
    p1: float,
) -> None:
    """F(2x2, 3x3) output transform of the GEMMs' ``products`` (16, M, tiles) into ``y``
    (N, M, OH, OW), with bias, residual and activation."""
    _native.winograd_output(products, y, geometry, m, bias, z, act, p0, p1)


def softmax_last_axis(x: np.ndarray) -> np.ndarray | None:
    """Softmax over the last axis of ``x`` in one pass per row; ``None`` when ``x`` does
    not qualify. exp is a float32 polynomial (relative error < 2e-7); results below
    ~1e-38 of a row's largest term are 0 rather than subnormal."""
    if x.ndim == 0 or x.shape[-1] == 0 or not _ready(x):
        return None
    y = np.empty_like(x)
    _native.softmax(x, y, x.shape[-1])
    return y


#: Normalizer's ``norm`` attribute -> :func:`normalize_rows`' code.
_NORMS = {"MAX": 0, "L1": 1, "L2": 2}


def normalize_rows(x: np.ndarray, norm: str) -> np.ndarray | None:
    """ai.onnx.ml Normalizer on float32 rows (the last axis) in one compiled pass: each row
    over its maximum (NaN skipped), L1 or L2 norm, a zero divisor leaving it (~0.3 µs a
    classifier's row against ~2.5 for numpy's three calls); ``None`` when ``x`` does not
    qualify."""
    if x.ndim == 0 or x.shape[-1] == 0 or norm not in _NORMS or not _ready(x):
        return None
    y = np.empty_like(x)
    _native.normalize_rows(x, y, x.shape[-1], _NORMS[norm])
    return y


def layernorm_last_axis(
    x: np.ndarray, scale: np.ndarray, bias: np.ndarray | None, epsilon: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """LayerNormalization over the last axis, float32 throughout: ``(y, mean,
    inv_std_dev)`` with the statistics shaped ``x.shape[:-1] + (1,)``; ``None`` when the
    arrays do not qualify (scale and bias must have exactly the last axis's length)."""
    if x.ndim == 0 or x.shape[-1] == 0 or not _ready(x, scale, bias):
        return None
    n = x.shape[-1]
    if scale.size != n or (bias is not None and bias.size != n):
        return None
    y = np.empty_like(x)
    stats = x.shape[:-1] + (1,)
    mean = np.empty(stats, dtype=_F32)
    inv_std = np.empty(stats, dtype=_F32)
    _native.layernorm(x, y, n, scale, bias, epsilon, mean, inv_std)
    return y, mean, inv_std


def share_with_blas(get_num_threads_address: int) -> int:
    """Let the compiled kernels split their work over the thread pool, following the
    thread count that OpenBLAS's ``openblas_get_num_threads`` (at that address) reports;
    return the address of the callback to give ``openblas_set_threads_callback_function``
    (see :mod:`onyxrt_cpu.blas_threads`)."""
    return int(_native.blas_hooks(get_num_threads_address))


def threads() -> tuple[int, int]:
    """(the pool's size, how many threads a kernel splits over now); (1, 1) without the
    extension."""
    if _native is None:
        return (1, 1)
    pool_size, split = _native.threads()
    return int(pool_size), int(split)


@record(frozen=True)
class PackedMatrix:
    """A GEMM operand laid out once for the compiled kernel (csrc/gemm.c): the rows of an
    A (``side == "a"``, shape (M, K)) or the columns of a B (``"b"``, shape (K, N))."""

    data: np.ndarray
    shape: tuple[int, int]
    side: str


def _strided(x: np.ndarray) -> tuple[np.ndarray, int, int]:
    """A 2-D float32 ``x`` as (a C-contiguous array over the same floats, row stride, column
    stride in floats): x itself or its transpose when either is contiguous, else a copy."""
    if not x.flags.c_contiguous and x.T.flags.c_contiguous:
        return x.T, x.strides[0] // 4, x.strides[1] // 4
    x = np.ascontiguousarray(x)
    return x, x.shape[1], 1


def _pack(w: np.ndarray, side: str) -> PackedMatrix | None:
    if not ENABLED or w.ndim != 2 or w.dtype != _F32:
        return None
    flat, *strides = _strided(w)
    rows, cols = w.shape
    # A's lines are its rows (k along columns); B's lines are its columns.
    lines, k = (rows, cols) if side == "a" else (cols, rows)
    line_stride, k_stride = strides if side == "a" else strides[::-1]
    mr, nr = _native.gemm_info()[:2]
    width = mr if side == "a" else nr
    data = np.empty(-(-lines // width) * width * k, dtype=_F32)
    _native.gemm_pack(flat, line_stride, k_stride, lines, k, side == "b", data)
    return PackedMatrix(data, (rows, cols), side)


def pack_gemm_a(a: np.ndarray) -> PackedMatrix | None:
    """``a`` (M, K) float32 packed as the left operand of :func:`gemm`; ``None`` when it
    does not qualify (not 2-D float32, negative strides, no extension)."""
    return _pack(a, "a")


def transposed(x: np.ndarray) -> np.ndarray | None:
    """``x.T`` as a new C-contiguous array, copied tile by tile (csrc/transpose.c: ~7x
    numpy's copy of the transposed view); ``None`` when ``x`` is not a C-contiguous 2-D
    float32 array or the module is off."""
    if not ENABLED or x.ndim != 2 or x.dtype != _F32 or not x.flags.c_contiguous:
        return None
    rows, cols = x.shape
    out = np.empty((cols, rows), dtype=_F32)
    _native.transpose(x, rows, cols, out)
    return out


def pack_gemm_b(b: np.ndarray) -> PackedMatrix | None:
    """``b`` (K, N) float32 packed as the right operand of :func:`gemm`; ``None`` when it
    does not qualify."""
    return _pack(b, "b")


def compiled_gemm_wins(m: int, k: int, n: int) -> bool:
    """Whether the compiled GEMM with B packed ahead beats OpenBLAS on ``(m, k) @ (k, n)``
    (where :data:`GEMM_PREFERRED`; A is packed on each call). Its tiles are 32 columns
    wide and packing A is paid per call, so narrow products lose: n below 512 ran at 60-70
    GFLOP/s a core against OpenBLAS's 90-95 (the log-mel front end's [101, 257] x [257, 80]
    filter bank 62 µs against 29; [64, 384] x [384, 256] 112 against 75; [48, 512] x
    [512, 512] 169 against 157). From 512 columns it wins (BERT's [128, 768] x [768, 768]
    6%, [200, 80] x [80, 1024] 28%), and under 24 rows OpenBLAS's small-M GEMM is weak
    where the compiled one computes only the rows there are ([2, 768] x [768, 768] 28
    against 89 µs, [12, 256] x [256, 512] 30 against 42; [8, 256] x [256, 256] still 13
    against 10)."""
    return n > 512 or (m < 24 and k * n >= 1 << 17)


#: The largest constant matrix (in floats: 1 MiB) whose one-row products take the compiled
#: gemv: beyond it the weights come from memory, and OpenBLAS's threaded gemv wins (512 x
#: 512 15 µs against 17 for matmul, bias and ReLU; 768 x 768 36 against 30).
GEMV_MAX_WEIGHTS = 1 << 18


@record(frozen=True)
class RowProduct:
    """``y = act(a @ B + bias)`` for one float32 row ``a`` and a constant ``B`` (K, N), whose
    columns are held in panels of 64 (``panels``: [K][64] floats each, zero past column N;
    see csrc/gemv.c). Call it, or pass ``panels, k, n`` to ``gemv`` itself where one Python
    frame matters (a tiny model's layer)."""

    panels: np.ndarray
    k: int
    n: int
    gemv: Callable[..., None]

    def __call__(self, a: np.ndarray, y: np.ndarray, bias: np.ndarray | None = None,
                 act: int = ACT_NONE, p0: float = 0.0, p1: float = 0.0) -> None:
        """Write ``act(a @ B + bias)`` into ``y`` (N float32)."""
        self.gemv(a, self.panels, y, self.k, self.n, bias, act, p0, p1)


def one_row_product(b: np.ndarray) -> RowProduct | None:
    """The compiled one-row product by constant ``b`` (K, N) (csrc/gemv.c) when it
    qualifies — float32 of at most :data:`GEMV_MAX_WEIGHTS` — else ``None``. A batch-1
    layer then costs one call (256 x 256: 2.8-3.0 µs against 5.3 for matmul, bias and
    ReLU)."""
    if (not ENABLED or not hasattr(_native, "gemv") or b.ndim != 2 or b.dtype != _F32
            or b.size > GEMV_MAX_WEIGHTS or b.size == 0):
        return None
    k, n = b.shape
    return RowProduct(column_panels(b), k, n, _native.gemv)


def classify_row(product: RowProduct, a: np.ndarray, scores: np.ndarray, bias: np.ndarray | None,
                 post: int) -> int:
    """A linear classifier on one float32 row ``a`` in one compiled call: ``scores`` (1, N)
    = a @ B + bias for the constant B of ``product`` (:func:`one_row_product`), the index
    of the largest score as onnxruntime scans (the first of ties; a NaN never wins, a NaN
    first score is never beaten), then ``post`` 0 (none) or 1 (softmax, in place)."""
    return int(_native.classify_row(a, product.panels, scores, product.k, product.n, bias, post))


def gemm(
    a: np.ndarray | PackedMatrix,
    b: np.ndarray | PackedMatrix,
    out: np.ndarray,
    row_bias: np.ndarray | None = None,
    col_bias: np.ndarray | None = None,
    z: np.ndarray | None = None,
    act: int = ACT_NONE,
    p0: float = 0.0,
    p1: float = 0.0,
) -> bool:
    """``out = act(a @ b + bias + z)`` for float32 2-D operands, either of them packed, each
    tile finished while it is in cache: ``row_bias`` has one value per row of ``out``
    (a convolution's channels), ``col_bias`` one per column, ``z`` is ``out``'s shape.
    ``out`` and ``z`` may have rows further apart than their length (column slices).
    Returns ``False`` (nothing done) when the arguments do not qualify."""
    if not ENABLED or out.ndim != 2 or out.dtype != _F32:
        return False
    operands = []
    for x, side in ((a, "a"), (b, "b")):
        if isinstance(x, PackedMatrix):
            if x.side != side:
                return False
            operands.append((x.data, 0, 0, True, x.shape))
        else:
            if x.ndim != 2 or x.dtype != _F32:
                return False
            flat, rs, cs = _strided(x)
            operands.append((flat, rs, cs, False, x.shape))
    (m, k), (k2, n) = operands[0][4], operands[1][4]
    if k != k2 or out.shape != (m, n) or not _ready(row_bias, col_bias):
        return False
    if (row_bias is not None and row_bias.size != m) or (col_bias is not None and col_bias.size != n):
        return False
    if out.size == 0:
        return True
    if not (_rows_contiguous(out) and (z is None or (z.dtype == _F32 and z.shape == out.shape
                                                      and _rows_contiguous(z)))):
        return False
    _native.gemm(*operands[0][:4], *operands[1][:4], out, m, n, k, row_bias, col_bias, z, act,
                 p0, p1)
    return True


def gemm_batched(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> bool:
    """``out[..., :, :] = a[...] @ b[...]`` for float32 (..., M, K) and (..., K, N) with the
    same batch dimensions, either of them any strided view whose batch dimensions merge
    into one stride (attention's heads split from a [tokens, hidden] matrix, a transposed
    key), ``out`` a contiguous (..., M, N): each product on one thread of the pool, the
    batch split over them. ``False`` (nothing done) when the arguments do not qualify."""
    if (not ENABLED or a.dtype != _F32 or b.dtype != _F32 or out.dtype != _F32 or a.ndim < 3
            or b.ndim != a.ndim or not out.flags.c_contiguous):
        return False
    *lead, m, k = a.shape
    n = b.shape[-1]
    if tuple(lead) != b.shape[:-2] or b.shape[-2] != k or out.shape != (*lead, m, n):
        return False
    ao, bo = _batched_operand(a), _batched_operand(b)
    if ao is None or bo is None:
        return False
    _native.gemm_batched(*ao, *bo, out, prod(lead), m, n, k)
    return True


def _batched_operand(x: np.ndarray) -> tuple[np.ndarray, int, int, int, int] | None:
    """A float32 (..., R, C) array as (a C-contiguous float32 array its elements lie in, the
    offset of its first element there, the batch, row and column strides), all in floats;
    None where the batch dimensions do not merge into one stride or a stride is negative
    or not a whole number of floats."""
    if any(s < 0 or s % 4 for s in x.strides):
        return None
    batch_stride, expected = 0, None
    for dim, stride in reversed(list(zip(x.shape[:-2], x.strides[:-2]))):
        if dim == 1:
            continue
        if expected is not None and stride != expected:
            return None
        if expected is None:
            batch_stride = stride
        expected = stride * dim
    base = x
    while isinstance(base.base, np.ndarray):
        base = base.base
    flat = _dense_floats(base) if base.dtype == _F32 else None
    if flat is None:
        if not x.flags.c_contiguous:
            return None
        base = flat = x.reshape(-1)
    offset = x.ctypes.data - base.ctypes.data
    if offset < 0 or offset % 4:
        return None
    return flat, offset // 4, batch_stride // 4, x.strides[-2] // 4, x.strides[-1] // 4


def _dense_floats(x: np.ndarray) -> np.ndarray | None:
    """A float32 array whose elements fill one block of memory in some axis order (C order,
    or the permuted order numpy gives a ufunc's result on a transposed input) as the 1-D
    array of that block; None when it does not (a strided slice)."""
    if x.flags.c_contiguous:
        return x.reshape(-1)
    expected = 4
    for stride, dim in sorted((s, d) for s, d in zip(x.strides, x.shape) if d != 1):
        if stride != expected:
            return None
        expected = stride * dim
    return np.lib.stride_tricks.as_strided(x, (x.size,), (4,))


_PAD_MODES = {"constant": 0, "reflect": 1, "edge": 2, "wrap": 3}


def pad(x: np.ndarray, begins: list[int], ends: list[int], mode: str, value: Any) -> np.ndarray | None:
    """``x`` padded by ``begins``/``ends`` (>= 0 each) in ``mode`` (constant with ``value``,
    None meaning 0; reflect; edge; wrap) as a new C-contiguous array, in one compiled pass;
    ``None`` where it does not qualify (object dtype, a reflect pad reaching past its axis,
    an empty axis padded other than with the constant, rank above 16)."""
    code = _PAD_MODES.get(mode)
    if not ENABLED or code is None or x.dtype.hasobject or not 1 <= x.ndim <= 16:
        return None
    shape = tuple(d + b + e for d, b, e in zip(x.shape, begins, ends))
    for d, b, e in zip(x.shape, begins, ends):
        if b < 0 or e < 0 or ((b or e) and code and d == 0) or (code == 1 and (b >= d or e >= d) and (b or e)):
            return None
    if x.dtype.itemsize not in (1, 2, 4, 8):
        return None
    fill = np.zeros((), x.dtype) if value is None or code else np.asarray(value).astype(x.dtype)
    y = np.empty(shape, x.dtype)
    # As unsigned integers of the element's size: the buffer protocol has no format for
    # ml_dtypes' types (bfloat16, float8...), and the copy is of bytes anyway.
    bits = np.dtype(f"u{x.dtype.itemsize}")
    _native.pad(np.ascontiguousarray(x).view(bits), y.view(bits), list(begins), code, fill.tobytes())
    return y


def _rows_contiguous(x: np.ndarray) -> bool:
    """Whether the 2-D ``x``'s rows are contiguous and do not overlap."""
    return x.ndim == 2 and x.strides[1] == 4 and x.strides[0] % 4 == 0 and x.strides[0] >= 4 * x.shape[1]


# ---------------------------------------------------------------------------- NCHWc
#: Channels per block of the blocked layout (csrc/nchwc.c): a tensor (N, C, H, W) is
#: held as (N, ceil(C / 16), H, W, 16), lanes past C zero.
NCHWC_BLOCK = 16
_PANEL = 4 * NCHWC_BLOCK  # output channels per packed filter panel (csrc/nchwc.c)


def pad_channels(v: np.ndarray, multiple: int = NCHWC_BLOCK) -> np.ndarray:
    """``v`` (C, ...) float32 with zeros appended along axis 0 up to a multiple of
    ``multiple`` (a bias or filters of a channel count that is not one)."""
    c = v.shape[0]
    padded = np.zeros((-(-c // multiple) * multiple, *v.shape[1:]), dtype=_F32)
    padded[:c] = v
    return padded


def pack_nchwc_filters(w: np.ndarray, blocked_input: bool) -> np.ndarray:
    """Filters ``w`` (M, C, KH, KW) packed for :func:`nchwc_conv`: (panels of 4 output
    blocks, KH, KW, groups, channels per group, 64), the input's channels in groups of 16
    (a blocked input, C padded to the block) or of 1 (a plain NCHW input)."""
    m, c, kh, kw = w.shape
    cg = NCHWC_BLOCK if blocked_input else 1
    # One zero-filled buffer padded on both channel axes, then one transposing copy (padding
    # each axis in turn cost three copies: ResNet-50's 53 filters took 100 ms).
    padded_shape = (-(-m // _PANEL) * _PANEL, -(-c // cg) * cg, kh, kw)
    if padded_shape == w.shape:  # nothing to pad (most layers): no zeroed copy of the filters
        full = w.astype(_F32, copy=False)
    else:
        full = np.zeros(padded_shape, _F32)
        full[:m, :c] = w
    panels, groups = full.shape[0] // _PANEL, full.shape[1] // cg
    shaped = full.reshape(panels, _PANEL, groups, cg, kh, kw)
    return np.ascontiguousarray(shaped.transpose(0, 4, 5, 2, 3, 1))


def pack_nchwc_depthwise(w: np.ndarray) -> np.ndarray:
    """Depthwise filters ``w`` (C, 1, KH, KW) packed for :func:`nchwc_depthwise`:
    (blocks, KH * KW, 16)."""
    c, _, kh, kw = w.shape
    full = pad_channels(w.astype(_F32, copy=False).reshape(c, kh * kw))
    return np.ascontiguousarray(full.reshape(-1, NCHWC_BLOCK, kh * kw).transpose(0, 2, 1))


def nchwc_conv(
    x: np.ndarray,
    filters: np.ndarray,
    y: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
    bias: np.ndarray | None = None,
    z: np.ndarray | None = None,
    act: int = ACT_NONE,
    p0: float = 0.0,
    p1: float = 0.0,
) -> None:
    """``y`` (N, OB, OH, OW, 16) = act(conv(x, filters) + bias + z), zero padding. ``x`` is
    blocked (N, G, H, W, 16) or plain NCHW (N, C, H, W, read in place); ``filters`` from
    :func:`pack_nchwc_filters` for that layout, ``bias`` padded to OB * 16, ``z`` in
    ``y``'s layout. Leading pads must be >= 0."""
    run = nchwc_runner(x.shape, y.shape, filters, kernel, strides, pads_begin, dilations, False)
    run(x, y, bias, z, act, p0, p1)


#: A prepared NCHWc convolution: ``run(x, y, bias, z, act, p0, p1)``.
NchwcRunner = Callable[[np.ndarray, np.ndarray, "np.ndarray | None", "np.ndarray | None", int, float, float], None]


def nchwc_runner(
    x_shape: tuple[int, ...],
    y_shape: tuple[int, ...],
    filters: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
    depthwise: bool,
) -> NchwcRunner:
    """:func:`nchwc_conv` (or :func:`nchwc_depthwise`) with everything that depends only on
    the shapes worked out once: the returned ``run(x, y, bias, z, act, p0, p1)`` is one
    compiled call (the C code still checks every buffer against the geometry)."""
    geometry = window_geometry(x_shape, kernel, y_shape[2:4], strides, pads_begin, dilations)
    if depthwise:
        depthwise_fn = _native.nchwc_depthwise

        def run_depthwise(x, y, bias, z, act, p0, p1):  # type: ignore[no-untyped-def]
            depthwise_fn(x, filters, y, geometry, bias, z, act, p0, p1)

        return run_depthwise
    conv_fn, blocked, groups, out_blocks = _native.nchwc_conv, len(x_shape) == 5, x_shape[1], y_shape[1]
    wide = int(NCHWC_WIDE_TILES)

    def run(x, y, bias, z, act, p0, p1):  # type: ignore[no-untyped-def]
        conv_fn(x, blocked, groups, geometry, filters, out_blocks, y, bias, z, act, p0, p1, wide)

    return run


def nchwc_depthwise(
    x: np.ndarray,
    filters: np.ndarray,
    y: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
    bias: np.ndarray | None = None,
    z: np.ndarray | None = None,
    act: int = ACT_NONE,
    p0: float = 0.0,
    p1: float = 0.0,
) -> None:
    """Depthwise convolution (one channel per group) of blocked ``x`` (N, B, H, W, 16) into
    ``y`` (N, B, OH, OW, 16), ``filters`` from :func:`pack_nchwc_depthwise`, zero padding,
    then bias (padded to B * 16), residual ``z`` and activation."""
    run = nchwc_runner(x.shape, y.shape, filters, kernel, strides, pads_begin, dilations, True)
    run(x, y, bias, z, act, p0, p1)


def nchwc_maxpool(
    x: np.ndarray,
    y: np.ndarray,
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    pads_begin: tuple[int, ...],
    dilations: tuple[int, ...],
) -> None:
    """2-D max pooling of blocked ``x`` (N, B, H, W, 16) into ``y`` (N, B, OH, OW, 16):
    padding and windows past the input count as -inf, NaN propagates."""
    _native.nchwc_maxpool(x, y, window_geometry(x.shape, kernel, y.shape[2:4], strides, pads_begin,
                                          dilations))


def nchwc_global_average(x: np.ndarray) -> np.ndarray:
    """The mean over H and W of blocked ``x`` (N, B, H, W, 16): (N, B, 1, 1, 16)."""
    n, blocks, h, w, _ = x.shape
    y = np.empty((n, blocks, 1, 1, NCHWC_BLOCK), dtype=_F32)
    if h * w == 0:
        y.fill(np.nan)  # the mean of nothing, as numpy's
    elif y.size:
        _native.nchwc_mean(x, y, n * blocks, h * w)
    return y


def to_nchwc(x: np.ndarray) -> np.ndarray:
    """A C-contiguous float32 (N, C, H, W) in the blocked layout (N, ceil(C/16), H, W, 16)."""
    n, c, h, w = x.shape
    y = np.empty((n, -(-c // NCHWC_BLOCK), h, w, NCHWC_BLOCK), dtype=_F32)
    if x.size:
        _native.nchwc_reorder(x, y, n, c, h * w, True)
    else:
        y.fill(0.0)
    return y


def from_nchwc(x: np.ndarray, channels: int) -> np.ndarray:
    """A blocked (N, B, H, W, 16) back to (N, channels, H, W), the padding lanes dropped."""
    n, _, h, w, _ = x.shape
    y = np.empty((n, channels, h, w), dtype=_F32)
    if y.size:
        _native.nchwc_reorder(x, y, n, channels, h * w, False)
    return y
