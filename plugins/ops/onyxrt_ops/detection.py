"""Sampling and detection operators, written once over an array namespace: GridSample,
RoiAlign, NonMaxSuppression, Col2Im, MaxUnpool and DeformConv, with every ONNX version of
each.

GridSample (any number of spatial axes) and DeformConv read their samples by gathering:
every output point reads a few taps per axis (1 for nearest, 2 for linear, 4 for cubic),
each with a weight, and the padding mode maps the out-of-range taps (zeros: dropped,
border: clamped, reflection: mirrored); the N-D product of the per-axis taps is gathered
tap by tap from the flattened image with ``take_along_axis``. DeformConv multiplies its
(offset, masked) sampled columns with the weights per group in one ``matmul``, as an
im2col convolution. Col2Im adds each block tap into a strided basic slice of the image.

RoiAlign's regions steer the shape of the sampling grids (with ``sampling_ratio=0`` the
grid of a region depends on its size), so ``rois`` and ``batch_indices`` are host inputs:
the geometry (sample indices and bilinear weights) is worked out on the host in float64,
regions grouped by sampling grid, and each group is one gather of the image on the
backend (two host→device copies per group: its indices and weights).

NonMaxSuppression's output size depends on the data and its greedy selection is a loop
over chosen boxes, so it runs on the host with numpy on ``self.host()`` copies of its
inputs (boxes and scores are copied back from a device) and the selected indices are
handed to the backend with ``xp.asarray``; its three scalar inputs are host inputs.

MaxUnpool scatters with an integer-array assignment the array API standard lacks; it
is built from ``argsort``/``take``/``where`` (the last write to an index wins, as a
sequential loop would) and its index range is checked on the host.

float16/bfloat16 data compute in float32 and are rounded once; integer data (GridSample,
RoiAlign) compute in float64 and are rounded to the nearest integer. Attribute errors are
:class:`~onyxrt.errors.InvalidGraph` naming the node, raised when the kernel is built;
errors in the data are ``ValueError`` from ``compute``.

Known gaps: GridSample and DeformConv hold every tap's index array at once per tap
(the output's size); none of these has a fused device path.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt.spatial import prod, read_spatial_attrs

from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []


def _choice(info: KernelInfo, name: str, default: str, allowed: Sequence[str]) -> str:
    value = info.attr(name, default)
    if value not in allowed:
        raise InvalidGraph(f"{info.op_type} node {info.node_name!r}: attribute {name}={value!r} "
                           f"is not one of {', '.join(allowed)}")
    return value


def _flag(info: KernelInfo, name: str, default: int) -> bool:
    value = info.attr(name, default)
    if value not in (0, 1):
        raise InvalidGraph(f"{info.op_type} node {info.node_name!r}: attribute {name}={value!r} "
                           "must be 0 or 1")
    return bool(value)


class _Sampling(OpKernel):
    """Base of the family: the dtype rules shared by its operators."""

    def compute_type(self, *arrays: Any) -> Any:
        """The float dtype to compute in: float64 if any input is float64 or an integer
        (or bool) type, else float32 (half-precision inputs widen to it)."""
        for a in arrays:
            name = dtype_name(a.dtype)
            if name == "float64" or not name.startswith(("float", "bfloat")):
                return self.backend.dtype(np.float64)
        return self.backend.dtype(np.float32)

    def cast_out(self, values: Any, dtype: Any) -> Any:
        """``values`` (float) as ``dtype``; integer outputs are rounded first."""
        if values.dtype == dtype:
            return values
        if not dtype_name(dtype).startswith(("float", "bfloat")):
            values = self.xp.round(values)
        return self.xp.astype(values, dtype)


# ---------------------------------------------------------------- GridSample


def _reflect(xp: Any, x: Any, lo: float, hi: float) -> Any:
    """Mirror ``x`` at ``lo`` and ``hi`` (repeatedly) until it lies in ``[lo, hi]``."""
    span = hi - lo
    if span <= 0:
        return xp.full_like(x, lo)
    t = xp.remainder(x - lo, 2 * span)
    return lo + xp.where(t > span, 2 * span - t, t)


def _cubic_weights(t: Any, a: float = -0.75) -> list[Any]:
    """Cubic convolution weights of the taps at -1, 0, 1, 2 for fractions ``t`` in [0, 1)."""

    def near(d: Any) -> Any:  # |d| <= 1
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d: Any) -> Any:  # 1 < |d| < 2
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


_GRID_MODES = {"bilinear": "linear", "linear": "linear", "nearest": "nearest",
               "bicubic": "cubic", "cubic": "cubic"}  # fmt: skip


def _gather_taps(xp: Any, image: Any, per_axis: list[list[tuple[Any, Any]]],
                 sizes: Sequence[int]) -> Any:
    """The weighted sum over the N-D product of the per-axis (index, weight) taps, gathered
    from ``image`` flattened on its last axis (the indices broadcast over the others)."""
    strides = [prod(sizes[d + 1:]) for d in range(len(sizes))]
    out = None
    for combo in itertools.product(*per_axis):
        flat = sum(idx * s for (idx, _), s in zip(combo, strides))
        weight = math.prod(w for _, w in combo)
        if math.prod(flat.shape[:-1]) == 1:  # one index row (batch 1): a plain, cheaper take
            term = xp.take(image, xp.reshape(flat, (-1,)), axis=-1) * weight
        else:
            term = xp.take_along_axis(image, flat, axis=-1) * weight
        if out is None:
            out = term
        else:  # in place: ``term`` is a fresh array, and no temporary per tap
            out += term
    return out


@library.define("GridSample", (16, 20, 22))
class GridSample(_Sampling):
    """Sample X at the normalized grid locations (nearest/linear/cubic, N-D; v16 names the
    modes bilinear/bicubic and samples 2-D only in the schema, the kernel takes N-D)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        old = info.since_version < 20
        names = ("bilinear", "nearest", "bicubic") if old else ("linear", "nearest", "cubic")
        self.mode = _GRID_MODES[_choice(info, "mode", names[0], names)]
        self.padding = _choice(info, "padding_mode", "zeros", ("zeros", "border", "reflection"))
        self.align = _flag(info, "align_corners", 0)

    def _axis_taps(self, g: Any, size: int) -> list[tuple[Any, Any]]:
        """(index, weight) per tap on one axis for normalized coordinates ``g``."""
        xp = self.xp
        if self.align:
            c = (g + 1) / 2 * (size - 1)
            lo, hi = 0.0, size - 1.0
        else:
            c = ((g + 1) * size - 1) / 2
            lo, hi = -0.5, size - 0.5
        if self.mode != "cubic":
            if self.padding == "border":
                c = xp.clip(c, 0.0, float(size - 1))
            elif self.padding == "reflection":
                c = _reflect(xp, c, lo, hi)
        if self.mode == "nearest":
            taps = [(xp.round(c), xp.ones_like(c))]
        else:
            base = xp.floor(c)
            t = c - base
            if self.mode == "linear":
                taps = [(base, 1 - t), (base + 1, t)]
            else:
                taps = [(base + k, w) for k, w in zip((-1, 0, 1, 2), _cubic_weights(t))]
        # The taps stacked: one call per step for all of them (per-call overhead dominates
        # small grids).
        idx, w = xp.stack([i for i, _ in taps]), xp.stack([w for _, w in taps])
        if self.padding == "zeros":
            w = xp.where((idx >= 0) & (idx <= size - 1), w, 0.0)
        elif self.padding == "reflection":
            idx = _reflect(xp, idx, lo, hi)
        idx = xp.astype(xp.clip(idx, 0.0, float(size - 1)), self.backend.dtype(np.int64))
        return [(idx[t, ...], w[t, ...]) for t in range(len(taps))]

    def compute(self, x, grid):
        xp = self.xp
        nsp = x.ndim - 2
        if nsp < 1 or grid.ndim != x.ndim or grid.shape[-1] != nsp or grid.shape[0] != x.shape[0]:
            raise ValueError(
                f"GridSample: grid of shape {grid.shape} does not fit an input of shape {x.shape}"
            )
        n, c = x.shape[:2]
        sizes = x.shape[2:]
        ct = self.compute_type(x, grid)
        g = xp.reshape(xp.astype(grid, ct, copy=False), (n, 1, -1, nsp))  # (N, 1, P, nsp)
        image = xp.reshape(xp.astype(x, ct, copy=False), (n, c, -1))
        # grid[..., 0] is the last spatial axis (x), grid[..., 1] the one before (y), ...
        per_axis = [self._axis_taps(g[..., nsp - 1 - d], sizes[d]) for d in range(nsp)]
        out = _gather_taps(xp, image, per_axis, sizes)
        return (xp.reshape(self.cast_out(out, x.dtype), (n, c, *grid.shape[1:-1])),)


