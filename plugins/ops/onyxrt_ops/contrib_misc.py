"""Miscellaneous com.microsoft operators, and the old experimental default-domain ones.

What onnxruntime's graph optimizer writes into a saved optimized model (FusedConv,
FusedGemm, FusedMatMul and its old name TransposeMatMul, NhwcMaxPool) and the other
com.microsoft operators its CPU provider registers: MaxpoolWithMask, GridSample (v1: the
modes bilinear/nearest/bicubic), Inverse, Trilu, Unique (1-D, first-occurrence order),
CDist, CropAndResize, ExpandDims, MurmurHash3, Range, Tokenizer, WordConvEmbedding,
NGramRepeatBlock, SparseToDenseMatMul, GatherND (without batch_dims), Pad (pads as an
input), ConvTransposeWithDynamicPads, BifurcationDetector, DynamicTimeWarping,
UnfoldTensor, NGramHashMapping, SampleOp; and the experimental
default-domain operators onnxruntime still runs for legacy models (Affine, Crop,
DynamicSlice, ImageScaler, MaxRoiPool, ParametricSoftplus, Scale, ScaledTanh). Semantics are
onnxruntime's CPU kernels', checked against it in the tests. The legacy operators are
registered at version 1 (onnxruntime's kernels serve every opset; its schemas for them
stop at opset 9, where onnx dropped them).

Most reuse the library's standard kernels by subclassing (Conv, Gemm, ConvTranspose,
MaxPool, GridSample, Unique, GatherND, Pad, Trilu, Range, Slice). Activations of the fused
kernels follow onnxruntime's MLAS ones: FusedConv takes Relu, Tanh, Sigmoid, LeakyRelu
(``activation_params`` = [alpha]), Clip ([min, max]) and HardSigmoid ([alpha, beta]);
FusedGemm reads ``activation_alpha``/``activation_beta`` instead and, as onnxruntime,
refuses Clip.

Host algorithms (computed with numpy on the host, the result moved to the backend, as
allowed for inherently host work): MurmurHash3 (hashing bytes, strings), Tokenizer
(strings, numpy only), BifurcationDetector (token-id searches), DynamicTimeWarping
(a sequential dynamic program), the n-gram search of NGramRepeatBlock (the banned token ids; the
scores are masked on the device), the per-box sampling plans of CropAndResize and
MaxRoiPool (from the boxes, host inputs; the pixels are gathered and reduced on the
device), SparseToDenseMatMul's sparse A (a host value, made dense; the product runs on the
backend).

onnxruntime's quirks are kept where a model could depend on them (each kernel's docstring
says which): MaxpoolWithMask's row-stopping mask scan, FusedGemm's required activation
parameters, SparseToDenseMatMul's alpha on float32 only, the end mark before the padding
of Tokenizer. Known gaps: Tokenizer refuses an empty separator among others (onnxruntime
then returns no token at all); WordConvEmbedding writes zeros for an empty word where
onnxruntime leaves memory unwritten. GatherPacked and AttnLSTM are in
:mod:`onyxrt_ops.contrib_moe`.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

from .activation import FloatAttrs, FloatUnary, _sigmoid
from .detection import GridSample as _GridSample
from .generator import Range as _Range
from .indexing import GatherND as _GatherND
from .indexing import Slice as _Slice
from .indexing import Unique as _Unique
from .library import OpKernel, dtype_name, library
from .linalg import Gemm as _Gemm
from .linalg import Product
from .shape import Pad as _Pad
from .shape import Trilu as _Trilu
from .spatial import Conv as _Conv
from .spatial import ConvTranspose as _ConvTranspose
from .spatial import MaxPool as _MaxPool

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

MS = "com.microsoft"
F32 = (np.float32,)
_ALL = (np.float32, np.float64, np.int64, np.uint64, np.int32, np.uint32, np.int16, np.uint16,
        np.int8, np.uint8, np.float16, np.bool_, object)


def _invalid(kernel: OpKernel, message: str) -> InvalidGraph:
    return InvalidGraph(f"{kernel.where()}: {message}")


# --------------------------------------------------------------- fused activations


def activation(kernel: OpKernel, name: str, params: list[float]) -> Any:
    """The function ``y -> act(y)`` of onnxruntime's fused activation ``name`` with
    ``params`` (``None`` for no activation); InvalidGraph for an unknown one."""
    xp = kernel.xp
    need = {"": 0, "Relu": 0, "Tanh": 0, "Sigmoid": 0, "LeakyRelu": 1, "Clip": 2, "HardSigmoid": 2}
    if name not in need:
        raise _invalid(kernel, f"unknown activation {name!r}")
    if len(params) < need[name]:
        raise _invalid(kernel, f"activation {name} needs {need[name]} parameters, got {params}")
    p = [float(v) for v in params]
    return {
        "": None,
        "Relu": lambda y: xp.maximum(y, xp.zeros((), dtype=y.dtype)),
        # A backend's own sigmoid/tanh where it has them (the CPU's: onnxruntime's numerics).
        "Tanh": kernel.backend.extras.get("tanh", xp.tanh),
        "Sigmoid": kernel.backend.extras.get("sigmoid", lambda y: _sigmoid(xp, y)),
        "LeakyRelu": lambda y: xp.where(y >= 0, y, y * p[0]),
        "Clip": lambda y: xp.clip(y, p[0], p[1]),
        "HardSigmoid": lambda y: xp.clip(y * p[0] + p[1], 0.0, 1.0),
    }[name]


def _apply(act: Any, y: Any) -> Any:
    return y if act is None else act(y)


@library.define("FusedConv", 1, domain=MS, signature=(("T", "T", "T", "T"), ("T",)), types={"T": F32})
class FusedConv(_Conv):
    """act(Conv(X, W) + B + Z): Conv's attributes plus ``activation`` and
    ``activation_params``; Z (optional) is added before the activation."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.act = activation(self, info.attr("activation", "") or "", list(info.attr("activation_params", []) or []))

    def compute(self, x, w, b=None, z=None):
        (y,) = super().compute(x, w, b)
        if z is not None:
            y = y + z
        return (_apply(self.act, y),)


