"""CPU kernels: sampling and detection ops (GridSample, NonMaxSuppression, RoiAlign, Col2Im,
MaxUnpool, DeformConv).

GridSample works for any number of spatial axes: every output point reads a small set of taps
per axis (1 for nearest, 2 for linear, 4 for cubic), each with a weight, and the padding mode
maps the out-of-range taps (zeros: dropped, border: clamped, reflection: mirrored). The N-D
product of the per-axis taps is gathered tap by tap from the flattened image.

NonMaxSuppression loops over (batch, class) pairs and over the selected boxes only: each
selection computes the IoU of the chosen box with all remaining candidates at once.

RoiAlign groups the regions by their sampling grid so each group is one vectorized bilinear
gather. DeformConv samples its (offset, masked) taps with N-linear interpolation into columns
and multiplies them with the weights per group, like an im2col convolution.

float16/bfloat16 data are computed in float32 and cast back.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry
from ._spatial import compute_dtype, prod, read_spatial_attrs


def _bad(info: KernelInfo, msg: str) -> InvalidGraph:
    return InvalidGraph(f"{info.op_type} node {info.node_name!r}: {msg}")


def _choice(info: KernelInfo, name: str, default: str, allowed: Sequence[str]) -> str:
    value = info.attr(name, default)
    if value not in allowed:
        raise _bad(info, f"attribute {name}={value!r} is not one of {', '.join(allowed)}")
    return value


def _flag(info: KernelInfo, name: str, default: int) -> bool:
    value = info.attr(name, default)
    if value not in (0, 1):
        raise _bad(info, f"attribute {name}={value!r} must be 0 or 1")
    return bool(value)


def _float_type(*arrays: np.ndarray) -> np.dtype[Any]:
    """The float dtype to compute in: float64 if any input is float64 or an integer type."""
    for a in arrays:
        if a.dtype == np.float64 or a.dtype.kind in "iub":
            return np.dtype(np.float64)
    return np.dtype(np.float32)


def _cast_out(values: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``values`` (float) as ``dtype``; integer outputs are rounded first."""
    if dtype.kind in "iu":
        values = np.rint(values)
    return values.astype(dtype, copy=False)


# ---------------------------------------------------------------- GridSample


