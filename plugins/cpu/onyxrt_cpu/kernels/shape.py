"""CPU kernels: shape manipulation and data movement.

Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Concat, Split, Expand, Tile, Shape, Size,
Identity, Dropout, Trilu, Pad, DepthToSpace, SpaceToDepth, ReverseSequence, Compress and
CenterCropPad. Kernels that only change the view of their input (Reshape, Squeeze,
Unsqueeze, Flatten, Transpose, Identity, Split) return numpy views instead of copies.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.limits import check_allocation, output_of
from onyxrt.seeding import default_seed

from . import registry

# ----------------------------------------------------------------------------- helpers


def _invalid(info: KernelInfo, message: str) -> InvalidGraph:
    """An InvalidGraph error naming the node."""
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {message}")


def _ints(value: Any) -> list[int]:
    """A 0-d or 1-d integer tensor (or list) as a list of Python ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _scalar(value: Any) -> Any:
    """The single element of a 0-d or 1-element tensor, as a numpy scalar."""
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"expected a scalar (one element), got shape {arr.shape}")
    return arr.reshape(-1)[0]


def _norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank-1]`` mapped to ``[0, rank-1]``."""
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _norm_axes(axes: Sequence[int], rank: int, what: str = "axes") -> list[int]:
    """Normalized, duplicate-free axes."""
    out = [_norm_axis(int(a), rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{what} {list(axes)} contain a duplicate")
    return out


def _zero_of(dtype: np.dtype[Any]) -> Any:
    """The ONNX default fill value for a dtype: 0, False or the empty string."""
    if dtype.kind in "OSU":
        return ""
    return np.zeros((), dtype=dtype)


def _filled(shape: Sequence[int], value: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """A new array of ``shape`` filled with ``value``."""
    if dtype.kind == "O":
        out = np.empty(tuple(shape), dtype=dtype)
        out.fill(value)
        return out
    return np.full(tuple(shape), value, dtype=dtype)


# ----------------------------------------------------------------------------- Reshape


def _reshape(x: np.ndarray, shape: Sequence[int], allowzero: bool) -> np.ndarray:
    target = [int(s) for s in shape]
    if target.count(-1) > 1:
        raise ValueError(f"Reshape: shape {target} has more than one -1")
    if any(s < -1 for s in target):
        raise ValueError(f"Reshape: shape {target} has a negative dimension other than -1")
    if allowzero:
        if 0 in target and -1 in target:
            raise ValueError(f"Reshape: shape {target} has both 0 and -1 with allowzero=1")
    else:
        for i, s in enumerate(target):
            if s == 0:
                if i >= x.ndim:
                    raise ValueError(
                        f"Reshape: shape {target} copies dimension {i} (0) but the input "
                        f"has rank {x.ndim}"
                    )
                target[i] = x.shape[i]
    if -1 in target:
        known = math.prod(s for s in target if s != -1)
        if known == 0 or x.size % known:
            raise ValueError(f"Reshape: cannot reshape input of shape {x.shape} into {shape}")
        target[target.index(-1)] = x.size // known
    if math.prod(target) != x.size:
        raise ValueError(f"Reshape: cannot reshape input of shape {x.shape} into {list(shape)}")
    return x.reshape(target)


@registry.register("Reshape", since=1)
class Reshape1(Kernel):
    """Reshape (v1): target shape from the ``shape`` attribute; 0 copies, -1 infers."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        shape = info.attr("shape")
        if shape is None:
            raise _invalid(info, "attribute 'shape' is required")
        self.shape = [int(s) for s in shape]

    def compute(self, x, *_unused):
        return (_reshape(x, self.shape, False),)


