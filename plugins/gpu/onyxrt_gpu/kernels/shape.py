"""GPU kernels: shape manipulation and data movement.

Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Concat, Split, Expand, Tile,
Identity, Dropout (inference), Pad and Trilu (Gather and Slice: :mod:`.indexing`).

Shapes, axes, slice bounds, pads and the like are read on the host: constants once, at
creation; runtime ones are registered ``host_inputs``, so the plan hands them over in host
memory (a device array there is still accepted, and copied back). Reshape, Squeeze, Unsqueeze, Flatten, Transpose and Split
return views of their input, as CuPy does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo

from . import registry
from ._common import (
    TENSORS,
    GpuKernel,
    HostInputs,
    bad,
    host_ints,
    host_scalar,
    norm_axes,
    norm_axis,
    register_host,
    wants_output,
)

_T = {"T": TENSORS}


# ------------------------------------------------------------------------------ Reshape


def _reshape_target(shape_in: tuple[int, ...], size: int, shape: Sequence[int],
                    allowzero: bool) -> list[int]:
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
                if i >= len(shape_in):
                    raise ValueError(
                        f"Reshape: shape {target} copies dimension {i} (0) but the input "
                        f"has rank {len(shape_in)}"
                    )
                target[i] = shape_in[i]
    if -1 in target:
        known = int(np.prod([s for s in target if s != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise ValueError(f"Reshape: cannot reshape input of shape {shape_in} into {shape}")
        target[target.index(-1)] = size // known
    if int(np.prod(target, dtype=np.int64)) != size:
        raise ValueError(f"Reshape: cannot reshape input of shape {shape_in} into {list(shape)}")
    return target


@registry.register("Reshape", since=1, types=_T)
class Reshape1(GpuKernel):
    """Reshape (v1): target shape from the ``shape`` attribute; 0 copies, -1 infers."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        shape = info.attr("shape")
        if shape is None:
            raise bad(info, "attribute 'shape' is required")
        self.shape = [int(s) for s in shape]

    def compute(self, x, *_unused):
        return (x.reshape(_reshape_target(x.shape, x.size, self.shape, False)),)


@register_host("Reshape", (5, 13, 14, 19, 21, 23, 24, 25), host=(1,))
class Reshape(HostInputs):
    """Reshape (v5+): target shape from the second input; ``allowzero`` from v14."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.allowzero = bool(info.attr("allowzero", 0)) if info.since_version >= 14 else False

    def compute(self, x, shape):
        target = _reshape_target(x.shape, x.size, host_ints(self.host(1, shape)), self.allowzero)
        return (x.reshape(target),)


# ---------------------------------------------------------------------------- Transpose


@registry.register("Transpose", since=(1, 13, 21, 23, 24, 25), types=_T)
class Transpose(GpuKernel):
    """Permute the axes (a view); the default ``perm`` reverses them."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        perm = info.attr("perm")
        self.perm = None if perm is None else [int(p) for p in perm]
        if self.perm is not None and sorted(self.perm) != list(range(len(self.perm))):
            raise bad(info, f"perm {self.perm} is not a permutation of 0..{len(perm) - 1}")

    def compute(self, x):
        if self.perm is None:
            return (self.cp.transpose(x),)
        if len(self.perm) != x.ndim:
            raise ValueError(f"Transpose: perm {self.perm} does not match input rank {x.ndim}")
        return (self.cp.transpose(x, self.perm),)


# ------------------------------------------------------------------------------ Flatten


@registry.register("Flatten", since=(1, 9, 11, 13, 21, 23, 24, 25), types=_T)
class Flatten(GpuKernel):
    """Flatten to 2-D: dims before ``axis`` form the rows, the rest the columns."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 1))
        if info.since_version < 11 and self.axis < 0:
            raise bad(info, f"axis {self.axis} must be >= 0 before opset 11")

    def compute(self, x):
        r = x.ndim
        axis = self.axis + r if self.axis < 0 else self.axis
        if not 0 <= axis <= r:
            raise ValueError(f"Flatten: axis {self.axis} is out of range for rank {r}")
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        cols = int(np.prod(x.shape[axis:], dtype=np.int64))
        return (x.reshape(rows, cols),)


# ---------------------------------------------------------------------- Squeeze, Unsqueeze


def _squeeze_shape(shape: tuple[int, ...], axes: Sequence[int] | None) -> list[int]:
    if not axes:  # absent or empty: remove every size-1 axis
        return [d for d in shape if d != 1]
    norm = norm_axes(axes, len(shape))
    for a in norm:
        if shape[a] != 1:
            raise ValueError(f"Squeeze: axis {a} of shape {shape} is not 1")
    return [d for i, d in enumerate(shape) if i not in norm]


@registry.register("Squeeze", since=(1, 11), types=_T)
class SqueezeAttr(GpuKernel):
    """Squeeze (v1, v11): remove size-1 axes listed in the ``axes`` attribute (all if absent)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axes = info.attr("axes")
        self.axes = None if axes is None else [int(a) for a in axes]

    def compute(self, x):
        return (x.reshape(_squeeze_shape(x.shape, self.axes)),)