@library.define("FusedGemm", 1, domain=MS, signature=(("T", "T", "T"), ("T",)), types={"T": F32})
class FusedGemm(_Gemm):
    """act(Gemm(A, B, C)): the activation's parameters are ``activation_alpha`` (LeakyRelu,
    HardSigmoid) and ``activation_beta`` (HardSigmoid)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        name = info.attr("activation", "") or ""
        # As onnxruntime's kernel: an activation is required, Clip is refused, and the
        # parameters of LeakyRelu (alpha) and HardSigmoid (alpha, beta) have no default.
        if name in ("", "Clip"):
            raise _invalid(self, f"activation {name!r}: FusedGemm takes Relu, Tanh, Sigmoid, LeakyRelu or HardSigmoid")
        params = [self.float_attr(f"activation_{p}", math.nan) for p in ("alpha", "beta")]
        need = {"LeakyRelu": 1, "HardSigmoid": 2}.get(name, 0)
        if any(math.isnan(v) for v in params[:need]):
            raise _invalid(self, f"activation {name} needs activation_alpha{' and activation_beta' * (need > 1)}")
        self.act = activation(self, name, params[:need])

    def compute(self, a, b, c=None):
        return (_apply(self.act, super().compute(a, b, c)[0]),)


def _batch_last(xp: Any, x: Any) -> Any:
    """``x`` (d0, d1, ..., dk, n) with d0 moved just before the last axis (the
    ``transBatch*`` layout of FusedMatMul)."""
    r = x.ndim
    return xp.permute_dims(x, tuple(range(1, r - 1)) + (0, r - 1)) if r > 2 else x


@library.define("FusedMatMul", 1, domain=MS, signature=(("T", "T"), ("T",)), types={"T": (np.float32, np.float64)})
class FusedMatMul(Product):
    """alpha * A' @ B' (numpy matmul broadcasting): A' is A with its first axis moved
    before the last one when ``transBatchA``, then its last two axes swapped when
    ``transA`` (B' alike)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = float(info.attr("alpha", 1.0))
        self.trans = [bool(info.attr(n, 0)) for n in ("transA", "transB", "transBatchA", "transBatchB")]

    def compute(self, a, b):
        xp = self.xp
        if a.ndim < 1 or b.ndim < 1:
            raise ValueError(f"{self.info.op_type}: operands must have rank >= 1, got {a.shape} and {b.shape}")
        ops = []
        for m, trans, batch in ((a, self.trans[0], self.trans[2]), (b, self.trans[1], self.trans[3])):
            if batch:
                m = _batch_last(xp, m)
            if trans and m.ndim >= 2:
                m = xp.matrix_transpose(m)
            ops.append(m)
        if ops[0].shape[-1] != ops[1].shape[-2 if ops[1].ndim > 1 else -1]:
            raise ValueError(f"{self.info.op_type}: A' {ops[0].shape} and B' {ops[1].shape}: inner dimensions differ")
        y = self.product(*ops)
        if self.alpha != 1.0:
            y = y * self.alpha
        return (self.narrow(y if y.ndim else xp.asarray(y), a),)


_SPARSE_MM = (np.float32, np.float64, np.int32, np.int64, np.uint32, np.uint64)


@library.define("SparseToDenseMatMul", 1, domain=MS, signature=(("T", "T1"), ("T1",)),
                types={"T": _SPARSE_MM, "T1": _SPARSE_MM}, host_inputs=(0,))
class SparseToDenseMatMul(OpKernel):
    """alpha * A' @ B' for a sparse 2-D A (COO with (row, col) pairs, or CSR; a host
    value, as the session passes sparse tensors) and a dense 2-D B, ``transA``/``transB``
    transposing them. As onnxruntime, ``alpha`` applies to float32 only (ignored for
    float64 and the integer types). A is made
    dense on the host and the product runs on the backend (a known gap: no sparse GEMM)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.alpha = float(info.attr("alpha", 1.0))
        self.trans_a, self.trans_b = bool(info.attr("transA", 0)), bool(info.attr("transB", 0))

    def compute(self, a, b):
        xp = self.xp
        if not hasattr(a, "to_dense") or len(a.dense_shape()) != 2 or b.ndim != 2:
            raise ValueError("SparseToDenseMatMul: A must be a 2-D sparse tensor and B a 2-D tensor")
        dense = xp.asarray(np.ascontiguousarray(a.to_dense()))
        am = xp.matrix_transpose(dense) if self.trans_a else dense
        bm = xp.matrix_transpose(b) if self.trans_b else b
        if am.shape[1] != bm.shape[0]:
            raise ValueError(f"SparseToDenseMatMul: A' {am.shape} and B' {bm.shape}: inner dimensions differ")
        y = xp.matmul(xp.astype(am, b.dtype), bm)
        return (y * self.alpha if self.alpha != 1.0 and dtype_name(y.dtype) == "float32" else y,)


library.define("TransposeMatMul", 1, domain=MS, signature=(("T", "T"), ("T",)), types={"T": F32})(FusedMatMul)


# --------------------------------------------------------------------------- pools


@library.define("NhwcMaxPool", 1, domain=MS, signature=(("T",), ("T",)), types={"T": (np.int8, np.uint8)})
class NhwcMaxPool(_MaxPool):
    """MaxPool of a channels-last (N, *spatial, C) int8/uint8 tensor."""

    def compute(self, x):
        xp = self.xp
        r = x.ndim
        (y,) = super().compute(xp.permute_dims(x, (0, r - 1) + tuple(range(1, r - 1))))
        return (xp.permute_dims(y, (0,) + tuple(range(2, r)) + (1,)),)


@library.define("MaxpoolWithMask", 1, domain=MS, signature=(("T", "I"), ("T",)),
                types={"T": F32, "I": (np.int32,)})
class MaxpoolWithMask(_MaxPool):
    """onnxruntime's MaxpoolWithMask (1-3 spatial axes), quirks included: scanning each
    window row by row, a zero in the mask stops the scan of the rest of that row (along
    the last axis; in 1-D, the rest of the window); the mask's first element never counts
    as zero in 2-D/3-D; a window left empty gives the lowest float; plane ``p`` (flat
    batch * channel) of X reads the mask from flat offset ``p * plane % (mask N * C)``;
    padding is skipped and dilations are ignored (as there)."""

    def compute(self, x, m):
        xp = self.xp
        if m.ndim != x.ndim or x.ndim not in (3, 4, 5) or tuple(m.shape[2:]) != tuple(x.shape[2:]) \
                or min(m.shape[:2]) < 1:
            raise ValueError(f"MaxpoolWithMask: mask {m.shape} does not fit X {x.shape} (1-3 spatial axes)")
        n, c = x.shape[:2]
        sp = tuple(x.shape[2:])
        plane = math.prod(sp)
        i64 = self.backend.dtype(np.int64)
        starts = (xp.arange(n * c, dtype=i64) * plane) % (m.shape[0] * m.shape[1])
        idx = xp.reshape(starts, (-1, 1)) + xp.reshape(xp.arange(plane, dtype=i64), (1, -1))
        keep = xp.take(xp.reshape(m, (-1,)), xp.reshape(idx, (-1,))) != 0
        if len(sp) > 1:  # ``input_index > 0``: the first element is never masked
            keep = xp.reshape(keep, (n * c, plane))
            keep = xp.concat([xp.ones((n * c, 1), dtype=xp.bool), keep[:, 1:]], axis=1)
        keep = xp.reshape(keep, tuple(x.shape))
        k, s, _, win = self._geometry(x)
        ones = (1,) * len(k)
        xs = self._taps(x, k, s, ones, win, -math.inf)
        ks = self._taps(xp.astype(keep, x.dtype), k, s, ones, win, 1.0)  # padding never stops a scan
        lowest = xp.asarray(float(np.finfo(np.float32).min), dtype=x.dtype)
        best = xp.full(xs[0].shape, float(np.finfo(np.float32).min), dtype=x.dtype)
        run = None
        for t, (xt, kt) in enumerate(zip(xs, ks)):
            run = kt if t % k[-1] == 0 and len(k) > 1 else run * kt if run is not None else kt
            best = xp.maximum(best, xp.where(run > 0, xt, lowest))
        return (best,)


# ------------------------------------------------------------- standard reuses


@library.define("GridSample", 1, domain=MS, signature=(("T1", "T2"), ("T1",)), types={"T1": F32, "T2": F32})
class GridSample(_GridSample):
    """com.microsoft GridSample: onnx GridSample v16's semantics (bilinear, nearest,
    bicubic; zeros/border/reflection padding; align_corners), 4-D."""


@library.define("Inverse", 1, domain=MS, signature=(("T",), ("T",)),
                types={"T": (np.float32, np.float64, np.float16)})
class Inverse(OpKernel):
    """The inverse of each matrix in the last two axes (float16 computed in float32)."""

    def compute(self, x):
        if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
            raise ValueError(f"Inverse: input must be (..., n, n), got shape {x.shape}")
        return (self.narrow(self.xp.linalg.inv(self.widen(x)), x),)


@library.define("Trilu", 1, domain=MS, signature=(("T", "K"), ("T",)),
                types={"T": (np.float32, np.float64, np.int64), "K": (np.int64,)}, host_inputs=(1,))
class Trilu(_Trilu):
    """com.microsoft Trilu: onnx Trilu's semantics."""