@registry.register("Reshape", since=(5, 13, 14, 19, 21, 23, 24, 25))
class Reshape(Kernel):
    """Reshape (v5+): target shape from the second input; ``allowzero`` from v14."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.allowzero = bool(info.attr("allowzero", 0)) if info.since_version >= 14 else False

    def compute(self, x, shape):
        return (_reshape(x, _ints(shape), self.allowzero),)


# ----------------------------------------------------------------------------- Transpose


@registry.register("Transpose", since=(1, 13, 21, 23, 24, 25))
class Transpose(Kernel):
    """Permute the axes; the default ``perm`` reverses them."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        perm = info.attr("perm")
        self.perm = None if perm is None else [int(p) for p in perm]
        if self.perm is not None and sorted(self.perm) != list(range(len(self.perm))):
            raise _invalid(info, f"perm {self.perm} is not a permutation of 0..{len(perm) - 1}")

    def compute(self, x):
        if self.perm is None:
            return (np.transpose(x),)
        if len(self.perm) != x.ndim:
            raise ValueError(f"Transpose: perm {self.perm} does not match input rank {x.ndim}")
        return (np.transpose(x, self.perm),)


# ----------------------------------------------------------------------------- Flatten


@registry.register("Flatten", since=(1, 9, 11, 13, 21, 23, 24, 25))
class Flatten(Kernel):
    """Flatten to 2-D: dims before ``axis`` form the rows, the rest the columns."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 1))
        if info.since_version < 11 and self.axis < 0:
            raise _invalid(info, f"axis {self.axis} must be >= 0 before opset 11")

    def compute(self, x):
        r = x.ndim
        axis = self.axis + r if self.axis < 0 else self.axis
        if not 0 <= axis <= r:
            raise ValueError(f"Flatten: axis {self.axis} is out of range for rank {r}")
        rows = math.prod(x.shape[:axis])
        cols = math.prod(x.shape[axis:])
        return (x.reshape(rows, cols),)


# ----------------------------------------------------------------------------- Squeeze


def _squeeze(x: np.ndarray, axes: Sequence[int] | None) -> np.ndarray:
    if not axes:  # absent or empty: remove every size-1 axis (as onnxruntime does)
        return x.reshape([d for d in x.shape if d != 1])
    norm = _norm_axes(axes, x.ndim)
    for a in norm:
        if x.shape[a] != 1:
            raise ValueError(f"Squeeze: axis {a} of shape {x.shape} is not 1")
    return x.reshape([d for i, d in enumerate(x.shape) if i not in norm])


@registry.register("Squeeze", since=(1, 11))
class SqueezeAttr(Kernel):
    """Squeeze (v1, v11): remove size-1 axes listed in the ``axes`` attribute (all if absent)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axes = info.attr("axes")
        self.axes = None if axes is None else [int(a) for a in axes]

    def compute(self, x):
        return (_squeeze(x, self.axes),)


@registry.register("Squeeze", since=(13, 21, 23, 24, 25))
class Squeeze(Kernel):
    """Squeeze (v13+): remove size-1 axes listed in the optional ``axes`` input."""

    def compute(self, x, axes=None):
        return (_squeeze(x, None if axes is None else _ints(axes)),)


# ----------------------------------------------------------------------------- Unsqueeze


def _unsqueeze(x: np.ndarray, axes: Sequence[int]) -> np.ndarray:
    out_rank = x.ndim + len(axes)
    norm = set(_norm_axes(axes, out_rank))
    shape = []
    src = iter(x.shape)
    for i in range(out_rank):
        shape.append(1 if i in norm else next(src))
    return x.reshape(shape)