@register_host("Squeeze", (13, 21, 23, 24, 25), host=(1,))
class Squeeze(HostInputs):
    """Squeeze (v13+): remove size-1 axes listed in the optional ``axes`` input."""

    def compute(self, x, axes=None):
        a = self.host(1, axes)
        return (x.reshape(_squeeze_shape(x.shape, None if a is None else host_ints(a))),)


def _unsqueeze_shape(shape: tuple[int, ...], axes: Sequence[int]) -> list[int]:
    out_rank = len(shape) + len(axes)
    norm = set(norm_axes(axes, out_rank))
    src = iter(shape)
    return [1 if i in norm else next(src) for i in range(out_rank)]


@registry.register("Unsqueeze", since=(1, 11), types=_T)
class UnsqueezeAttr(GpuKernel):
    """Unsqueeze (v1, v11): insert size-1 axes at the ``axes`` attribute positions."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axes = info.attr("axes")
        if axes is None:
            raise bad(info, "attribute 'axes' is required")
        self.axes = [int(a) for a in axes]
        if info.since_version < 11 and any(a < 0 for a in self.axes):
            raise bad(info, f"axes {self.axes} must be >= 0 before opset 11")

    def compute(self, x):
        return (x.reshape(_unsqueeze_shape(x.shape, self.axes)),)


@register_host("Unsqueeze", (13, 21, 23, 24, 25), host=(1,))
class Unsqueeze(HostInputs):
    """Unsqueeze (v13+): insert size-1 axes at the positions in the ``axes`` input."""

    def compute(self, x, axes):
        return (x.reshape(_unsqueeze_shape(x.shape, host_ints(self.host(1, axes)))),)


# ------------------------------------------------------------------------ Concat, Split


@registry.register("Concat", since=(1, 4, 11, 13), types=_T)
class Concat(GpuKernel):
    """Concatenate the inputs along ``axis`` (default 1 in v1, required from v4)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axis = info.attr("axis")
        if axis is None:
            if info.since_version >= 4:
                raise bad(info, "attribute 'axis' is required")
            axis = 1
        self.axis = int(axis)

    def compute(self, *inputs):
        arrays = [a for a in inputs if a is not None]
        if not arrays:
            raise ValueError("Concat: no inputs")
        axis = norm_axis(self.axis, arrays[0].ndim)
        if len(arrays) == 1:
            return (arrays[0].copy(),)
        return (self.cp.concatenate(arrays, axis=axis),)


def _split(x: Any, axis: int, sizes: Sequence[int]) -> tuple[Any, ...]:
    axis = norm_axis(axis, x.ndim)
    if any(s < 0 for s in sizes):
        raise ValueError(f"Split: split sizes {list(sizes)} must be >= 0")
    if sum(sizes) != x.shape[axis]:
        raise ValueError(
            f"Split: split sizes {list(sizes)} do not add up to dimension {x.shape[axis]} "
            f"of axis {axis}"
        )
    lead = (slice(None),) * axis
    outs = []
    start = 0
    for s in sizes:
        outs.append(x[lead + (slice(start, start + s),)])
        start += s
    return tuple(outs)