# ----------------------------------------------------------- NonMaxSuppression


def _scalar(value: Any, default: float) -> float:
    if value is None or np.size(value) == 0:
        return default
    return np.asarray(value).reshape(-1)[0].item()


@library.define("NonMaxSuppression", (10, 11), host_inputs=(2, 3, 4))
class NonMaxSuppression(_Sampling):
    """Greedy per-class selection of high-scoring boxes that do not overlap chosen ones.

    The selection is data-dependent (its size too): it runs on the host with numpy, on
    ``self.host()`` copies of boxes and scores, and the int64 [num, 3] result is handed
    to the backend with ``xp.asarray``."""

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
        limit = int(_scalar(None if max_boxes is None else self.host(max_boxes), 0))
        iou_thr = float(_scalar(None if iou_threshold is None else self.host(iou_threshold), 0.0))
        score_thr = (None if score_threshold is None
                     else float(_scalar(self.host(score_threshold), 0.0)))
        selected: list[np.ndarray] = []
        if limit > 0:
            corners = self._corners(self.host(boxes))
            areas = (corners[..., 2] - corners[..., 0]) * (corners[..., 3] - corners[..., 1])
            s64 = self.host(scores).astype(np.float64)
            for b, cls in np.ndindex(scores.shape[0], scores.shape[1]):
                keep = self._select(corners[b], areas[b], s64[b, cls], limit, iou_thr, score_thr)
                if keep.size:
                    rows = np.empty((keep.size, 3), np.int64)
                    rows[:, 0], rows[:, 1], rows[:, 2] = b, cls, keep
                    selected.append(rows)
        result = np.concatenate(selected) if selected else np.zeros((0, 3), np.int64)
        return (result if self.xp is np else self.xp.asarray(result),)

    @staticmethod
    def _select(corners: np.ndarray, areas: np.ndarray, scores: np.ndarray, limit: int,
                iou_thr: float, score_thr: float | None) -> np.ndarray:
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