@registry.register("Unsqueeze", since=(1, 11))
class UnsqueezeAttr(Kernel):
    """Unsqueeze (v1, v11): insert size-1 axes at the ``axes`` attribute positions."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axes = info.attr("axes")
        if axes is None:
            raise _invalid(info, "attribute 'axes' is required")
        self.axes = [int(a) for a in axes]
        if info.since_version < 11 and any(a < 0 for a in self.axes):
            raise _invalid(info, f"axes {self.axes} must be >= 0 before opset 11")

    def compute(self, x):
        return (_unsqueeze(x, self.axes),)


@registry.register("Unsqueeze", since=(13, 21, 23, 24, 25))
class Unsqueeze(Kernel):
    """Unsqueeze (v13+): insert size-1 axes at the positions in the ``axes`` input."""

    def compute(self, x, axes):
        return (_unsqueeze(x, _ints(axes)),)


# ----------------------------------------------------------------------------- Concat


@registry.register("Concat", since=(1, 4, 11, 13))
class Concat(Kernel):
    """Concatenate the inputs along ``axis`` (default 1 in v1, required from v4)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axis = info.attr("axis")
        if axis is None:
            if info.since_version >= 4:
                raise _invalid(info, "attribute 'axis' is required")
            axis = 1
        self.axis = int(axis)

    def compute(self, *inputs):
        arrays = [a for a in inputs if a is not None]
        if not arrays:
            raise ValueError("Concat: no inputs")
        axis = _norm_axis(self.axis, arrays[0].ndim)
        # The same value may be listed many times: the output can dwarf every input.
        shape = list(arrays[0].shape)
        shape[axis] = sum(a.shape[axis] if a.ndim > axis else 0 for a in arrays)
        check_allocation(shape, arrays[0].dtype, output_of(self.info))
        return (np.concatenate(arrays, axis=axis),)


# ----------------------------------------------------------------------------- Split


def _split(x: np.ndarray, axis: int, sizes: Sequence[int]) -> tuple[np.ndarray, ...]:
    axis = _norm_axis(axis, x.ndim)
    if any(s < 0 for s in sizes):
        raise ValueError(f"Split: split sizes {list(sizes)} must be >= 0")
    if sum(sizes) != x.shape[axis]:
        raise ValueError(
            f"Split: split sizes {list(sizes)} do not add up to dimension {x.shape[axis]} "
            f"of axis {axis}"
        )
    bounds = np.cumsum(sizes)[:-1]
    return tuple(np.split(x, bounds, axis=axis))