@library.define("GatherND", 1, domain=MS, signature=(("T", "Tind"), ("T",)),
                types={"T": _ALL, "Tind": (np.int32, np.int64)})
class GatherND(_GatherND):
    """com.microsoft GatherND: onnx GatherND without ``batch_dims``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.b = 0


@library.define("Pad", 1, domain=MS, signature=(("T", "P", "T"), ("T",)),
                types={"T": F32, "P": (np.int64,)}, host_inputs=(1, 2))
class Pad(_Pad):
    """com.microsoft Pad: ``pads`` ([2 * rank] or [1, 2 * rank]) and the optional scalar
    ``value`` are inputs; modes constant, reflect, edge."""


@library.define("Range", 1, domain=MS, signature=(("T", "T", "T"), ("T",)),
                types={"T": (np.int32, np.int64, np.float32, np.float64, np.int16)}, host_inputs=(0, 1, 2))
class Range(_Range):
    """com.microsoft Range: onnx Range with ``delta`` optional (default 1)."""

    def compute(self, start, limit, delta=None):
        if delta is None:
            delta = np.ones((), dtype=self.host(start).dtype)
        return super().compute(start, limit, delta)


@library.define("Unique", 1, domain=MS, signature=(("T",), ("T", "I", "I")), types={"T": F32, "I": (np.int64,)})
class Unique(_Unique):
    """com.microsoft Unique of a 1-D tensor: the unique values in order of first
    occurrence, each input's index into them, and their counts."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.sorted, self.axis = False, None

    def compute(self, x):
        if x.ndim != 1:
            raise ValueError(f"Unique: the input must be 1-D, got shape {x.shape}")
        y, _, inverse, counts = super().compute(x)
        return (y, inverse, counts)


@library.define("ExpandDims", 1, domain=MS, signature=(("T", "A"), ("T",)),
                types={"T": _ALL, "A": (np.int32,)}, host_inputs=(1,))
class ExpandDims(OpKernel):
    """X with a size-1 axis inserted at ``axis`` (in [-rank-1, rank])."""

    def compute(self, x, axis):
        (a,) = self.host_ints(axis)
        r = x.ndim
        if not -r - 1 <= a <= r:
            raise ValueError(f"ExpandDims: axis {a} is outside [{-r - 1}, {r}]")
        a = a + r + 1 if a < 0 else a
        return (self.xp.reshape(x, tuple(x.shape[:a]) + (1,) + tuple(x.shape[a:])),)