def _reflect(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Mirror ``x`` at ``lo`` and ``hi`` (repeatedly) until it lies in ``[lo, hi]``."""
    span = hi - lo
    if span <= 0:
        return np.full_like(x, lo)
    t = np.mod(x - lo, 2 * span)
    return lo + np.where(t > span, 2 * span - t, t)


def _cubic_weights(t: np.ndarray, a: float = -0.75) -> list[np.ndarray]:
    """Cubic convolution weights of the taps at -1, 0, 1, 2 for fractions ``t`` in [0, 1)."""

    def near(d: np.ndarray) -> np.ndarray:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: np.ndarray) -> np.ndarray:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


_GRID_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest",
               "bicubic": "cubic", "cubic": "cubic"}  # fmt: skip


@registry.register("GridSample", since=(16, 20, 22))
class GridSample(Kernel):
    """Sample X at the normalized grid locations (nearest/linear/cubic, N-D)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        names = (
            ("bilinear", "nearest", "bicubic")
            if info.since_version < 20
            else ("linear", "nearest", "cubic")
        )
        default = "bilinear" if info.since_version < 20 else "linear"
        self.mode = _GRID_MODES[_choice(info, "mode", default, names)]
        self.padding = _choice(info, "padding_mode", "zeros", ("zeros", "border", "reflection"))
        self.align = _flag(info, "align_corners", 0)

    def _axis_taps(self, g: np.ndarray, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """(index, weight) per tap on one axis for normalized coordinates ``g``."""
        if self.align:
            c = (g + 1) / 2 * (size - 1)
            lo, hi = 0.0, size - 1.0
        else:
            c = ((g + 1) * size - 1) / 2
            lo, hi = -0.5, size - 0.5
        if self.mode != "cubic":
            if self.padding == "border":
                c = np.clip(c, 0, size - 1)
            elif self.padding == "reflection":
                c = _reflect(c, lo, hi)
        if self.mode == "nearest":
            taps = [(np.rint(c), np.ones_like(c))]
        else:
            base = np.floor(c)
            t = c - base
            if self.mode == "linear":
                taps = [(base, 1 - t), (base + 1, t)]
            else:
                taps = [(base + k, w) for k, w in zip((-1, 0, 1, 2), _cubic_weights(t))]
        out = []
        for idx, w in taps:
            if self.padding == "zeros":
                inside = (idx >= 0) & (idx <= size - 1)
                w = np.where(inside, w, 0)
            elif self.padding == "reflection":
                idx = _reflect(idx, lo, hi)
            idx = np.clip(idx, 0, size - 1).astype(np.intp)
            out.append((idx, w))
        return out

    def compute(self, x, grid):
        nsp = x.ndim - 2
        if nsp < 1 or grid.ndim != x.ndim or grid.shape[-1] != nsp or grid.shape[0] != x.shape[0]:
            raise ValueError(
                f"GridSample: grid of shape {grid.shape} does not fit an input of shape {x.shape}"
            )
        n, c = x.shape[:2]
        sizes = x.shape[2:]
        ct = _float_type(x, grid)
        g = grid.astype(ct).reshape(n, 1, -1, nsp)  # (N, 1, P, nsp)
        xf = x.astype(ct, copy=False).reshape(n, c, -1)
        strides = [prod(sizes[d + 1 :]) for d in range(nsp)]
        # grid[..., 0] is the last spatial axis (x), grid[..., 1] the one before (y), ...
        per_axis = [self._axis_taps(g[..., nsp - 1 - d], sizes[d]) for d in range(nsp)]
        out = np.zeros((n, c, g.shape[2]), ct)
        for combo in itertools.product(*per_axis):
            flat = sum(idx * s for (idx, _), s in zip(combo, strides))
            weight = math.prod(w for _, w in combo)
            out += np.take_along_axis(xf, flat, axis=2) * weight
        return (_cast_out(out, x.dtype).reshape(n, c, *grid.shape[1:-1]),)


# ----------------------------------------------------------- NonMaxSuppression


def _scalar(value: np.ndarray | None, default: float) -> float:
    if value is None or np.size(value) == 0:
        return default
    return np.asarray(value).reshape(-1)[0].item()


@registry.register("NonMaxSuppression", since=(10, 11))
class NonMaxSuppression(Kernel):
    """Greedy per-class selection of high-scoring boxes that do not overlap chosen ones."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.center = _flag(info, "center_point_box", 0)

    def _corners(self, boxes: np.ndarray) -> np.ndarray:
        """(y_min, x_min, y_max, x_max) per box, as float64."""
        b = boxes.astype(np.float64)
        if self.center:
            xc, yc, w, h = (b[..., i] for i in range(4))
            return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
        y = np.sort(b[..., 0::2], axis=-1)
        x = np.sort(b[..., 1::2], axis=-1)
        return np.stack([y[..., 0], x[..., 0], y[..., 1], x[..., 1]], axis=-1)

    def compute(self, boxes, scores, max_boxes=None, iou_threshold=None, score_threshold=None):
        if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3:
            raise ValueError(
                f"NonMaxSuppression: boxes {boxes.shape} must be [batches, boxes, 4] and "
                f"scores {scores.shape} [batches, classes, boxes]"
            )
        if scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
            raise ValueError(
                f"NonMaxSuppression: scores {scores.shape} do not match boxes {boxes.shape}"
            )
        limit = int(_scalar(max_boxes, 0))
        iou_thr = float(_scalar(iou_threshold, 0.0))
        score_thr = None if score_threshold is None else float(_scalar(score_threshold, 0.0))
        selected: list[np.ndarray] = []
        if limit > 0:
            corners = self._corners(boxes)
            areas = (corners[..., 2] - corners[..., 0]) * (corners[..., 3] - corners[..., 1])
            s64 = scores.astype(np.float64)
            for b, cls in np.ndindex(scores.shape[0], scores.shape[1]):
                keep = self._select(corners[b], areas[b], s64[b, cls], limit, iou_thr, score_thr)
                if keep.size:
                    rows = np.empty((keep.size, 3), np.int64)
                    rows[:, 0], rows[:, 1], rows[:, 2] = b, cls, keep
                    selected.append(rows)
        if not selected:
            return (np.zeros((0, 3), np.int64),)
        return (np.concatenate(selected),)

    @staticmethod
    def _select(
        corners: np.ndarray,
        areas: np.ndarray,
        scores: np.ndarray,
        limit: int,
        iou_thr: float,
        score_thr: float | None,
    ) -> np.ndarray:
        order = np.argsort(-scores, kind="stable")  # ties: lower box index first
        if score_thr is not None:
            order = order[scores[order] > score_thr]
        chosen: list[int] = []
        while order.size and len(chosen) < limit:
            best, rest = order[0], order[1:]
            chosen.append(int(best))
            if not rest.size:
                break
            top = corners[best]
            others = corners[rest]
            h = np.minimum(top[2], others[:, 2]) - np.maximum(top[0], others[:, 0])
            w = np.minimum(top[3], others[:, 3]) - np.maximum(top[1], others[:, 1])
            inter = np.maximum(h, 0) * np.maximum(w, 0)
            union = areas[best] + areas[rest] - inter
            with np.errstate(divide="ignore", invalid="ignore"):
                iou = inter / union
            overlaps = (inter > 0) & (areas[best] > 0) & (areas[rest] > 0) & (union > 0)
            order = rest[~(overlaps & (iou > iou_thr))]
        return np.asarray(chosen, np.int64)


# ------------------------------------------------------------------ RoiAlign


def _roi_axis(
    start: np.ndarray, bin_size: np.ndarray, n_out: int, grid: int, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Bilinear taps on one axis for ``n_out`` bins of ``grid`` samples per region.

    Returns (low index, high index, low weight, high weight, valid), each (R, n_out * grid).
    """
    steps = (np.arange(n_out)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(-1)
    pos = start[:, None] + steps[None, :] * bin_size[:, None]
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.intp)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    return low, high, 1.0 - frac, frac, valid


@registry.register("RoiAlign", since=(10, 16, 22))
class RoiAlign(Kernel):
    """Average or max of bilinear samples over a grid in each bin of each region."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if info.since_version >= 16:
            ctm = _choice(
                info, "coordinate_transformation_mode", "half_pixel",
                ("half_pixel", "output_half_pixel"),
            )  # fmt: skip
        else:
            ctm = "output_half_pixel"
        self.half_pixel = ctm == "half_pixel"
        self.mode = _choice(info, "mode", "avg", ("avg", "max"))
        self.out_h = int(info.attr("output_height", 1))
        self.out_w = int(info.attr("output_width", 1))
        self.sampling_ratio = int(info.attr("sampling_ratio", 0))
        self.scale = float(info.attr("spatial_scale", 1.0))
        if self.out_h < 1 or self.out_w < 1:
            raise _bad(info, "output_height and output_width must be positive")
        if self.sampling_ratio < 0:
            raise _bad(info, f"sampling_ratio={self.sampling_ratio} must not be negative")

    def compute(self, x, rois, batch_indices):
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4:
            raise ValueError(f"RoiAlign: X {x.shape} must be 4-D and rois {rois.shape} (R, 4)")
        n, c, h, w = x.shape
        r = rois.shape[0]
        oh, ow = self.out_h, self.out_w
        ct = compute_dtype(x.dtype) if x.dtype.kind == "f" else np.dtype(np.float64)
        out = np.zeros((r, c, oh, ow), ct)
        if r == 0:
            return (out.astype(x.dtype),)
        batch = np.asarray(batch_indices).astype(np.intp).reshape(-1)
        if batch.shape[0] != r or np.any((batch < 0) | (batch >= n)):
            raise ValueError(f"RoiAlign: batch_indices {batch.tolist()} do not fit X {x.shape}")
        offset = 0.5 if self.half_pixel else 0.0
        box = rois.astype(np.float64) * self.scale - offset
        x0, y0 = box[:, 0], box[:, 1]
        roi_w, roi_h = box[:, 2] - x0, box[:, 3] - y0
        if not self.half_pixel:
            roi_w, roi_h = np.maximum(roi_w, 1.0), np.maximum(roi_h, 1.0)
        bin_h, bin_w = roi_h / oh, roi_w / ow
        if self.sampling_ratio > 0:
            grid_h = np.full(r, self.sampling_ratio)
            grid_w = grid_h
        else:
            grid_h = np.ceil(roi_h / oh).astype(np.int64)
            grid_w = np.ceil(roi_w / ow).astype(np.int64)
        xs = x.astype(ct, copy=False)
        groups = np.stack([grid_h, grid_w], axis=1)
        for gh, gw in np.unique(groups, axis=0):
            sel = np.flatnonzero((grid_h == gh) & (grid_w == gw))
            if gh <= 0 or gw <= 0:
                continue  # an empty sampling grid: the bins stay 0
            out[sel] = self._pool(xs, batch[sel], y0[sel], x0[sel], bin_h[sel], bin_w[sel],
                                  int(gh), int(gw))  # fmt: skip
        return (_cast_out(out, x.dtype),)

    def _pool(self, x, batch, y0, x0, bin_h, bin_w, gh, gw):
        """(R, C, oh, ow) for regions sharing a (gh, gw) sampling grid."""
        h, w = x.shape[2:]
        oh, ow = self.out_h, self.out_w
        yl, yh, wyl, wyh, vy = _roi_axis(y0, bin_h, oh, gh, h)
        xl, xh, wxl, wxh, vx = _roi_axis(x0, bin_w, ow, gw, w)
        valid = (vy[:, :, None] & vx[:, None, :])[:, None]  # (R, 1, Y, X)
        b = batch[:, None, None]
        corners = []
        for yi, wy in ((yl, wyl), (yh, wyh)):
            for xi, wx in ((xl, wxl), (xh, wxh)):
                v = x[b, :, yi[:, :, None], xi[:, None, :]]  # (R, Y, X, C)
                weight = (wy[:, :, None] * wx[:, None, :])[:, None]
                corners.append(np.moveaxis(v, 3, 1) * weight.astype(x.dtype) * valid)
        r, c = len(batch), x.shape[1]
        if self.mode == "avg":
            total = corners[0] + corners[1] + corners[2] + corners[3]
            return total.reshape(r, c, oh, gh, ow, gw).mean(axis=(3, 5))
        best = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
        return best.reshape(r, c, oh, gh, ow, gw).max(axis=(3, 5))


# -------------------------------------------------------------------- Col2Im


def _int_vector(name: str, value: np.ndarray) -> tuple[int, ...]:
    arr = np.asarray(value)
    if arr.ndim != 1 or arr.dtype.kind not in "iu":
        raise ValueError(f"Col2Im: {name} must be a 1-D int64 tensor, got {arr.dtype} {arr.shape}")
    return tuple(int(v) for v in arr)


@registry.register("Col2Im", since=18)
class Col2Im(Kernel):
    """Sum the columns of sliding blocks back into an image (the inverse of im2col)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info)

    def compute(self, x, image_shape, block_shape):
        image = _int_vector("image_shape", image_shape)
        block = _int_vector("block_shape", block_shape)
        nsp = len(image)
        if len(block) != nsp or x.ndim != 3:
            raise ValueError(
                f"Col2Im: input {x.shape}, image_shape {image} and block_shape {block} disagree"
            )
        _, strides, dils, pb, pe = self.attrs.resolve(nsp, block)
        k = prod(block)
        if x.shape[1] % k:
            raise ValueError(f"Col2Im: input dim 1 ({x.shape[1]}) is not a multiple of {k}")
        padded = [i + b + e for i, b, e in zip(image, pb, pe)]
        blocks = [
            (p - d * (kk - 1) - 1) // s + 1 for p, d, kk, s in zip(padded, dils, block, strides)
        ]
        if prod(blocks) != x.shape[2]:
            raise ValueError(
                f"Col2Im: input has {x.shape[2]} blocks, the image and attributes give "
                f"{prod(blocks)} ({blocks})"
            )
        n, c = x.shape[0], x.shape[1] // k
        ct = compute_dtype(x.dtype)
        cols = x.astype(ct, copy=False).reshape(n, c, *block, *blocks)
        out = np.zeros((n, c, *padded), ct)
        for tap in np.ndindex(*block):
            sl = tuple(
                slice(t * d, t * d + s * (nb - 1) + 1, s)
                for t, d, s, nb in zip(tap, dils, strides, blocks)
            )
            out[(slice(None), slice(None), *sl)] += cols[(slice(None), slice(None), *tap)]
        crop = tuple(slice(b, b + i) for b, i in zip(pb, image))
        return (out[(slice(None), slice(None), *crop)].astype(x.dtype, copy=False),)


# ----------------------------------------------------------------- MaxUnpool


@registry.register("MaxUnpool", since=(9, 11, 22))
class MaxUnpool(Kernel):
    """Scatter pooled values back to the positions MaxPool's Indices name; zeros elsewhere."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info, need_kernel=True)

    def compute(self, x, indices, output_shape=None):
        if indices.shape != x.shape:
            raise ValueError(f"MaxUnpool: indices {indices.shape} must match X {x.shape}")
        k, s, _, pb, pe = self.attrs.resolve(x.ndim - 2)
        spatial = [(i - 1) * st + kk - b - e for i, st, kk, b, e in zip(x.shape[2:], s, k, pb, pe)]
        shape = (*x.shape[:2], *spatial)
        out = np.zeros(prod(shape), x.dtype)
        flat = indices.reshape(-1).astype(np.intp)
        if flat.size and (flat.min() < 0 or flat.max() >= out.size):
            raise ValueError(f"MaxUnpool: an index is outside the output of shape {shape}")
        out[flat] = x.reshape(-1)
        out = out.reshape(shape)
        if output_shape is None:
            return (out,)
        # As in the onnx conformance data, the indices address the unpooled tensor of the
        # attributes' shape, which output_shape then pads (at the end) or crops.
        want = tuple(int(v) for v in np.asarray(output_shape).reshape(-1))
        if len(want) != x.ndim or want[:2] != x.shape[:2]:
            raise ValueError(f"MaxUnpool: output_shape {want} does not fit X {x.shape}")
        if want == shape:
            return (out,)
        result = np.zeros(want, x.dtype)
        common = tuple(slice(0, min(a, b)) for a, b in zip(want, shape))
        result[common] = out[common]
        return (result,)


# ---------------------------------------------------------------- DeformConv


@registry.register("DeformConv", since=(19, 22))
class DeformConv(Kernel):
    """Convolution whose taps are moved by learned offsets (N-linear sampling) and masked."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info)
        self.group = int(info.attr("group", 1))
        self.offset_group = int(info.attr("offset_group", 1))
        if self.group < 1 or self.offset_group < 1:
            raise _bad(info, "group and offset_group must be positive")

    def compute(self, x, w, offset, bias=None, mask=None):
        nsp = x.ndim - 2
        if nsp < 1 or w.ndim != x.ndim:
            raise ValueError(f"DeformConv: X {x.shape} and W {w.shape} must have the same rank")
        k, strides, dils, pb, pe = self.attrs.resolve(nsp, w.shape[2:])
        n, c = x.shape[:2]
        oc = w.shape[0]
        grp, ogrp = self.group, self.offset_group
        if c % grp or oc % grp or c % ogrp or w.shape[1] * grp != c:
            raise ValueError(
                f"DeformConv: channels of X {x.shape} / W {w.shape} do not fit group={grp}, "
                f"offset_group={ogrp}"
            )
        sizes = x.shape[2:]
        outs = tuple(
            (i + b + e - d * (kk - 1) - 1) // s + 1
            for i, b, e, d, kk, s in zip(sizes, pb, pe, dils, k, strides)
        )
        ntap, npos = prod(k), prod(outs)
        if offset.shape != (n, ogrp * ntap * nsp, *outs):
            raise ValueError(
                f"DeformConv: offset {offset.shape}, expected {(n, ogrp * ntap * nsp, *outs)}"
            )
        ct = compute_dtype(x.dtype)
        off = offset.astype(ct, copy=False).reshape(n, ogrp, ntap, nsp, npos)
        # Undeformed sampling positions per axis: (taps, out positions).
        tap_idx = np.indices(k).reshape(nsp, ntap)
        out_idx = np.indices(outs).reshape(nsp, npos)
        per_axis = []
        for d in range(nsp):
            base = out_idx[d] * strides[d] - pb[d] + tap_idx[d][:, None] * dils[d]
            pos = base + off[:, :, :, d]  # (N, og, taps, P)
            low = np.floor(pos)
            frac = pos - low
            taps = []
            for idx, wt in ((low, 1 - frac), (low + 1, frac)):
                inside = (idx >= 0) & (idx <= sizes[d] - 1)
                taps.append(
                    (np.clip(idx, 0, sizes[d] - 1).astype(np.intp), np.where(inside, wt, 0))
                )
            per_axis.append(taps)
        xg = x.astype(ct, copy=False).reshape(n, ogrp, c // ogrp, -1)
        axis_strides = [prod(sizes[d + 1 :]) for d in range(nsp)]
        cols = np.zeros((n, ogrp, c // ogrp, ntap * npos), ct)
        for combo in itertools.product(*per_axis):
            flat = sum(idx * s for (idx, _), s in zip(combo, axis_strides))
            weight = math.prod(wt for _, wt in combo)
            flat = flat.reshape(n, ogrp, 1, ntap * npos)
            cols += np.take_along_axis(xg, flat, axis=3) * weight.reshape(flat.shape)
        cols = cols.reshape(n, ogrp, c // ogrp, ntap, npos)
        if mask is not None:
            m = mask.astype(ct, copy=False).reshape(n, ogrp, 1, ntap, npos)
            cols = cols * m
        cols = cols.reshape(n, grp, (c // grp) * ntap, npos)
        wg = w.astype(ct, copy=False).reshape(grp, oc // grp, (c // grp) * ntap)
        y = np.matmul(wg, cols).reshape(n, oc, *outs)
        if bias is not None:
            y = y + bias.astype(ct, copy=False).reshape(oc, *(1,) * nsp)
        return (y.astype(x.dtype, copy=False),)