def _even_sizes(dim: int, n: int, allow_uneven: bool) -> list[int]:
    if n <= 0:
        raise ValueError("Split: the number of outputs must be positive")
    if dim % n == 0:
        return [dim // n] * n
    if not allow_uneven:
        raise ValueError(f"Split: dimension {dim} cannot be split evenly into {n} parts")
    chunk = -(-dim // n)
    sizes = [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]
    return sizes


@registry.register("Split", since=(1, 2, 11))
class SplitAttr(Kernel):
    """Split (v1-v11): sizes from the ``split`` attribute (or v1's optional input)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        split = info.attr("split")
        self.split = None if split is None else [int(s) for s in split]
        self.n = len(info.output_names)

    def compute(self, x, split=None):
        sizes = self.split if split is None else _ints(split)
        if sizes is None:
            sizes = _even_sizes(x.shape[_norm_axis(self.axis, x.ndim)], self.n, False)
        return _split(x, self.axis, sizes)


@registry.register("Split", since=(13, 18))
class Split(Kernel):
    """Split (v13+): sizes from the optional ``split`` input; ``num_outputs`` from v18."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        num = info.attr("num_outputs") if info.since_version >= 18 else None
        if num is not None:
            num = int(num)
            if num < 1:
                raise _invalid(info, f"num_outputs must be >= 1, got {num}")
            if info.has_input(1):
                raise _invalid(info, "give either the 'split' input or num_outputs, not both")
        self.n = len(info.output_names)
        if num is not None and num != self.n:
            # Also keeps a crafted num_outputs=10**12 from building a list of sizes that large.
            raise _invalid(info, f"num_outputs is {num} but the node has {self.n} outputs")
        self.num_outputs = num

    def compute(self, x, split=None):
        if split is not None and np.asarray(split).size > 0:
            sizes = _ints(split)
        else:
            dim = x.shape[_norm_axis(self.axis, x.ndim)]
            n = self.num_outputs if self.num_outputs is not None else self.n
            sizes = _even_sizes(dim, n, self.info.since_version >= 18)
        return _split(x, self.axis, sizes)


# ----------------------------------------------------------------------------- Expand / Tile


@registry.register("Expand", since=(8, 13))
class Expand(Kernel):
    """Broadcast the input to ``shape`` (bidirectional numpy broadcasting)."""

    def compute(self, x, shape):
        target = np.broadcast_shapes(x.shape, tuple(_ints(shape)))
        if target == x.shape:
            return (x,)
        check_allocation(target, x.dtype, output_of(self.info))
        return (np.broadcast_to(x, target).copy(),)


@registry.register("Tile", since=1)
class Tile1(Kernel):
    """Tile (v1): repeat the input ``tiles`` times along ``axis`` (both scalar inputs)."""

    def compute(self, x, tiles, axis):
        reps = [1] * x.ndim
        reps[_norm_axis(int(_scalar(axis)), x.ndim)] = int(_scalar(tiles))
        check_allocation([d * r for d, r in zip(x.shape, reps)], x.dtype, output_of(self.info))
        return (np.tile(x, reps),)


@registry.register("Tile", since=(6, 13))
class Tile(Kernel):
    """Tile (v6+): repeat the input ``repeats[i]`` times along each axis ``i``."""

    def compute(self, x, repeats):
        reps = _ints(repeats)
        if len(reps) != x.ndim:
            raise ValueError(f"Tile: repeats {reps} must have one entry per input axis ({x.ndim})")
        if any(r < 0 for r in reps):
            raise ValueError(f"Tile: repeats {reps} must be >= 0")
        check_allocation([d * r for d, r in zip(x.shape, reps)], x.dtype, output_of(self.info))
        return (np.tile(x, reps),)


# ----------------------------------------------------------------------------- Shape / Size


@registry.register("Shape", since=(1, 13, 15, 19, 21, 23, 24, 25))
class Shape(Kernel):
    """The input's shape as int64; ``start``/``end`` (v15+) slice it, clamped to the rank."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if info.since_version >= 15:
            self.start = int(info.attr("start", 0))
            end = info.attr("end")
            self.end = None if end is None else int(end)
        else:
            self.start, self.end = 0, None

    def compute(self, x):
        r = np.ndim(x)
        start = self.start + r if self.start < 0 else self.start
        end = r if self.end is None else (self.end + r if self.end < 0 else self.end)
        start = min(max(start, 0), r)
        end = min(max(end, 0), r)
        return (np.array(np.shape(x)[start:end], dtype=np.int64),)


@registry.register("Size", since=(1, 13, 19, 21, 23, 24, 25))
class Size(Kernel):
    """The number of elements of the input, as an int64 scalar."""

    def compute(self, x):
        return (np.array(np.size(x), dtype=np.int64),)


# ----------------------------------------------------------------------------- Identity


@registry.register("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25))
class Identity(Kernel):
    """Return the input unchanged (tensors, sequences and optionals pass through)."""

    def compute(self, x):
        return (x,)


# ----------------------------------------------------------------------------- Dropout


class _DropoutBase(Kernel):
    """Shared training-mode dropout: a mask from uniform draws, kept values scaled."""

    def _init_rng(self, seed: int | None) -> None:
        # RandomState(seed).uniform(...) >= ratio is the mask ONNX's examples describe.
        # Without a seed attribute: onyxrt.set_seed's seed when a program set one.
        if seed is None:
            chosen = default_seed()
            seed = None if chosen is None else chosen & 0xFFFFFFFF
        self._rng = np.random.RandomState(seed) if seed is not None else np.random.RandomState()
        self._lock = threading.Lock()

    def _train(self, x: np.ndarray, ratio: float) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            draws = self._rng.uniform(0.0, 1.0, x.shape)
        mask = draws >= ratio
        if ratio >= 1.0:
            return np.zeros_like(x), mask
        work = x if x.dtype in (np.float16, np.float32, np.float64) else x.astype(np.float32)
        scale = 1.0 / (1.0 - ratio)
        out = (work * mask) * work.dtype.type(scale)
        return out.astype(x.dtype, copy=False), mask


@registry.register("Dropout", since=(1, 6))
class DropoutLegacy(_DropoutBase):
    """Dropout (v1, v6): copy when ``is_test`` is set, else random dropout; mask has type T."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.ratio = float(info.attr("ratio", 0.5))
        self.training = not bool(info.attr("is_test", 0))
        if not 0.0 <= self.ratio <= 1.0:
            raise _invalid(info, f"ratio {self.ratio} must be in [0, 1]")
        self._init_rng(None)

    def compute(self, x):
        if self.training and self.ratio > 0.0:
            out, mask = self._train(x, self.ratio)
            return out, mask.astype(x.dtype)
        return x, np.ones(x.shape, dtype=x.dtype)


@registry.register("Dropout", since=(7, 10))
class DropoutInference(Kernel):
    """Dropout (v7, v10): inference copies the input; the mask is all ones (bool from v10)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.ratio = float(info.attr("ratio", 0.5))
        self.mask_bool = info.since_version >= 10

    def compute(self, x):
        return x, np.ones(x.shape, dtype=bool if self.mask_bool else x.dtype)


@registry.register("Dropout", since=(12, 13, 22))
class Dropout(_DropoutBase):
    """Dropout (v12+): ``ratio`` and ``training_mode`` inputs; random only when training."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        seed = info.attr("seed")
        self._init_rng(None if seed is None else int(seed) & 0xFFFFFFFF)

    def compute(self, x, ratio=None, training_mode=None):
        r = 0.5 if ratio is None else float(_scalar(ratio))
        training = False if training_mode is None else bool(_scalar(training_mode))
        if not 0.0 <= r <= 1.0:
            raise ValueError(f"Dropout: ratio {r} must be in [0, 1]")
        if not training or r == 0.0:
            return x, np.ones(x.shape, dtype=bool)
        return self._train(x, r)


# ----------------------------------------------------------------------------- Trilu


@registry.register("Trilu", since=14)
class Trilu(Kernel):
    """Keep the upper (or lower) triangle of the last two axes, offset by diagonal ``k``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.upper = bool(info.attr("upper", 1))

    def compute(self, x, k=None):
        if x.ndim < 2:
            raise ValueError(f"Trilu: input must have rank >= 2, got shape {x.shape}")
        kk = 0 if k is None else int(_scalar(k))
        n, m = x.shape[-2:]
        diff = np.arange(m, dtype=np.int64)[None, :] - np.arange(n, dtype=np.int64)[:, None]
        keep = diff >= kk if self.upper else diff <= kk
        return (np.where(keep, x, np.asarray(_zero_of(x.dtype), dtype=x.dtype)),)


# ----------------------------------------------------------------------------- Pad

_PAD_MODES = ("constant", "reflect", "edge")


def _pad(
    x: np.ndarray, begins: list[int], ends: list[int], mode: str, value: Any, info: KernelInfo
) -> np.ndarray:
    """Pad (or crop, for negative amounts) every axis of ``x``."""
    crop = []
    for d, b, e in zip(x.shape, begins, ends, strict=True):
        start = -b if b < 0 else 0
        stop = d + e if e < 0 else d
        if stop < start:
            raise ValueError(f"Pad: negative pads ({b}, {e}) remove more than dimension {d}")
        crop.append(slice(start, stop))
    if any(b < 0 or e < 0 for b, e in zip(begins, ends, strict=True)):
        x = x[tuple(crop)]
    pb = [max(b, 0) for b in begins]
    pe = [max(e, 0) for e in ends]
    if not any(pb) and not any(pe):
        return x
    shape = [d + b + e for d, b, e in zip(x.shape, pb, pe, strict=True)]
    check_allocation(shape, x.dtype, output_of(info))
    if mode == "constant":
        out = _filled(shape, value, x.dtype)
        out[tuple(slice(b, b + d) for d, b in zip(x.shape, pb, strict=True))] = x
        return out
    for d, b, e in zip(x.shape, pb, pe, strict=True):
        if d == 0 and (b or e):
            raise ValueError(f"Pad: mode {mode!r} cannot pad an empty axis")
    return np.pad(x, list(zip(pb, pe, strict=True)), mode=mode)


def _pad_mode(info: KernelInfo, allowed: Sequence[str]) -> str:
    mode = info.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in allowed:
        raise _invalid(
            info, f"mode {mode!r} is not supported at opset {info.opset}; use one of {allowed}"
        )
    return mode


@registry.register("Pad", since=(1, 2))
class PadAttr(Kernel):
    """Pad (v1, v2): pads and fill value from attributes (``paddings`` in v1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        name = "paddings" if info.since_version == 1 else "pads"
        pads = info.attr(name)
        if pads is None:
            raise _invalid(info, f"attribute {name!r} is required")
        self.pads = [int(p) for p in pads]
        if len(self.pads) % 2:
            raise _invalid(info, f"{name} {self.pads} must have an even length")
        self.mode = _pad_mode(info, _PAD_MODES)
        self.value = float(info.attr("value", 0.0))

    def compute(self, x):
        r = x.ndim
        if len(self.pads) != 2 * r:
            raise ValueError(f"Pad: pads {self.pads} must have 2 * rank ({2 * r}) entries")
        return (_pad(x, self.pads[:r], self.pads[r:], self.mode, self.value, self.info),)


@registry.register("Pad", since=(11, 13, 18, 19, 21, 23, 24, 25))
class Pad(Kernel):
    """Pad (v11+): ``pads`` and ``constant_value`` inputs; ``axes`` (v18+); wrap (v19+)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        modes = (*_PAD_MODES, "wrap") if info.since_version >= 19 else _PAD_MODES
        self.mode = _pad_mode(info, modes)

    def compute(self, x, pads, constant_value=None, axes=None):
        r = x.ndim
        p = _ints(pads)
        if axes is None:
            ax = list(range(r))
        else:
            ax = _norm_axes(_ints(axes), r)
        n = len(ax)
        if len(p) != 2 * n:
            raise ValueError(f"Pad: pads {p} must have 2 * {n} entries")
        begins, ends = [0] * r, [0] * r
        for i, a in enumerate(ax):
            begins[a], ends[a] = p[i], p[i + n]
        if constant_value is None or np.asarray(constant_value).size == 0:
            value = _zero_of(x.dtype)
        else:
            value = _scalar(constant_value)
        return (_pad(x, begins, ends, self.mode, value, self.info),)


# ----------------------------------------------------------------------------- Depth/Space


def _block_mode(info: KernelInfo) -> str:
    mode = info.attr("mode", "DCR")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in ("DCR", "CRD"):
        raise _invalid(info, f"mode {mode!r} must be 'DCR' or 'CRD'")
    return mode


def _blocksize(info: KernelInfo) -> int:
    bs = info.attr("blocksize")
    if bs is None or int(bs) < 1:
        raise _invalid(info, f"blocksize must be a positive integer, got {bs}")
    return int(bs)


@registry.register("DepthToSpace", since=(1, 11, 13, 28))
class DepthToSpace(Kernel):
    """Move channel blocks into spatial blocks (mode DCR or CRD, v11+)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.bs = _blocksize(info)
        self.mode = _block_mode(info) if info.since_version >= 11 else "DCR"

    def compute(self, x):
        if x.ndim != 4:
            raise ValueError(f"DepthToSpace: input must be 4-D, got shape {x.shape}")
        b, c, h, w = x.shape
        bs = self.bs
        if c % (bs * bs):
            raise ValueError(f"DepthToSpace: channels {c} not divisible by blocksize^2 {bs * bs}")
        oc = c // (bs * bs)
        if self.mode == "DCR":
            t = x.reshape(b, bs, bs, oc, h, w).transpose(0, 3, 4, 1, 5, 2)
        else:
            t = x.reshape(b, oc, bs, bs, h, w).transpose(0, 1, 4, 2, 5, 3)
        return (t.reshape(b, oc, h * bs, w * bs),)


@registry.register("SpaceToDepth", since=(1, 13, 28))
class SpaceToDepth(Kernel):
    """Move spatial blocks into channels (the inverse of DepthToSpace; mode from v28)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.bs = _blocksize(info)
        self.mode = _block_mode(info) if info.since_version >= 28 else "DCR"

    def compute(self, x):
        if x.ndim != 4:
            raise ValueError(f"SpaceToDepth: input must be 4-D, got shape {x.shape}")
        b, c, h, w = x.shape
        bs = self.bs
        if h % bs or w % bs:
            raise ValueError(f"SpaceToDepth: spatial dims {h}x{w} not divisible by {bs}")
        t = x.reshape(b, c, h // bs, bs, w // bs, bs)
        if self.mode == "DCR":
            t = t.transpose(0, 3, 5, 1, 2, 4)
        else:
            t = t.transpose(0, 1, 3, 5, 2, 4)
        return (t.reshape(b, c * bs * bs, h // bs, w // bs),)


# ----------------------------------------------------------------------------- ReverseSequence


@registry.register("ReverseSequence", since=(10, 28))
class ReverseSequence(Kernel):
    """Reverse the first ``sequence_lens[i]`` time steps of each batch entry ``i``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.batch_axis = int(info.attr("batch_axis", 1))
        self.time_axis = int(info.attr("time_axis", 0))
        if {self.batch_axis, self.time_axis} != {0, 1}:
            raise _invalid(
                info,
                f"batch_axis ({self.batch_axis}) and time_axis ({self.time_axis}) must be "
                "0 and 1 in some order",
            )

    def compute(self, x, sequence_lens):
        if x.ndim < 2:
            raise ValueError(f"ReverseSequence: input must have rank >= 2, got {x.shape}")
        steps, batch = x.shape[self.time_axis], x.shape[self.batch_axis]
        lens = np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
        if lens.shape[0] != batch:
            raise ValueError(
                f"ReverseSequence: sequence_lens has {lens.shape[0]} entries, batch is {batch}"
            )
        if np.any(lens < 0) or np.any(lens > steps):
            raise ValueError(f"ReverseSequence: sequence_lens must be in [0, {steps}]")
        t = np.arange(steps, dtype=np.int64)[:, None]
        src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)  # (time, batch)
        if self.time_axis == 1:
            src = src.T
        idx = src.reshape(src.shape + (1,) * (x.ndim - 2))
        return (np.take_along_axis(x, idx, axis=self.time_axis),)


# ----------------------------------------------------------------------------- Compress


@registry.register("Compress", since=(9, 11, 28))
class Compress(Kernel):
    """Keep the slices along ``axis`` (or of the flattened input) where condition is true."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axis = info.attr("axis")
        self.axis = None if axis is None else int(axis)

    def compute(self, x, condition):
        cond = np.asarray(condition).reshape(-1).astype(bool, copy=False)
        if self.axis is None:
            flat = x.reshape(-1)
            return (flat[: cond.shape[0]][cond[: flat.shape[0]]],)
        axis = _norm_axis(self.axis, x.ndim)
        dim = x.shape[axis]
        if cond.shape[0] > dim and cond[dim:].any():
            raise ValueError(f"Compress: condition selects beyond dimension {dim} of axis {axis}")
        keep = np.nonzero(cond[:dim])[0]
        return (np.take(x, keep, axis=axis),)


# ----------------------------------------------------------------------------- CenterCropPad


@registry.register("CenterCropPad", since=18)
class CenterCropPad(Kernel):
    """Center-crop or zero-pad the listed ``axes`` (default all) to the sizes in ``shape``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axes = info.attr("axes")
        self.axes = None if axes is None else [int(a) for a in axes]

    def compute(self, x, shape):
        sizes = _ints(shape)
        axes = list(range(x.ndim)) if self.axes is None else _norm_axes(self.axes, x.ndim)
        if len(sizes) != len(axes):
            raise ValueError(f"CenterCropPad: shape {sizes} does not match axes {axes}")
        out_shape = list(x.shape)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        for a, size in zip(axes, sizes, strict=True):
            if size < 0:
                raise ValueError(f"CenterCropPad: target size {size} must be >= 0")
            d = x.shape[a]
            out_shape[a] = size
            if size < d:
                start = (d - size) // 2
                src[a] = slice(start, start + size)
            elif size > d:
                start = (size - d) // 2
                dst[a] = slice(start, start + d)
        if out_shape == list(x.shape):
            return (x,)
        check_allocation(out_shape, x.dtype, output_of(self.info))
        out = _filled(out_shape, _zero_of(x.dtype), x.dtype)
        out[tuple(dst)] = x[tuple(src)]
        return (out,)