def _even_sizes(dim: int, n: int, allow_uneven: bool) -> list[int]:
    if n <= 0:
        raise ValueError("Split: the number of outputs must be positive")
    if dim % n == 0:
        return [dim // n] * n
    if not allow_uneven:
        raise ValueError(f"Split: dimension {dim} cannot be split evenly into {n} parts")
    chunk = -(-dim // n)
    return [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]


@register_host("Split", (1, 2, 11), host=(1,))
class SplitAttr(HostInputs):
    """Split (v1-v11): sizes from the ``split`` attribute (or v1's optional input)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        split = info.attr("split")
        self.split = None if split is None else [int(s) for s in split]
        self.n = len(info.output_names)

    def compute(self, x, split=None):
        given = self.host(1, split)
        sizes = self.split if given is None else host_ints(given)
        if sizes is None:
            sizes = _even_sizes(x.shape[norm_axis(self.axis, x.ndim)], self.n, False)
        return _split(x, self.axis, sizes)


@register_host("Split", (13, 18), host=(1,))
class Split(HostInputs):
    """Split (v13+): sizes from the optional ``split`` input; ``num_outputs`` from v18."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        num = info.attr("num_outputs") if info.since_version >= 18 else None
        if num is not None:
            num = int(num)
            if num < 1:
                raise bad(info, f"num_outputs must be >= 1, got {num}")
            if info.has_input(1):
                raise bad(info, "give either the 'split' input or num_outputs, not both")
        self.num_outputs = num
        self.n = len(info.output_names)

    def compute(self, x, split=None):
        given = self.host(1, split)
        if given is not None and given.size > 0:
            sizes = host_ints(given)
        else:
            dim = x.shape[norm_axis(self.axis, x.ndim)]
            n = self.num_outputs if self.num_outputs is not None else self.n
            sizes = _even_sizes(dim, n, self.info.since_version >= 18)
        return _split(x, self.axis, sizes)


# ------------------------------------------------------------------------- Expand, Tile


@register_host("Expand", (8, 13), host=(1,))
class Expand(HostInputs):
    """Broadcast the input to ``shape`` (bidirectional numpy broadcasting)."""

    def compute(self, x, shape):
        target = np.broadcast_shapes(tuple(x.shape), tuple(host_ints(self.host(1, shape))))
        if target == tuple(x.shape):
            return (x,)
        return (self.cp.broadcast_to(x, target).copy(),)


@register_host("Tile", 1, host=(1, 2))
class Tile1(HostInputs):
    """Tile (v1): repeat the input ``tiles`` times along ``axis`` (both scalar inputs)."""

    def compute(self, x, tiles, axis):
        reps = [1] * x.ndim
        reps[norm_axis(int(host_scalar(self.host(2, axis))), x.ndim)] = int(
            host_scalar(self.host(1, tiles))
        )
        return (self.cp.tile(x, reps),)


@register_host("Tile", (6, 13), host=(1,))
class Tile(HostInputs):
    """Tile (v6+): repeat the input ``repeats[i]`` times along each axis ``i``."""

    def compute(self, x, repeats):
        reps = host_ints(self.host(1, repeats))
        if len(reps) != x.ndim:
            raise ValueError(f"Tile: repeats {reps} must have one entry per input axis ({x.ndim})")
        if any(r < 0 for r in reps):
            raise ValueError(f"Tile: repeats {reps} must be >= 0")
        return (self.cp.tile(x, reps),)


# ---------------------------------------------------------------------- Identity, Dropout


@registry.register("Identity", since=(1, 13, 14, 16, 19, 21, 23, 24, 25),
                   types={"T": TENSORS, "V": TENSORS})
class Identity(GpuKernel):
    """Return the input unchanged."""

    def compute(self, x):
        return (x,)


@register_host("Dropout", (1, 6, 7, 10, 12, 13, 22), host=(1, 2),
           types={"T": TENSORS - {np.dtype(np.bool_)}})
class Dropout(HostInputs):
    """Dropout for inference: the input passes through; the mask (when asked) is all ones.

    Versions 1 and 6 are treated as inference whatever ``is_test`` says (as onnxruntime
    does). From version 12 a node whose ``training_mode`` may be true is refused at
    capability time (:meth:`refuse_node`): the GPU provider has no random dropout, so such
    a node runs on a provider that has (the CPU's).
    """

    @classmethod
    def refuse_node(cls, graph: Any, node: Any) -> str:
        """Why a training-mode Dropout cannot run here: ``training_mode`` present and not
        a constant false (a constant ``ratio`` of 0 drops nothing, so it is accepted)."""
        mode = node.inputs[2] if len(node.inputs) > 2 else ""
        if not mode:
            return ""
        if not graph.is_constant(mode):
            return (f"training_mode ({mode!r}) is decided at run time and may be true; the GPU "
                    "provider has no random dropout")
        if not bool(np.asarray(graph.initializers[mode]).reshape(-1)[0]):
            return ""
        ratio = node.inputs[1] if len(node.inputs) > 1 else ""
        if ratio and graph.is_constant(ratio) and float(np.asarray(graph.initializers[ratio]).reshape(-1)[0]) == 0.0:
            return ""
        return "training_mode is true (random dropout); the GPU provider has no random dropout"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.want_mask = wants_output(info, 1)
        self.mask_bool = info.since_version >= 10
        self.n_out = len(info.output_names)

    def compute(self, x, ratio=None, training_mode=None):
        mode = self.host(2, training_mode)
        if mode is not None and bool(host_scalar(mode)):
            r = self.host(1, ratio)
            if r is None or float(host_scalar(r)) != 0.0:
                raise NotImplementedError(
                    "Dropout with training_mode=True is not supported on the GPU provider"
                )
        outs: tuple[Any, ...] = (x,)
        if self.n_out > 1:
            mask = None
            if self.want_mask:
                mask = self.cp.ones(x.shape, dtype=bool if self.mask_bool else x.dtype)
            outs += (mask,)
        return outs


# ---------------------------------------------------------------------------------- Pad

_PAD_MODES = ("constant", "reflect", "edge")


def _pad_mode(info: KernelInfo, allowed: Sequence[str]) -> str:
    mode = info.attr("mode", "constant")
    if isinstance(mode, bytes):
        mode = mode.decode()
    if mode not in allowed:
        raise bad(info, f"mode {mode!r} is not supported at opset {info.opset}; use one of "
                        f"{allowed}")
    return mode


def _pad(cp: Any, x: Any, begins: list[int], ends: list[int], mode: str, value: Any) -> Any:
    """Pad (or crop, for negative amounts) every axis of ``x``."""
    crop = []
    for d, b, e in zip(x.shape, begins, ends):
        start = -b if b < 0 else 0
        stop = d + e if e < 0 else d
        if stop < start:
            raise ValueError(f"Pad: negative pads ({b}, {e}) remove more than dimension {d}")
        crop.append(slice(start, stop))
    if any(b < 0 or e < 0 for b, e in zip(begins, ends)):
        x = x[tuple(crop)]
    pb = [max(b, 0) for b in begins]
    pe = [max(e, 0) for e in ends]
    if not any(pb) and not any(pe):
        return x.copy()
    if mode == "constant":
        shape = [d + b + e for d, b, e in zip(x.shape, pb, pe)]
        out = cp.full(shape, value, dtype=x.dtype)
        out[tuple(slice(b, b + d) for d, b in zip(x.shape, pb))] = x
        return out
    for d, b, e in zip(x.shape, pb, pe):
        if d == 0 and (b or e):
            raise ValueError(f"Pad: mode {mode!r} cannot pad an empty axis")
    return cp.pad(x, list(zip(pb, pe)), mode=mode)


@registry.register("Pad", since=(1, 2), types=_T)
class PadAttr(GpuKernel):
    """Pad (v1, v2): pads and fill value from attributes (``paddings`` in v1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        name = "paddings" if info.since_version == 1 else "pads"
        pads = info.attr(name)
        if pads is None:
            raise bad(info, f"attribute {name!r} is required")
        self.pads = [int(p) for p in pads]
        if len(self.pads) % 2:
            raise bad(info, f"{name} {self.pads} must have an even length")
        self.mode = _pad_mode(info, _PAD_MODES)
        self.value = float(info.attr("value", 0.0))

    def compute(self, x):
        r = x.ndim
        if len(self.pads) != 2 * r:
            raise ValueError(f"Pad: pads {self.pads} must have 2 * rank ({2 * r}) entries")
        return (_pad(self.cp, x, self.pads[:r], self.pads[r:], self.mode, self.value),)


@register_host("Pad", (11, 13, 18, 19, 21, 23, 24, 25), host=(1, 2, 3))
class Pad(HostInputs):
    """Pad (v11+): ``pads`` and ``constant_value`` inputs; ``axes`` (v18+); wrap (v19+)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        modes = (*_PAD_MODES, "wrap") if info.since_version >= 19 else _PAD_MODES
        self.mode = _pad_mode(info, modes)

    def compute(self, x, pads, constant_value=None, axes=None):
        r = x.ndim
        p = host_ints(self.host(1, pads))
        a = self.host(3, axes)
        ax = list(range(r)) if a is None else norm_axes(host_ints(a), r)
        n = len(ax)
        if len(p) != 2 * n:
            raise ValueError(f"Pad: pads {p} must have 2 * {n} entries")
        begins, ends = [0] * r, [0] * r
        for i, axis in enumerate(ax):
            begins[axis], ends[axis] = p[i], p[i + n]
        cv = self.host(2, constant_value)
        value = 0 if cv is None or cv.size == 0 else host_scalar(cv)
        return (_pad(self.cp, x, begins, ends, self.mode, value),)


# -------------------------------------------------------------------------------- Trilu


@register_host("Trilu", 14, host=(1,))
class Trilu(HostInputs):
    """Keep the upper (or lower) triangle of the last two axes, offset by diagonal ``k``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.upper = bool(info.attr("upper", 1))

    def compute(self, x, k=None):
        if x.ndim < 2:
            raise ValueError(f"Trilu: input must have rank >= 2, got shape {x.shape}")
        kv = self.host(1, k)
        kk = 0 if kv is None else int(host_scalar(kv))
        if self.upper:
            return (self.cp.triu(x, kk),)
        return (self.cp.tril(x, kk),)