def _roi_axis(start: np.ndarray, bin_size: np.ndarray, n_out: int, grid: int,
              size: int) -> tuple[np.ndarray, ...]:
    """Bilinear taps on one axis for ``n_out`` bins of ``grid`` samples per region (host).

    Returns (low index, high index, low weight, high weight, valid), each (R, n_out * grid).
    """
    steps = (np.arange(n_out)[:, None] + (np.arange(grid)[None, :] + 0.5) / grid).reshape(-1)
    pos = start[:, None] + steps[None, :] * bin_size[:, None]
    valid = (pos >= -1.0) & (pos <= size)
    pos = np.maximum(pos, 0.0)
    low = np.floor(pos).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    frac = np.where(at_end, 0.0, pos - low)
    return low, high, 1.0 - frac, frac, valid


@library.define("RoiAlign", (10, 16, 22), host_inputs=(1, 2))
class RoiAlign(_Sampling):
    """Average or max of bilinear samples over a grid in each bin of each region (the
    regions, host inputs, steer the sampling grids: see the module docstring)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if info.since_version >= 16:
            ctm = _choice(info, "coordinate_transformation_mode", "half_pixel",
                          ("half_pixel", "output_half_pixel"))
        else:
            ctm = "output_half_pixel"
        self.half_pixel = ctm == "half_pixel"
        self.mode = _choice(info, "mode", "avg", ("avg", "max"))
        self.out_h = int(info.attr("output_height", 1))
        self.out_w = int(info.attr("output_width", 1))
        self.sampling_ratio = int(info.attr("sampling_ratio", 0))
        self.scale = float(info.attr("spatial_scale", 1.0))
        if self.out_h < 1 or self.out_w < 1:
            raise InvalidGraph(f"{self.where()}: output_height and output_width must be positive")
        if self.sampling_ratio < 0:
            raise InvalidGraph(f"{self.where()}: sampling_ratio={self.sampling_ratio} must not "
                               "be negative")

    def compute(self, x, rois, batch_indices):
        xp = self.xp
        if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4:
            raise ValueError(f"RoiAlign: X {x.shape} must be 4-D and rois {rois.shape} (R, 4)")
        n, c, h, w = x.shape
        r = rois.shape[0]
        oh, ow = self.out_h, self.out_w
        ct = self.compute_type(x)
        if r == 0:
            return (xp.zeros((0, c, oh, ow), dtype=x.dtype),)
        batch = self.host(batch_indices).astype(np.int64).reshape(-1)
        if batch.shape[0] != r or np.any((batch < 0) | (batch >= n)):
            raise ValueError(f"RoiAlign: batch_indices {batch.tolist()} do not fit X {x.shape}")
        offset = 0.5 if self.half_pixel else 0.0
        box = self.host(rois).astype(np.float64) * self.scale - offset
        x0, y0 = box[:, 0], box[:, 1]
        roi_w, roi_h = box[:, 2] - x0, box[:, 3] - y0
        if not self.half_pixel:
            roi_w, roi_h = np.maximum(roi_w, 1.0), np.maximum(roi_h, 1.0)
        bin_h, bin_w = roi_h / oh, roi_w / ow
        if self.sampling_ratio > 0:
            grid_h = grid_w = np.full(r, self.sampling_ratio)
        else:
            grid_h = np.ceil(roi_h / oh).astype(np.int64)
            grid_w = np.ceil(roi_w / ow).astype(np.int64)
        # Pixels as rows of channels, so one gather reads every channel of a sample.
        pixels = xp.reshape(xp.permute_dims(xp.astype(x, ct, copy=False), (0, 2, 3, 1)),
                            (n * h * w, c))
        parts, order = [], []
        for gh, gw in np.unique(np.stack([grid_h, grid_w], axis=1), axis=0):
            sel = np.flatnonzero((grid_h == gh) & (grid_w == gw))
            order.append(sel)
            if gh <= 0 or gw <= 0:  # an empty sampling grid: the bins stay 0
                parts.append(xp.zeros((sel.size, oh, ow, c), dtype=ct))
            else:
                parts.append(self._pool(pixels, batch[sel], y0[sel], x0[sel], bin_h[sel],
                                        bin_w[sel], int(gh), int(gw), (h, w), ct))
        if len(parts) == 1:
            out = parts[0]
        else:  # the groups' regions back in their order
            back = np.argsort(np.concatenate(order))
            out = xp.take(xp.concat(parts), xp.asarray(back), axis=0)
        out = xp.permute_dims(out, (0, 3, 1, 2))
        return (self.cast_out(out, x.dtype),)

    def _pool(self, pixels: Any, batch: np.ndarray, y0: np.ndarray, x0: np.ndarray,
              bin_h: np.ndarray, bin_w: np.ndarray, gh: int, gw: int, hw: tuple[int, int],
              ct: Any) -> Any:
        """(R, oh, ow, C) for regions sharing a (gh, gw) sampling grid: the sample geometry
        on the host, one gather of the four corners on the backend."""
        xp = self.xp
        h, w = hw
        oh, ow = self.out_h, self.out_w
        yl, yh, wyl, wyh, vy = _roi_axis(y0, bin_h, oh, gh, h)
        xl, xh, wxl, wxh, vx = _roi_axis(x0, bin_w, ow, gw, w)
        valid = vy[:, :, None] & vx[:, None, :]  # (R, Y, X)
        rows = batch[:, None, None] * h
        index, weight = [], []
        for yi, wy in ((yl, wyl), (yh, wyh)):
            for xi, wx in ((xl, wxl), (xh, wxh)):
                index.append(((rows + yi[:, :, None]) * w + xi[:, None, :]).reshape(-1))
                weight.append(((wy[:, :, None] * wx[:, None, :]) * valid).reshape(-1, 1))
        r, c = len(batch), pixels.shape[1]
        taps = xp.take(pixels, xp.asarray(np.concatenate(index)), axis=0)
        weights = np.concatenate(weight).astype(self.backend.numpy_dtype(ct))
        taps = xp.reshape(taps * xp.asarray(weights), (4, -1, c))
        if self.mode == "avg":
            total = taps[0, ...] + taps[1, ...] + taps[2, ...] + taps[3, ...]
            return xp.mean(xp.reshape(total, (r, oh, gh, ow, gw, c)), axis=(2, 4))
        best = xp.maximum(xp.maximum(taps[0, ...], taps[1, ...]),
                          xp.maximum(taps[2, ...], taps[3, ...]))
        return xp.max(xp.reshape(best, (r, oh, gh, ow, gw, c)), axis=(2, 4))


# -------------------------------------------------------------------- Col2Im


def _int_vector(name: str, value: np.ndarray) -> tuple[int, ...]:
    if value.ndim != 1 or value.dtype.kind not in "iu":
        raise ValueError(f"Col2Im: {name} must be a 1-D int64 tensor, got {value.dtype} {value.shape}")
    return tuple(int(v) for v in value)


@library.define("Col2Im", 18, host_inputs=(1, 2))
class Col2Im(_Sampling):
    """Sum the columns of sliding blocks back into an image (the inverse of im2col)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info)

    def compute(self, x, image_shape, block_shape):
        xp = self.xp
        image = _int_vector("image_shape", self.host(image_shape))
        block = _int_vector("block_shape", self.host(block_shape))
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
        blocks = [(p - d * (kk - 1) - 1) // s + 1 for p, d, kk, s in zip(padded, dils, block, strides)]
        if prod(blocks) != x.shape[2]:
            raise ValueError(
                f"Col2Im: input has {x.shape[2]} blocks, the image and attributes give "
                f"{prod(blocks)} ({blocks})"
            )
        n, c = x.shape[0], x.shape[1] // k
        wide = self.widen(x)
        cols = xp.reshape(wide, (n, c, *block, *blocks))
        out = xp.zeros((n, c, *padded), dtype=wide.dtype)
        for tap in itertools.product(*(range(b) for b in block)):
            sl = (Ellipsis, *(slice(t * d, t * d + s * (nb - 1) + 1, s)
                              for t, d, s, nb in zip(tap, dils, strides, blocks)))
            out[sl] = out[sl] + cols[(slice(None), slice(None), *tap, Ellipsis)]
        crop = (Ellipsis, *(slice(b, b + i) for b, i in zip(pb, image)))
        return (self.narrow(out[crop], x),)


# ----------------------------------------------------------------- MaxUnpool


@library.define("MaxUnpool", (9, 11, 22), host_inputs=(2,))
class MaxUnpool(_Sampling):
    """Scatter pooled values back to the positions MaxPool's Indices name; zeros elsewhere
    (the last of duplicate indices wins)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info, need_kernel=True)

    def unpooled_shape(self, x: Any, indices: Any) -> tuple[int, ...]:
        """The shape the attributes give the unpooled tensor (the indices address it)."""
        if indices.shape != x.shape:
            raise ValueError(f"MaxUnpool: indices {indices.shape} must match X {x.shape}")
        k, s, _, pb, pe = self.attrs.resolve(x.ndim - 2)
        spatial = [(i - 1) * st + kk - b - e for i, st, kk, b, e in zip(x.shape[2:], s, k, pb, pe)]
        return (*x.shape[:2], *spatial)

    def resized(self, out: Any, x: Any, output_shape: Any) -> Any:
        """``out`` padded (at the end) or cropped to ``output_shape`` when given: as in the
        onnx conformance data, the indices address the tensor of the attributes' shape."""
        if output_shape is None:
            return out
        want = tuple(int(v) for v in self.host(output_shape).reshape(-1))
        if len(want) != x.ndim or want[:2] != tuple(x.shape[:2]):
            raise ValueError(f"MaxUnpool: output_shape {want} does not fit X {x.shape}")
        if want == tuple(out.shape):
            return out
        result = self.xp.zeros(want, dtype=out.dtype)
        common = tuple(slice(0, min(a, b)) for a, b in zip(want, out.shape))
        result[common] = out[common]
        return result

    def compute(self, x, indices, output_shape=None):
        xp = self.xp
        shape = self.unpooled_shape(x, indices)
        size = prod(shape)
        flat = xp.reshape(xp.astype(indices, self.backend.dtype(np.int64)), (-1,))
        values = xp.reshape(x, (-1,))
        if flat.shape[0] == 0:
            out = xp.zeros(size, dtype=x.dtype)
        else:
            lo, hi = self.host(xp.stack([xp.min(flat), xp.max(flat)]))
            if lo < 0 or hi >= size:
                raise ValueError(f"MaxUnpool: an index is outside the output of shape {shape}")
            # No integer-array assignment in the standard: each output position reads the
            # last write to it among the stably sorted targets.
            try:
                order = xp.argsort(flat, stable=True)
            except TypeError:  # CuPy has no ``stable`` keyword: its sorts are always stable
                order = xp.argsort(flat)
            targets = xp.take(flat, order)
            every = xp.arange(size, dtype=targets.dtype)
            last = xp.clip(xp.searchsorted(targets, every, side="right") - 1, 0, None)
            hit = xp.take(targets, last) == every
            out = xp.where(hit, xp.take(xp.take(values, order), last), xp.zeros((), dtype=x.dtype))
        return (self.resized(xp.reshape(out, shape), x, output_shape),)


# ---------------------------------------------------------------- DeformConv


@library.define("DeformConv", (19, 22))
class DeformConv(_Sampling):
    """Convolution whose taps are moved by learned offsets (N-linear sampling) and masked."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attrs = read_spatial_attrs(info)
        self.group = int(info.attr("group", 1))
        self.offset_group = int(info.attr("offset_group", 1))
        if self.group < 1 or self.offset_group < 1:
            raise InvalidGraph(f"{self.where()}: group and offset_group must be positive")
        self._last_positions: tuple[Any, list[Any]] | None = None

    def _positions(self, k: Sequence[int], outs: Sequence[int], strides: Sequence[int],
                   dils: Sequence[int], pb: Sequence[int], ct: Any) -> list[Any]:
        """Per spatial axis, the undeformed sampling positions (taps, out positions); kept
        for the last geometry (a node sees the same shapes run after run)."""
        key = (tuple(k), tuple(outs), tuple(strides), tuple(dils), tuple(pb), ct)
        if self._last_positions is None or self._last_positions[0] != key:
            xp, nsp = self.xp, len(k)

            def grid(sizes: Sequence[int], d: int) -> Any:  # axis d's coordinate, row-major
                along = xp.reshape(xp.arange(sizes[d], dtype=ct),
                                   tuple(n if a == d else 1 for a, n in enumerate(sizes)))
                return xp.reshape(xp.broadcast_to(along, tuple(sizes)), (-1,))

            self._last_positions = (key, [grid(outs, d)[None, :] * strides[d] - pb[d]
                                          + grid(k, d)[:, None] * dils[d] for d in range(nsp)])
        return self._last_positions[1]

    def compute(self, x, w, offset, bias=None, mask=None):
        xp = self.xp
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
        outs = tuple((i + b + e - d * (kk - 1) - 1) // s + 1
                     for i, b, e, d, kk, s in zip(sizes, pb, pe, dils, k, strides))
        ntap, npos = prod(k), prod(outs)
        if tuple(offset.shape) != (n, ogrp * ntap * nsp, *outs):
            raise ValueError(
                f"DeformConv: offset {offset.shape}, expected {(n, ogrp * ntap * nsp, *outs)}"
            )
        ct = self.compute_type(x)
        off = xp.reshape(xp.astype(offset, ct, copy=False), (n, ogrp, ntap, nsp, npos))
        i64 = self.backend.dtype(np.int64)
        per_axis = []
        for d, base in enumerate(self._positions(k, outs, strides, dils, pb, ct)):
            at = base + off[:, :, :, d, :]  # (N, og, taps, P)
            low = xp.floor(at)
            frac = at - low
            taps = []
            for idx, wt in ((low, 1 - frac), (low + 1, frac)):
                inside = (idx >= 0) & (idx <= sizes[d] - 1)
                index = xp.astype(xp.clip(idx, 0.0, float(sizes[d] - 1)), i64)
                taps.append((xp.reshape(index, (n, ogrp, 1, ntap * npos)),
                             xp.reshape(xp.where(inside, wt, 0.0), (n, ogrp, 1, ntap * npos))))
            per_axis.append(taps)
        image = xp.reshape(xp.astype(x, ct, copy=False), (n, ogrp, c // ogrp, -1))
        cols = _gather_taps(xp, image, per_axis, sizes)
        if mask is not None:
            cols = xp.reshape(cols, (n, ogrp, c // ogrp, ntap, npos)) * xp.reshape(
                xp.astype(mask, ct, copy=False), (n, ogrp, 1, ntap, npos))
        cols = xp.reshape(cols, (n, grp, (c // grp) * ntap, npos))
        wg = xp.reshape(xp.astype(w, ct, copy=False), (grp, oc // grp, (c // grp) * ntap))
        y = xp.reshape(xp.matmul(wg, cols), (n, oc, *outs))
        if bias is not None:
            y = y + xp.reshape(xp.astype(bias, ct, copy=False), (oc, *(1,) * nsp))
        return (self.narrow(y, x),)