@library.define("CDist", 1, domain=MS, signature=(("T", "T"), ("T",)), types={"T": (np.float32, np.float64)})
class CDist(OpKernel):
    """Pairwise distances between the rows of A (N, D) and B (M, D): ``euclidean`` or
    ``sqeuclidean``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.metric = info.attr("metric", "sqeuclidean")
        if self.metric not in ("euclidean", "sqeuclidean"):
            raise _invalid(self, f"metric {self.metric!r} must be euclidean or sqeuclidean")

    def compute(self, a, b):
        xp = self.xp
        if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
            raise ValueError(f"CDist: A {a.shape} and B {b.shape} must be (N, D) and (M, D)")
        d = a[:, None, :] - b[None, :, :]
        y = xp.sum(d * d, axis=-1)
        return (xp.sqrt(y) if self.metric == "euclidean" else y,)


# ------------------------------------------------------------ convolution variants


@library.define("ConvTransposeWithDynamicPads", 1, domain=MS, signature=(("T", "T", "P", "T"), ("T",)),
                types={"T": F32, "P": (np.int64,)}, host_inputs=(2,))
class ConvTransposeWithDynamicPads(_ConvTranspose):
    """ConvTranspose whose ``pads`` come from the third input (int64, 2 * spatial values;
    empty: the attribute's) instead of the attribute; B is the fourth input. onnxruntime
    requires the Pads input though the schema marks it optional; so does this kernel."""

    def compute(self, x, w, pads=None, b=None):
        if pads is None:  # as onnxruntime
            raise ValueError("ConvTransposeWithDynamicPads: the Pads input is required")
        if math.prod(pads.shape):
            p = tuple(self.host_ints(pads))
            if p != self.attrs.pads:
                self.attrs = dataclasses.replace(self.attrs, pads=p)
                self._last_plan = None
        return super().compute(x, w, b)


# ------------------------------------------------------------------- crops, RoIs


@library.define("CropAndResize", 1, domain=MS, signature=(("T1", "T1", "T2", "T2"), ("T1",)),
                types={"T1": F32, "T2": (np.int32,)}, host_inputs=(1, 2, 3))
class CropAndResize(OpKernel):
    """TensorFlow's crop_and_resize: each box (y1, x1, y2, x2, normalized) of image
    ``batch_indices[i]`` resampled to ``crop_size`` (bilinear or nearest); samples outside
    the image take ``extrapolation_value``. The sample positions and weights are planned on
    the host from the boxes; the pixels are gathered on the device."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.mode = info.attr("mode", "bilinear")
        if self.mode not in ("bilinear", "nearest"):
            raise _invalid(self, f"mode {self.mode!r} must be bilinear or nearest")
        self.extrapolation = float(info.attr("extrapolation_value", 0.0))

    @staticmethod
    def _axis(lo: np.ndarray, hi: np.ndarray, size: int, n: int) -> np.ndarray:
        """The sample coordinates (boxes, n) along one axis of ``size`` pixels."""
        if n > 1:
            return lo[:, None] * (size - 1) + np.arange(n) * ((hi - lo) * (size - 1) / (n - 1))[:, None]
        return np.broadcast_to((0.5 * (lo + hi) * (size - 1))[:, None], (lo.shape[0], n))

    def compute(self, x, rois, batch_indices, crop_size):
        xp = self.xp
        boxes = self.host(rois).astype(np.float32).reshape(-1, 4)
        idx = self.host(batch_indices).astype(np.int64).reshape(-1)
        ch, cw = self.host_ints(crop_size)
        if x.ndim != 4 or idx.size != boxes.shape[0] or ch <= 0 or cw <= 0:
            raise ValueError(f"CropAndResize: X {x.shape} (N, C, H, W), rois {boxes.shape}, "
                             f"batch_indices {idx.shape}, crop_size {[ch, cw]} do not fit")
        n, c, h, w = x.shape
        if idx.size and (idx.min() < 0 or idx.max() >= n):
            raise ValueError(f"CropAndResize: batch_indices {idx.tolist()} out of range for batch {n}")
        ys = self._axis(boxes[:, 0], boxes[:, 2], h, ch)  # (R, ch)
        xs = self._axis(boxes[:, 1], boxes[:, 3], w, cw)  # (R, cw)
        inside = ((ys >= 0) & (ys <= h - 1))[:, :, None] & ((xs >= 0) & (xs <= w - 1))[:, None, :]
        if self.mode == "nearest":
            taps = [(np.floor(ys + 0.5), np.floor(xs + 0.5), 1.0)]  # C's roundf: halves away from 0
        else:
            y0, x0 = np.floor(ys), np.floor(xs)
            ty, tx = (ys - y0)[:, :, None], (xs - x0)[:, None, :]
            y1, x1 = np.ceil(ys), np.ceil(xs)
            taps = [(y0, x0, (1 - ty) * (1 - tx)), (y0, x1, (1 - ty) * tx),
                    (y1, x0, ty * (1 - tx)), (y1, x1, ty * tx)]
        planes = xp.reshape(xp.permute_dims(x, (1, 0, 2, 3)), (c, n * h * w))
        out = None
        for ty_, tx_, wt in taps:
            flat = (idx[:, None, None] * h + np.clip(ty_, 0, h - 1).astype(np.int64)[:, :, None]) * w \
                + np.clip(tx_, 0, w - 1).astype(np.int64)[:, None, :]
            term = xp.take(planes, xp.asarray(flat.reshape(-1)), axis=1)
            if not isinstance(wt, float):
                term = term * xp.asarray(np.asarray(wt, np.float32).reshape(-1))
            out = term if out is None else out + term
        out = xp.where(xp.asarray(inside.reshape(-1)), out, xp.asarray(self.extrapolation, dtype=out.dtype))
        out = xp.reshape(out, (c, boxes.shape[0], ch, cw))
        return (xp.astype(xp.permute_dims(out, (1, 0, 2, 3)), x.dtype),)


def _roundf(v: float) -> int:
    """C's roundf: halves away from zero (Python's round goes to even)."""
    return int(math.copysign(math.floor(abs(v) + 0.5), v))


@library.define("MaxRoiPool", (1, 22), types={"T": F32}, host_inputs=(1,))
class MaxRoiPool(OpKernel):
    """Max over each of ``pooled_shape`` bins of each RoI (batch, x1, y1, x2, y2 scaled by
    ``spatial_scale`` and rounded, Caffe's RoIPool); an empty bin gives 0. The bins are
    planned on the host from the RoIs; the maxima are taken on the device."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        shape = info.attr("pooled_shape")
        if shape is None or len(shape) != 2 or min(shape) <= 0:
            raise _invalid(self, f"pooled_shape {shape} must be two positive ints")
        self.ph, self.pw = (int(v) for v in shape)
        self.scale = float(info.attr("spatial_scale", 1.0))

    def _bins(self, start: int, end: int, size: int, n: int) -> list[tuple[int, int]]:
        length = max(end - start + 1, 1)
        step = length / n
        return [(min(max(math.floor(i * step) + start, 0), size), min(max(math.ceil((i + 1) * step) + start, 0), size))
                for i in range(n)]

    def compute(self, x, rois):
        xp = self.xp
        r = self.host(rois).astype(np.float64)
        if x.ndim != 4 or r.ndim != 2 or r.shape[1] != 5:
            raise ValueError(f"MaxRoiPool: X {x.shape} must be (N, C, H, W), rois {r.shape} (R, 5)")
        n, c, h, w = x.shape
        zero = xp.zeros((n and c,), dtype=x.dtype)
        outs = []
        for b, x1, y1, x2, y2 in r:
            if not 0 <= int(b) < n:
                raise ValueError(f"MaxRoiPool: batch index {int(b)} out of range for batch {n}")
            sx, sy, ex, ey = (_roundf(v * self.scale) for v in (x1, y1, x2, y2))
            img = x[int(b), ...]
            for hs, he in self._bins(sy, ey, h, self.ph):
                for ws, we in self._bins(sx, ex, w, self.pw):
                    outs.append(zero[:c] if he <= hs or we <= ws else xp.max(img[:, hs:he, ws:we], axis=(1, 2)))
        if not outs:
            return (xp.zeros((0, c, self.ph, self.pw), dtype=x.dtype),)
        y = xp.reshape(xp.stack(outs, axis=1), (c, r.shape[0], self.ph, self.pw))
        return (xp.permute_dims(y, (1, 0, 2, 3)),)


# ------------------------------------------------------------------ host algorithms


def _murmur3_32(data: bytes, seed: int) -> int:
    """MurmurHash3_x86_32 of ``data`` (an unsigned 32-bit value)."""
    c1, c2, mask = 0xCC9E2D51, 0x1B873593, 0xFFFFFFFF
    h = seed & mask
    n = len(data) // 4 * 4
    for k in np.frombuffer(data[:n], dtype="<u4").tolist():
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        h ^= (k * c2) & mask
        h = ((h << 13) | (h >> 19)) & mask
        h = (h * 5 + 0xE6546B64) & mask
    k = 0
    tail = data[n:]
    for i in range(len(tail) - 1, -1, -1):
        k = (k << 8) | tail[i]
    if tail:
        k = (k * c1) & mask
        k = ((k << 15) | (k >> 17)) & mask
        h ^= (k * c2) & mask
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & mask
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & mask
    return h ^ (h >> 16)


@library.define("MurmurHash3", 1, domain=MS, signature=(("T1",), ("T2",)),
                types={"T1": (np.int32, np.uint32, np.int64, np.uint64, np.float32, np.float64, object),
                       "T2": (np.int32, np.uint32)})
class MurmurHash3(OpKernel):
    """MurmurHash3 (x86, 32-bit) of each element with ``seed``: a string's UTF-8 bytes, a
    number's bytes. ``positive`` = 1 gives uint32, else int32 (a host algorithm)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.seed = int(info.attr("seed", 0))
        self.positive = bool(info.attr("positive", 1))

    def compute(self, x):
        v = self.host(x)
        if v.dtype.kind in "OSU":
            items = [str(s).encode("utf-8") for s in v.reshape(-1)]
        else:
            flat = np.ascontiguousarray(v.reshape(-1))
            items = [flat[i:i + 1].tobytes() for i in range(flat.size)]
        h = np.array([_murmur3_32(b, self.seed) for b in items], dtype=np.uint32).reshape(v.shape)
        return (self.xp.asarray(h if self.positive else h.view(np.int32)),)


@library.define("NGramRepeatBlock", 1, domain=MS, signature=(("Tid", "T"), ("T",)),
                types={"Tid": (np.int64,), "T": F32}, host_inputs=(0,))
class NGramRepeatBlock(OpKernel):
    """Scores (batch, vocab) with -inf at each token that would repeat an n-gram of
    ``input_ids`` (batch, seq): the n-gram search runs on the host, the masking on the
    device."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.n = int(info.attr("ngram_size", 0))
        if self.n < 1:
            raise _invalid(self, f"ngram_size {self.n} must be >= 1")

    def compute(self, input_ids, scores):
        ids = self.host(input_ids)
        if ids.ndim != 2 or scores.ndim != 2 or ids.shape[0] != scores.shape[0]:
            raise ValueError(f"NGramRepeatBlock: input_ids {ids.shape} and scores {scores.shape} "
                             "must be (batch, seq) and (batch, vocab)")
        batch, seq = ids.shape
        vocab = scores.shape[1]
        ban = np.zeros((batch, vocab), dtype=bool)
        k = self.n - 1
        for b in range(batch):
            row = ids[b]
            for i in range(seq - k):
                if np.array_equal(row[i:i + k], row[seq - k:]):
                    t = int(row[i + k])
                    if not 0 <= t < vocab:
                        raise ValueError(f"NGramRepeatBlock: token {t} outside the vocabulary of {vocab}")
                    ban[b, t] = True
        xp = self.xp
        return (xp.where(xp.asarray(ban), xp.asarray(-math.inf, dtype=scores.dtype), scores),)


def _separator_spans(text: str, patterns: list[Any]) -> list[tuple[int, int]]:
    """The separator matches (start, end) in ``text``, in order: each pattern's matches,
    an earlier pattern winning where matches of two overlap (onnxruntime's rule)."""
    taken: list[tuple[int, int]] = []
    for pattern in patterns:
        for m in pattern.finditer(text):
            a, b = m.span()
            if b > a and all(b <= s or a >= e for s, e in taken):
                taken.append((a, b))
    return sorted(taken)


@library.define("Tokenizer", 1, domain=MS, signature=(("T",), ("T",)), types={"T": (object,)})
class Tokenizer(OpKernel):
    """Split each string of X ([C] or [N, C]) into tokens, padded with ``pad_value`` to the
    longest row (an extra last axis), between start/end marks (0x02, 0x03; the padding
    after the end mark) when ``mark``.
    Tokens are the text between matches of the ``separators`` (regular expressions; ``[""]``
    splits into characters), or the matches of ``tokenexp`` when no separators are given;
    tokens shorter than ``mincharnum`` are dropped. A host algorithm over Python's ``re``
    (onnxruntime uses RE2: the common syntax agrees)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        for name in ("mark", "pad_value", "mincharnum"):
            if info.attr(name) is None:
                raise _invalid(self, f"attribute {name!r} is required")
        self.mark = bool(info.attr("mark"))
        pad = info.attr("pad_value")
        self.pad = pad.decode() if isinstance(pad, bytes) else str(pad)
        self.mincharnum = int(info.attr("mincharnum"))
        seps = [v.decode() if isinstance(v, bytes) else str(v) for v in info.attr("separators", []) or []]
        exp = info.attr("tokenexp")
        exp = exp.decode() if isinstance(exp, bytes) else exp
        if not seps and not exp:
            raise _invalid(self, "give separators or tokenexp")
        self.chars = seps == [""]
        if self.chars and self.mincharnum > 1:
            raise _invalid(self, f"mincharnum {self.mincharnum} is too big for character tokenization")
        if not self.chars and "" in seps:
            raise _invalid(self, "no empty separators allowed (except a single one: characters)")
        try:
            self.seps = [re.compile(v) for v in seps] if not self.chars else []
            self.exp = re.compile(exp) if exp and not seps else None
        except re.error as e:
            raise _invalid(self, f"bad regular expression: {e}") from None

    def tokens(self, text: str) -> list[str]:
        """The tokens of one string."""
        if self.chars:
            return list(text)
        if self.exp is not None:
            found = [m.group(0) for m in self.exp.finditer(text)]
        else:
            found, start = [], 0
            for a, b in _separator_spans(text, self.seps):
                found.append(text[start:a])
                start = b
            found.append(text[start:])
        return [t for t in found if t and len(t) >= self.mincharnum]

    def compute(self, x):
        v = self.host(x)
        if v.ndim not in (1, 2) or v.size == 0:
            raise ValueError(f"Tokenizer: input must be a non-empty [C] or [N, C] tensor, got shape {v.shape}")
        rows = [self.tokens(s.decode() if isinstance(s, bytes) else str(s)) for s in v.reshape(-1)]
        width = max(len(r) for r in rows)
        if width == 0:
            return (np.empty(v.shape + (0,), dtype=object),)
        marks = (["\x02"], ["\x03"]) if self.mark else ([], [])
        # The end mark follows the tokens; the padding comes after it (as onnxruntime 1.32).
        out = [marks[0] + r + marks[1] + [self.pad] * (width - len(r)) for r in rows]
        return (np.array(out, dtype=object).reshape(v.shape + (width + 2 * self.mark,)),)


@library.define("WordConvEmbedding", 1, domain=MS, signature=(("T", "T1", "T1", "T1"), ("T1",)),
                types={"T": (np.int32,), "T1": F32})
class WordConvEmbedding(OpKernel):
    """Word embeddings from characters: ``Sequence`` [S, L] (char ids, 0 = none), each
    word's chars embedded by ``C`` [V, E], convolved with ``W`` [M, 1, fw, E] + ``B``,
    tanh, max over the word's windows -> [S, M]. As onnxruntime: a word's length counts
    its non-zero ids (0 when the first is 0); its first max(length, fw) positions are
    embedded; a word of length 0 has no windows (onnxruntime leaves its row unwritten;
    here it is 0)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.checks = {name: int(info.attr(name, -1)) for name in
                       ("embedding_size", "conv_window_size", "char_embedding_size")}

    def compute(self, seq, w, b, c):
        xp = self.xp
        if seq.ndim != 2 or w.ndim != 4 or c.ndim != 2 or w.shape[3] != c.shape[1] or b.shape != (w.shape[0],):
            raise ValueError(f"WordConvEmbedding: Sequence {seq.shape}, W {w.shape}, B {b.shape}, C {c.shape} "
                             "must be [S, L], [M, 1, fw, E], [M], [V, E]")
        got = {"embedding_size": w.shape[0], "conv_window_size": w.shape[2], "char_embedding_size": c.shape[1]}
        for name, want in self.checks.items():
            if want != -1 and got[name] != want:
                raise ValueError(f"WordConvEmbedding: {name} is {want}, the weights say {got[name]}")
        s, length = seq.shape
        m, fw, e = w.shape[0], w.shape[2], c.shape[1]
        if fw > length:
            raise ValueError(f"WordConvEmbedding: the window {fw} is longer than the words ({length})")
        i32 = seq.dtype
        pos = xp.arange(length, dtype=i32)
        count = xp.sum(xp.astype(seq > 0, i32), axis=1) * xp.astype(seq[:, 0] > 0, i32)
        span = xp.where(count > 0, xp.maximum(count, xp.asarray(fw, dtype=i32)), xp.zeros_like(count))
        emb = xp.reshape(xp.take(c, xp.reshape(seq, (-1,)), axis=0), (s, length, e))
        emb = xp.where(xp.reshape(pos, (1, -1, 1)) < xp.reshape(span, (-1, 1, 1)), emb, xp.zeros((), dtype=emb.dtype))
        wm = xp.matrix_transpose(xp.reshape(w, (m, fw * e)))
        best = xp.full((s, m), -1e12, dtype=c.dtype)
        for u in range(length - fw + 1):
            y = xp.tanh(xp.matmul(xp.reshape(emb[:, u:u + fw, :], (s, fw * e)), wm) + b)
            best = xp.where(xp.reshape(u < span - fw + 1, (-1, 1)), xp.maximum(best, y), best)
        return (xp.where(xp.reshape(count > 0, (-1, 1)), best, xp.zeros((), dtype=best.dtype)),)


@library.define("BifurcationDetector", 1, domain=MS, signature=(("T", "T", "T", "T"), ("T", "T")),
                types={"T": (np.int64,)}, host_inputs=(0, 1, 2, 3))
class BifurcationDetector(OpKernel):
    """Speculative decoding's bookkeeping (a host algorithm over token ids, a port of
    onnxruntime's kernel): the output tokens are ``cur_tokens`` plus the predicted tokens
    up to and including their first difference from ``src_tokens`` (read from
    ``prev_suffix_match_idx``); then, for n-gram sizes min..max, the position in
    ``src_tokens`` just after the only occurrence of the output's last n tokens (-1 when
    there are several; the scan stops at a size with none, keeping the last answer)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.lo, self.hi = int(info.attr("min_ngram_size", 0)), int(info.attr("max_ngram_size", 0))
        if not 0 < self.lo <= self.hi:
            raise _invalid(self, f"min_ngram_size {self.lo} and max_ngram_size {self.hi} must satisfy 0 < min <= max")

    @staticmethod
    def _find(hay: list[int], needle: list[int], start: int = 0) -> int:
        """The first index >= start of ``needle`` in ``hay``, or -1."""
        k = len(needle)
        return next((i for i in range(start, len(hay) - k + 1) if hay[i:i + k] == needle), -1)

    def compute(self, src_tokens, cur_tokens, prev_suffix_match_idx, pred_tokens=None):
        src = self.host_ints(src_tokens)
        tokens = self.host_ints(cur_tokens)
        prev = self.host(prev_suffix_match_idx)
        if pred_tokens is not None:
            start = int(prev.reshape(-1)[0])
            pred = self.host_ints(pred_tokens)
            if not 0 <= start <= len(src) or len(pred) != len(src) + 1 - start:
                raise ValueError(f"BifurcationDetector: prev_suffix_match_idx {start} and {len(pred)} predicted "
                                 f"tokens do not fit {len(src)} source tokens (expected {len(src) + 1 - start})")
            bifur = next((i for i in range(len(src) - start) if pred[i] != src[i + start]), len(src) - start)
            tokens = tokens + pred[:bifur + 1]
        suffix = -1
        for n in range(self.lo, self.hi + 1):
            if n > len(tokens):
                break
            gram = tokens[len(tokens) - n:]
            at = self._find(src, gram)
            if at < 0:
                break
            suffix = at + n
            if suffix >= len(src):
                break
            if self._find(src, gram, suffix - n + 1) >= 0:
                suffix = -1
        xp, i64 = self.xp, self.backend.dtype(np.int64)
        return (xp.asarray(tokens, dtype=i64), xp.reshape(xp.asarray([suffix], dtype=i64), prev.shape))


@library.define("NGramHashMapping", 1, domain=MS, signature=(("M",) * 6 + ("S",), ("M", "M")),
                types={"M": (np.int32, np.int64), "S": (np.int32,)}, host_inputs=(5,))
class NGramHashMapping(OpKernel):
    """Engram n-gram hash ids: for n in 2..max_ngram_size, ``mix`` = XOR over k < n of
    ``id[t - k] * multipliers[k]`` (wrapping in the ids' type), then ``mix`` floor-modulo
    each of the n-gram's ``n_head_per_ngram`` vocabulary sizes (+ ``head_offsets``).
    History before the chunk comes from ``past_ids`` (right-aligned), else ``eos_token_id``
    when given, else ``pad_id``; ``present_ids`` are the last max_ngram_size - 1 ids.
    With ``reset_on_eos``, a shifted id at or before the latest EOS strictly before t is
    ``eos_token_id``; a change of ``segment_ids`` between t - k and t replaces it with the
    missing-history value."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.n = int(info.attr("max_ngram_size", 0))
        self.heads = int(info.attr("n_head_per_ngram", 0))
        if self.n < 2 or self.heads < 1 or info.attr("pad_id") is None:
            raise _invalid(self, f"max_ngram_size {self.n} must be >= 2, n_head_per_ngram {self.heads} >= 1, "
                                 "and pad_id is required")
        self.pad = int(info.attr("pad_id"))
        self.reset = bool(info.attr("reset_on_eos", 0))

    def compute(self, ids, multipliers, vocab_sizes, past_ids=None, head_offsets=None, eos_token_id=None,
                segment_ids=None):
        xp, h = self.xp, self.n - 1
        if ids.ndim != 2 or math.prod(multipliers.shape) < self.n or math.prod(vocab_sizes.shape) != h * self.heads:
            raise ValueError(f"NGramHashMapping: input_ids {ids.shape} must be (batch, seq), multipliers "
                             f"{multipliers.shape} hold {self.n} values and vocab_sizes {vocab_sizes.shape} "
                             f"{h * self.heads}")
        b, s = ids.shape
        eos = None if eos_token_id is None else int(self.host(eos_token_id).reshape(-1)[0])
        fill = xp.asarray(self.pad if eos is None else eos, dtype=ids.dtype)
        if past_ids is not None:
            if tuple(past_ids.shape) != (b, h):
                raise ValueError(f"NGramHashMapping: past_ids {past_ids.shape} must be ({b}, {h})")
            history = past_ids
        else:
            history = xp.full((b, h), self.pad if eos is None else eos, dtype=ids.dtype)
        ext = xp.concat([history, ids], axis=1)  # position t of the chunk is ext[:, h + t]
        mults = xp.reshape(multipliers, (-1,))
        vocab = xp.reshape(vocab_sizes, (-1,))
        boundary = None
        if segment_ids is not None:
            same = segment_ids[:, 1:] == segment_ids[:, :-1]
            boundary = xp.concat([xp.zeros((b, 1), dtype=xp.bool), ~same], axis=1)
        mix = ids * mults[0]
        outs = []
        hit = xp.zeros((b, s), dtype=xp.bool)  # whether id[t - k] is reset
        eos_hit = xp.zeros((b, s), dtype=xp.bool)
        for k in range(1, self.n):
            shifted = ext[:, h - k:h - k + s]  # id[t - k]
            if self.reset and eos is not None:  # an EOS among id[t - k .. t - 1]
                eos_hit = eos_hit | (shifted == eos)
                shifted = xp.where(eos_hit, xp.asarray(eos, dtype=ids.dtype), shifted)
            if boundary is not None:  # a segment change in (t - k, t]
                lag = min(k - 1, s)
                hit = hit | (boundary if lag == 0 else xp.concat(
                    [xp.zeros((b, lag), dtype=xp.bool), boundary[:, :s - lag]], axis=1))
                shifted = xp.where(hit, fill, shifted)
            mix = xp.bitwise_xor(mix, shifted * mults[k])
            for j in range(self.heads):
                outs.append(xp.remainder(mix, vocab[(k - 1) * self.heads + j]))
        y = xp.stack(outs, axis=-1)
        if head_offsets is not None:
            y = y + xp.reshape(head_offsets, (1, 1, -1))
        return (y, ext[:, s:])


@library.define("DynamicTimeWarping", 1, domain=MS, signature=(("F",), ("I",)),
                types={"F": F32, "I": (np.int32,)})
class DynamicTimeWarping(OpKernel):
    """The minimal-cost monotonic path through a cost matrix [M, N] (or [1, M, N]) as
    int32 [2, L] (row indices, column indices) — a dynamic program, sequential by nature:
    a host algorithm. Ties go as in onnxruntime: the diagonal only when strictly cheapest,
    then up, else left."""

    def compute(self, x):
        v = self.host(x)
        if not (v.ndim == 2 or (v.ndim == 3 and v.shape[0] == 1)):
            raise ValueError(f"DynamicTimeWarping: input must be [M, N] or [1, M, N], got shape {v.shape}")
        v = v.reshape(v.shape[-2:]).astype(np.float32)
        rows, cols = v.shape
        cost = np.full((rows + 1, cols + 1), np.inf, dtype=np.float32)
        cost[0, 0] = 0
        trace = np.full((rows + 1, cols + 1), -1, dtype=np.int8)
        for j in range(1, cols + 1):
            for i in range(1, rows + 1):
                c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
                t = 0 if c0 < c1 and c0 < c2 else 1 if c1 < c0 and c1 < c2 else 2
                cost[i, j] = (c0, c1, c2)[t] + v[i - 1, j - 1]
                trace[i, j] = t
        path = []
        i, j = rows, cols
        while i > 0 and j > 0:
            path.append((i - 1, j - 1))
            t = trace[i, j]
            i, j = (i - 1, j - 1) if t == 0 else (i - 1, j) if t == 1 else (i, j - 1)
        out = np.array(path[::-1], dtype=np.int32).reshape(-1, 2).T
        return (self.xp.asarray(np.ascontiguousarray(out)),)


@library.define("UnfoldTensor", 1, domain=MS, signature=(("T",), ("T",)),
                types={"T": (np.float32, np.float64, np.int32, np.int64)})
class UnfoldTensor(OpKernel):
    """Windows of ``size`` elements every ``step`` along axis ``dim`` (torch's unfold):
    that axis becomes the window count and the window is a new last axis. onnxruntime
    registers every type but computes float, double, int32 and int64 only: so does this."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.dim, self.size, self.step = (int(info.attr(k, d)) for k, d in (("dim", -1), ("size", 0), ("step", 1)))
        if self.size < 1 or self.step < 1:
            raise _invalid(self, f"size {self.size} and step {self.step} must be >= 1")

    def compute(self, x):
        xp = self.xp
        r = x.ndim
        if not -r <= self.dim < r:
            raise ValueError(f"UnfoldTensor: dim {self.dim} is outside the input's rank {r}")
        d = self.dim % r
        if x.shape[d] < self.size:
            raise ValueError(f"UnfoldTensor: dimension {x.shape[d]} is shorter than the window {self.size}")
        n = (x.shape[d] - self.size) // self.step + 1
        i64 = self.backend.dtype(np.int64)
        idx = xp.reshape(xp.reshape(xp.arange(n, dtype=i64) * self.step, (-1, 1))
                         + xp.reshape(xp.arange(self.size, dtype=i64), (1, -1)), (-1,))
        y = xp.reshape(xp.take(x, idx, axis=d), tuple(x.shape[:d]) + (n, self.size) + tuple(x.shape[d + 1:]))
        return (xp.permute_dims(y, tuple(range(d + 1)) + tuple(range(d + 2, r + 1)) + (d + 1,)),)


@library.define("SampleOp", 1, domain=MS, signature=(("T",), ("T",)), types={"T": F32})
class SampleOp(OpKernel):
    """onnxruntime's sample operator: a copy of its input."""

    def compute(self, x):
        return (self.xp.asarray(x, copy=True),)


# ------------------------------------------------- legacy default-domain operators

_LEGACY = dict(signature=(("T",), ("T",)), types={"T": F32})


@library.define("ImageScaler", 1, **_LEGACY)
class ImageScaler(FloatAttrs):
    """x * scale + bias[c] per channel of (N, C, ...)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.scale = self.float_attr("scale", 1.0)
        if info.attr("bias") is None:  # onnxruntime requires it
            raise _invalid(self, "attribute 'bias' is required")
        # Made once in the backend's arrays (float32, the only type), not uploaded per run.
        self.bias = self.xp.asarray([float(v) for v in info.attr("bias")], dtype=self.backend.dtype(np.float32))

    def compute(self, x):
        y = x * self.scale
        n = self.bias.shape[0]
        if n:
            if x.ndim < 2 or x.shape[1] != n:
                raise ValueError(f"ImageScaler: {n} biases for an input of shape {x.shape}")
            y = y + self.xp.reshape(self.xp.astype(self.bias, x.dtype), (-1,) + (1,) * (x.ndim - 2))
        return (y,)


class _AlphaBeta(FloatUnary):
    """Base of the legacy activations with ``alpha`` and ``beta`` (both required, as
    onnxruntime's kernels require them)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if info.attr("alpha") is None or info.attr("beta") is None:
            raise _invalid(self, "attributes 'alpha' and 'beta' are required")
        self.alpha, self.beta = self.float_attr("alpha", 1.0), self.float_attr("beta", 1.0)


@library.define("ParametricSoftplus", 1, **_LEGACY)
class ParametricSoftplus(_AlphaBeta):
    """alpha * ln(1 + exp(beta * x)), without overflow for large beta * x."""

    def f(self, x):
        xp, t = self.xp, x * self.beta
        return self.alpha * (xp.maximum(t, xp.zeros((), dtype=t.dtype)) + xp.log1p(xp.exp(-xp.abs(t))))


@library.define("ScaledTanh", 1, **_LEGACY)
class ScaledTanh(_AlphaBeta):
    """alpha * tanh(beta * x)."""

    def f(self, x):
        return self.alpha * self.xp.tanh(x * self.beta)


@library.define("Scale", 1, **_LEGACY)
class Scale(FloatUnary):
    """x * scale (default 1)."""

    def f(self, x):
        return x * self.float_attr("scale", 1.0)


@library.define("Affine", 1, **_LEGACY)
class Affine(FloatUnary):
    """alpha * x + beta (defaults 1 and 0)."""

    def f(self, x):
        return x * self.float_attr("alpha", 1.0) + self.float_attr("beta", 0.0)


@library.define("Crop", 1, **_LEGACY)
class Crop(OpKernel):
    """Crop (N, C, H, W) by ``border`` (left, top, right, bottom; required), or take
    ``scale`` (height, width) from the top-left border when given."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        border = list(info.attr("border", []) or [])
        if len(border) != 4:
            raise _invalid(self, f"attribute border needs four values (left, top, right, bottom), got {border}")
        self.left, self.top, self.right, self.bottom = (int(v) for v in border)
        scale = info.attr("scale")
        self.scale = None if scale is None else [int(v) for v in scale]
        if self.scale is not None and len(self.scale) != 2:
            raise _invalid(self, f"attribute scale needs two values (height, width), got {self.scale}")

    def compute(self, x):
        if x.ndim != 4:
            raise ValueError(f"Crop: the input must be (N, C, H, W), got shape {x.shape}")
        h, w = x.shape[2:]
        if self.scale is not None:
            bottom, right = self.top + self.scale[0], self.left + self.scale[1]
        else:
            bottom, right = h - self.bottom, w - self.right
        if not (0 <= self.top < bottom <= h and 0 <= self.left < right <= w):
            raise ValueError(f"Crop: border/scale leave no valid window of an input of shape {x.shape}")
        return (x[:, :, self.top:bottom, self.left:right],)


@library.define("DynamicSlice", 1, signature=(("T", "Tind", "Tind", "Tind"), ("T",)),
                types={"T": _ALL, "Tind": (np.int32, np.int64)}, host_inputs=(1, 2, 3))
class DynamicSlice(_Slice):
    """Slice v10 without ``steps``: starts, ends and the optional axes are inputs."""

    def compute(self, data, starts, ends, axes=None):
        return super().compute(data, starts, ends, axes)
