"""Shape manipulation and data movement, written once over an array namespace.

Reshape, Transpose, Flatten, Squeeze, Unsqueeze, Concat, Split, Expand, Tile, Identity,
Dropout, Pad, Trilu, DepthToSpace, SpaceToDepth, CenterCropPad, Compress and
ReverseSequence — every ONNX version of each. Reshape, Squeeze, Unsqueeze, Flatten,
Transpose and Split give views of their input where the namespace does (numpy, CuPy);
``view``/``permuted`` are the kernels' reshape and permutation, which a provider may
replace with faster calls of its own array type.

Steering inputs (shapes, axes, split sizes, repeats, pads, ``k``, sequence lengths) are
declared ``host_inputs`` and read on the host; constant ones once, when the kernel is built
(:class:`Steered`). The view operators, Expand, DepthToSpace and SpaceToDepth remember the
target shape of the last input shape they saw, so a node in a tiny model pays one tuple
comparison and the namespace's calls per run. Pad's reflect, edge and wrap modes write the
input into the output and fill each axis' pads from it (as ``numpy.pad`` does); pads
longer than the axis gather with an index computed in the namespace (reflection past the
end repeats, as in ``numpy.pad``). String tensors (numpy's object arrays) are filled with
``""``. Dropout's random draws, which the standard cannot make, come from numpy on the
host and are moved into the namespace.

Attribute errors are :class:`~onyxrt.errors.InvalidGraph` naming the node, raised when the
kernel is built; errors in the data are ``ValueError`` raised by ``compute``. Outputs that
would pass the session's tensor-size limit (Concat, Expand, Tile, Pad, CenterCropPad) raise
:class:`~onyxrt.errors.ResourceLimitExceeded` before anything is allocated.

Left with the providers: Shape and Size, which are not computations on an array but facts
about its shape, wanted in host memory (a device provider leaves them on the host, as
onnxruntime does). The GPU refuses training-mode Dropout rather than upload a mask per run.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt.limits import check_allocation, current_limits, output_of
from onyxrt.seeding import default_seed

from .library import OpKernel, dtype_name, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []

_LATEST = (21, 23, 24, 25)  # the versions that only widened the type lists


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


def _at(axis: int, start: int, stop: int) -> tuple[Any, ...]:
    """The index of ``start:stop`` along ``axis``."""
    return (*(slice(None),) * axis, slice(start, stop), ...)


def _scalar(value: np.ndarray) -> Any:
    """The single element of a host tensor, as a Python scalar."""
    if value.size != 1:
        raise ValueError(f"expected a scalar (one element), got shape {value.shape}")
    item = value.reshape(-1)[0]
    return item.item() if isinstance(item, np.generic) else item


def _text_attr(info: KernelInfo, name: str, default: str) -> str:
    """A string attribute (bytes decoded)."""
    value = info.attr(name, default)
    return value.decode() if isinstance(value, bytes) else value


def _define(op: str, since: int | tuple[int, ...], host: tuple[int, ...] = ()
            ) -> Callable[[type[Steered]], type[Steered]]:
    """``library.define`` with ``host`` as the host inputs, read by :meth:`Steered.steer`."""

    def decorator(cls: type[Steered]) -> type[Steered]:
        cls.steering = host
        library.define(op, since, host_inputs=host)(cls)
        return cls

    return decorator


class Steered(OpKernel):
    """Base of the family: steering inputs (:attr:`steering`, the host inputs) that are
    constants are read once, when the kernel is built; :meth:`blank` makes filled outputs
    under the session's tensor-size limit."""

    steering: tuple[int, ...] = ()

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fixed = {i: self.host(c) for i in self.steering if (c := info.constant(i)) is not None}
        self.what = output_of(info)

    def steer(self, i: int, value: Any) -> np.ndarray | None:
        """Steering input ``i`` on the host (its constant, or the runtime value); None if absent."""
        fixed = self.fixed.get(i)
        if fixed is not None:
            return fixed
        return None if value is None else self.host(value)

    def view(self, x: Any, shape: tuple[int, ...]) -> Any:
        """``x`` reshaped (a view where the namespace can); a provider may use a faster call."""
        return self.xp.reshape(x, shape)

    def permuted(self, x: Any, axes: tuple[int, ...]) -> Any:
        """``x`` with its axes permuted; a provider may use a faster call."""
        return self.xp.permute_dims(x, axes)

    def check_size(self, shape: Sequence[int], like: Any) -> None:
        """ResourceLimitExceeded when an output of ``shape`` like ``like`` would pass the limit."""
        check_allocation(shape, self.backend.numpy_dtype(like.dtype), self.what)

    def blank(self, shape: Sequence[int], like: Any, value: Any = None) -> Any:
        """A new array of ``shape`` in ``like``'s dtype filled with ``value`` (default: zero,
        or ``""`` for strings), after :meth:`check_size`."""
        self.check_size(shape, like)
        if value is None and dtype_name(like.dtype) == "object":
            value = ""
        if value is None:
            return self.xp.zeros(tuple(shape), dtype=like.dtype)
        return self.xp.full(tuple(shape), value, dtype=like.dtype)


# --------------------------------------------------------------------- the view operators


class Reshaping(Steered):
    """An operator that reshapes its input to :meth:`target` of (input shape, steering):
    the steering is the attribute (:attr:`attr_steer`) or input 1; the target of the last
    key seen is kept, so repeated calls skip the validation."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.attr_steer: tuple[int, ...] | None = None
        fixed = self.fixed.get(1)
        self.const_steer = None if fixed is None else tuple(self.host_ints(fixed))
        self._last: tuple[Any, tuple[int, ...]] = (None, ())

    def target(self, shape: tuple[int, ...], steer: tuple[int, ...] | None) -> tuple[int, ...]:
        """The output shape (ValueError when the steering does not fit ``shape``)."""
        raise NotImplementedError

    def shape_for(self, x: Any, steer: Any) -> tuple[int, ...]:
        """:meth:`target` for ``x`` and the steering (the attribute, the constant or ``steer``)."""
        if self.attr_steer is not None:
            ints = self.attr_steer
        elif self.const_steer is not None:
            ints = self.const_steer
        else:
            ints = None if steer is None else tuple(self.host_ints(steer))
        key = (x.shape, ints)
        last = self._last
        if last[0] != key:
            last = self._last = (key, self.target(tuple(x.shape), ints))
        return last[1]

    def compute(self, x, steer=None):
        return (self.view(x, self.shape_for(x, steer)),)


def _ints_attr(info: KernelInfo, name: str, required: bool = False) -> tuple[int, ...] | None:
    """An ints attribute as a tuple (None when absent; InvalidGraph if ``required``)."""
    value = info.attr(name)
    if value is None and required:
        raise InvalidGraph(f"{info.op_type} node {info.node_name!r}: attribute {name!r} is required")
    return None if value is None else tuple(int(v) for v in value)


@_define("Reshape", (1, 5, 13, 14, 19, *_LATEST), host=(1,))
class Reshape(Reshaping):
    """Reshape: 0 copies the input's dimension (unless ``allowzero``, v14+), -1 is inferred;
    the shape is the ``shape`` attribute in v1, the second input from v5."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if info.since_version == 1:
            self.attr_steer = _ints_attr(info, "shape", required=True)
        self.allowzero = info.since_version >= 14 and bool(info.attr("allowzero", 0))

    def target(self, shape, steer):
        target = list(steer)
        if target.count(-1) > 1:
            raise ValueError(f"Reshape: shape {target} has more than one -1")
        if any(s < -1 for s in target):
            raise ValueError(f"Reshape: shape {target} has a negative dimension other than -1")
        if self.allowzero:
            if 0 in target and -1 in target:
                raise ValueError(f"Reshape: shape {target} has both 0 and -1 with allowzero=1")
        else:
            for i, s in enumerate(target):
                if s == 0:
                    if i >= len(shape):
                        raise ValueError(f"Reshape: shape {target} copies dimension {i} (0) but "
                                         f"the input has rank {len(shape)}")
                    target[i] = shape[i]
        size = math.prod(shape)
        if -1 in target:
            known = math.prod(s for s in target if s != -1)
            if known == 0 or size % known:
                raise ValueError(f"Reshape: cannot reshape input of shape {shape} into {list(steer)}")
            target[target.index(-1)] = size // known
        if math.prod(target) != size:
            raise ValueError(f"Reshape: cannot reshape input of shape {shape} into {list(steer)}")
        return tuple(target)


@_define("Flatten", (1, 9, 11, 13, *_LATEST))
class Flatten(Reshaping):
    """Flatten to 2-D: the dims before ``axis`` form the rows, the rest the columns."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axis = int(info.attr("axis", 1))
        if info.since_version < 11 and axis < 0:
            raise InvalidGraph(f"{self.where()}: axis {axis} must be >= 0 before opset 11")
        self.attr_steer = (axis,)

    def target(self, shape, steer):
        r = len(shape)
        axis = steer[0] + r if steer[0] < 0 else steer[0]
        if not 0 <= axis <= r:
            raise ValueError(f"Flatten: axis {steer[0]} is out of range for rank {r}")
        return (math.prod(shape[:axis]), math.prod(shape[axis:]))


@_define("Squeeze", (1, 11, 13, *_LATEST), host=(1,))
class Squeeze(Reshaping):
    """Remove the size-1 axes listed (every size-1 axis when none are): the ``axes``
    attribute before v13, the optional second input from v13."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if info.since_version < 13:
            self.attr_steer = _ints_attr(info, "axes") or ()

    def target(self, shape, steer):
        if not steer:  # absent or empty: every size-1 axis (as onnxruntime does)
            return tuple(d for d in shape if d != 1)
        norm = _norm_axes(steer, len(shape))
        for a in norm:
            if shape[a] != 1:
                raise ValueError(f"Squeeze: axis {a} of shape {shape} is not 1")
        return tuple(d for i, d in enumerate(shape) if i not in norm)


@_define("Unsqueeze", (1, 11, 13, *_LATEST), host=(1,))
class Unsqueeze(Reshaping):
    """Insert size-1 axes at the positions listed: the ``axes`` attribute before v13, the
    second input from v13."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if info.since_version < 13:
            self.attr_steer = _ints_attr(info, "axes", required=True)
            if info.since_version < 11 and any(a < 0 for a in self.attr_steer):
                raise InvalidGraph(f"{self.where()}: axes {list(self.attr_steer)} must be >= 0 "
                                   "before opset 11")

    def target(self, shape, steer):
        out_rank = len(shape) + len(steer)
        norm = set(_norm_axes(steer, out_rank))
        src = iter(shape)
        return tuple(1 if i in norm else next(src) for i in range(out_rank))


@_define("Transpose", (1, 13, *_LATEST))
class Transpose(Steered):
    """Permute the axes; the default ``perm`` reverses them."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        perm = info.attr("perm")
        self.perm = None if perm is None else tuple(int(p) for p in perm)
        if self.perm is not None and sorted(self.perm) != list(range(len(self.perm))):
            raise InvalidGraph(f"{self.where()}: perm {list(self.perm)} is not a permutation "
                               f"of 0..{len(self.perm) - 1}")

    def axes(self, rank: int) -> tuple[int, ...]:
        """The permutation for an input of ``rank``."""
        if self.perm is None:
            return tuple(range(rank - 1, -1, -1))
        if len(self.perm) != rank:
            raise ValueError(f"Transpose: perm {list(self.perm)} does not match input rank {rank}")
        return self.perm

    def compute(self, x):
        return (self.permuted(x, self.axes(x.ndim)),)


@_define("Identity", (1, 13, 14, 16, 19, *_LATEST))
class Identity(Steered):
    """Return the input unchanged (tensors, sequences and optionals alike)."""

    def compute(self, x):
        return (x,)


# ------------------------------------------------------------------------ Concat, Split


@_define("Concat", (1, 4, 11, 13))
class Concat(Steered):
    """Concatenate the inputs along ``axis`` (default 1 in v1, required from v4)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axis = info.attr("axis")
        if axis is None and info.since_version >= 4:
            raise InvalidGraph(f"{self.where()}: attribute 'axis' is required")
        self.axis = 1 if axis is None else int(axis)

    def arrays(self, inputs: Sequence[Any]) -> tuple[list[Any], int]:
        """The present inputs and the normalized axis, after the size check: the same
        value may be listed many times, so the output can dwarf every input."""
        arrays = [a for a in inputs if a is not None]
        if not arrays:
            raise ValueError("Concat: no inputs")
        axis = _norm_axis(self.axis, arrays[0].ndim)
        shape = list(arrays[0].shape)
        shape[axis] = sum(a.shape[axis] if a.ndim > axis else 0 for a in arrays)
        self.check_size(shape, arrays[0])
        return arrays, axis

    def compute(self, *inputs):
        if self.xp is np:
            # Host arrays (a classifier's few columns): numpy's own checks, and the size
            # limit on the elements the output holds (the inputs' total), in ~1 us
            # instead of ~5.
            total = 0
            for a in inputs:
                if type(a) is not np.ndarray:
                    break
                total += a.size
            else:
                first = inputs[0]
                axis = self.axis + first.ndim if self.axis < 0 else self.axis
                if 0 <= axis < first.ndim and total * first.itemsize <= current_limits().max_tensor_bytes:
                    return (np.concatenate(inputs, axis=axis),)
        arrays, axis = self.arrays(inputs)
        return (self.xp.concat(arrays, axis=axis),)


def _even_sizes(dim: int, n: int, allow_uneven: bool) -> list[int]:
    if n <= 0:
        raise ValueError("Split: the number of outputs must be positive")
    if dim % n == 0:
        return [dim // n] * n
    if not allow_uneven:
        raise ValueError(f"Split: dimension {dim} cannot be split evenly into {n} parts")
    chunk = -(-dim // n)
    return [min(chunk, max(dim - i * chunk, 0)) for i in range(n)]


@_define("Split", (1, 2, 11, 13, 18), host=(1,))
class Split(Steered):
    """Split along ``axis`` into views: sizes from the ``split`` attribute (v1-v11; v1 also
    takes them as a second input) or the optional ``split`` input (v13+), else evenly
    between the outputs (``num_outputs`` from v18, the last part smaller)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        self.split = _ints_attr(info, "split") if info.since_version < 13 else None
        self.n = len(info.output_names)
        num = info.attr("num_outputs") if info.since_version >= 18 else None
        if num is not None:
            num = int(num)
            if num < 1:
                raise InvalidGraph(f"{self.where()}: num_outputs must be >= 1, got {num}")
            if info.has_input(1):
                raise InvalidGraph(f"{self.where()}: give either the 'split' input or "
                                   "num_outputs, not both")
            if num != self.n:
                # Also keeps a crafted num_outputs=10**12 from building a list that large.
                raise InvalidGraph(f"{self.where()}: num_outputs is {num} but the node has "
                                   f"{self.n} outputs")

    def compute(self, x, split=None):
        axis = _norm_axis(self.axis, x.ndim)
        given = self.steer(1, split)
        if given is not None and (given.size or self.info.since_version < 13):
            sizes = self.host_ints(given)
        elif self.split is not None:
            sizes = list(self.split)
        else:
            sizes = _even_sizes(x.shape[axis], self.n, self.info.since_version >= 18)
        if any(s < 0 for s in sizes):
            raise ValueError(f"Split: split sizes {sizes} must be >= 0")
        if sum(sizes) != x.shape[axis]:
            raise ValueError(f"Split: split sizes {sizes} do not add up to dimension "
                             f"{x.shape[axis]} of axis {axis}")
        bounds = np.cumsum([0, *sizes]).tolist()
        return tuple(x[_at(axis, a, b)] for a, b in zip(bounds, bounds[1:]))


# ------------------------------------------------------------------------- Expand, Tile


def _broadcast(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy broadcast of two shapes (ValueError when they do not broadcast)."""
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    if any(i != j and 1 not in (i, j) for i, j in zip(a, b)):
        raise ValueError(f"Expand: shapes {a} and {b} do not broadcast")
    return tuple(j if i == 1 else i for i, j in zip(a, b))


@_define("Expand", (8, 13), host=(1,))
class Expand(Reshaping):
    """Broadcast the input to ``shape`` (bidirectional numpy broadcasting), as a new array."""

    def target(self, shape, steer):
        return _broadcast(shape, steer)

    def compute(self, x, shape):
        target = self.shape_for(x, shape)
        if target == x.shape:
            return (x,)
        self.check_size(target, x)
        return (self.xp.reshape(self.xp.broadcast_to(x, target), target, copy=True),)


@_define("Tile", (6, 13), host=(1,))
class Tile(Steered):
    """Repeat the input ``repeats[i]`` times along each axis ``i``."""

    def repeats(self, x: Any, repeats: Any, axis: Any) -> list[int]:
        """The repetitions of each axis of ``x``."""
        reps = self.host_ints(self.steer(1, repeats))
        if len(reps) != x.ndim:
            raise ValueError(f"Tile: repeats {reps} must have one entry per input axis ({x.ndim})")
        if any(r < 0 for r in reps):
            raise ValueError(f"Tile: repeats {reps} must be >= 0")
        return reps

    def compute(self, x, repeats, axis=None):
        reps = self.repeats(x, repeats, axis)
        self.check_size([d * r for d, r in zip(x.shape, reps)], x)
        return (self.xp.tile(x, tuple(reps)),)


@_define("Tile", 1, host=(1, 2))
class Tile1(Tile):
    """Tile (v1): repeat the input ``tiles`` times along ``axis`` (both scalar inputs)."""

    def repeats(self, x, repeats, axis):
        reps = [1] * x.ndim
        reps[_norm_axis(int(_scalar(self.steer(2, axis))), x.ndim)] = int(_scalar(self.steer(1, repeats)))
        return reps


# ------------------------------------------------------------------------------ Dropout


@_define("Dropout", (1, 6, 7, 10, 12, 13, 22), host=(1, 2))
class Dropout(Steered):
    """Dropout: in inference the input passes through and the mask (when asked for) is all
    ones — of type T before v10, bool from v10. Training — ``is_test`` unset in v1/v6,
    ``training_mode`` true from v12 (never in v7/v10) — zeroes the elements whose uniform
    draw is below the ratio and scales the rest by ``1 / (1 - ratio)``. The standard has
    no random numbers: the draws come from numpy's ``RandomState`` on the host (seeded by
    the ``seed`` attribute, else :func:`onyxrt.seeding.default_seed`), the mask ONNX's
    examples describe, moved into the namespace."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.ratio = float(info.attr("ratio", 0.5))
        if info.since_version < 7 and not 0.0 <= self.ratio <= 1.0:
            raise InvalidGraph(f"{self.where()}: ratio {self.ratio} must be in [0, 1]")
        self.training = info.since_version < 7 and not info.attr("is_test", 0)
        self.mask_bool = info.since_version >= 10
        outs = info.output_names
        self.n_out = len(outs)
        self.want_mask = self.n_out > 1 and outs[1] != ""
        seed = info.attr("seed") if info.since_version >= 12 else None
        if seed is None:
            seed = default_seed()
        self._rng = np.random.RandomState(None if seed is None else int(seed) & 0xFFFFFFFF)
        self._lock = threading.Lock()  # one node may run on several threads at once

    def mask(self, x: Any) -> Any:
        """The all-ones mask of an inference run."""
        return self.xp.ones(x.shape, dtype=self.backend.dtype(np.bool_) if self.mask_bool else x.dtype)

    def train(self, x: Any, ratio: float) -> tuple[Any, Any]:
        """Random dropout: the output and the mask (bool, or T before v10)."""
        xp = self.xp
        with self._lock:
            draws = self._rng.uniform(0.0, 1.0, tuple(x.shape))
        keep = draws >= ratio
        mask = xp.asarray(keep if self.mask_bool else keep.astype(self.backend.numpy_dtype(x.dtype)))
        if ratio >= 1.0:
            return xp.zeros_like(x), mask
        work = x if dtype_name(x.dtype) in ("float16", "float32", "float64") else \
            xp.astype(x, self.backend.dtype(np.float32))
        out = work * xp.asarray(keep.astype(self.backend.numpy_dtype(work.dtype))) * (1.0 / (1.0 - ratio))
        return self.narrow(out, x), mask

    def compute(self, x, ratio=None, training_mode=None):
        y, mask = x, None
        if self.info.since_version >= 12:
            r = self.steer(1, ratio)
            r = 0.5 if r is None else float(_scalar(r))
            if not 0.0 <= r <= 1.0:
                raise ValueError(f"Dropout: ratio {r} must be in [0, 1]")
            mode = self.steer(2, training_mode)
            if mode is not None and bool(_scalar(mode)) and r != 0.0:
                y, mask = self.train(x, r)
        elif self.training and self.ratio > 0.0:
            y, mask = self.train(x, self.ratio)
        if mask is None and self.want_mask:
            mask = self.mask(x)
        return (y,) if self.n_out == 1 else (y, mask)


# ---------------------------------------------------------------------------------- Pad

_PAD_MODES = ("constant", "reflect", "edge")


def _source_index(xp: Any, int64: Any, d: int, before: int, after: int, mode: str) -> Any:
    """For each position of an axis of length ``d`` padded by ``before``/``after``, the
    input position it copies: clamped (edge), periodic (wrap), or mirrored about the end
    elements (reflect, repeating past them as numpy.pad does; a length-1 axis repeats)."""
    i = xp.arange(-before, d + after, dtype=int64)
    if mode == "edge":
        return xp.clip(i, 0, d - 1)
    if mode == "wrap":
        return i % d
    if d == 1:
        return xp.zeros_like(i)
    period = 2 * (d - 1)
    m = i % period
    return xp.where(m < d, m, period - m)


class Padding(Steered):
    """Base of Pad: :meth:`pad` crops (negative amounts) and pads every axis, through the
    backend's ``pad`` extra where it has one (``pad(x, begins, ends, mode, value)`` → the
    padded array, or None where it declines)."""

    def pad_mode(self, allowed: Sequence[str]) -> str:
        """The ``mode`` attribute, one of ``allowed`` (InvalidGraph otherwise)."""
        mode = _text_attr(self.info, "mode", "constant")
        if mode not in allowed:
            raise InvalidGraph(f"{self.where()}: mode {mode!r} is not supported at opset "
                               f"{self.info.opset}; use one of {tuple(allowed)}")
        return mode

    def pad(self, x: Any, begins: list[int], ends: list[int], mode: str, value: Any) -> Any:
        """``x`` cropped by the negative amounts, padded by the positive ones."""
        crop = []
        for d, b, e in zip(x.shape, begins, ends, strict=True):
            start, stop = max(-b, 0), d + min(e, 0)
            if stop < start:
                raise ValueError(f"Pad: negative pads ({b}, {e}) remove more than dimension {d}")
            crop.append(slice(start, stop))
        if any(b < 0 or e < 0 for b, e in zip(begins, ends)):
            x = x[tuple(crop)]
        pb, pe = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
        if not any(pb) and not any(pe):
            return x
        shape = [d + b + e for d, b, e in zip(x.shape, pb, pe)]
        self.check_size(shape, x)
        compiled = self.backend.extras.get("pad")  # a backend's one-pass pad (None: declines)
        if compiled is not None:
            out = compiled(x, pb, pe, mode, value)
            if out is not None:
                return out
        if mode == "constant":
            out = self.blank(shape, x, value)
            out[tuple(slice(b, b + d) for d, b in zip(x.shape, pb))] = x
            return out
        pads = [(axis, d, b, e) for axis, (d, b, e) in enumerate(zip(x.shape, pb, pe)) if b or e]
        if any(d == 0 for _, d, _, _ in pads):
            raise ValueError(f"Pad: mode {mode!r} cannot pad an empty axis")
        xp = self.xp
        if any(b >= d or e >= d for _, d, b, e in pads) and mode != "edge":
            # Pads reaching past the axis' far end: one gather per axis.
            for axis, d, b, e in pads:
                x = xp.take(x, _source_index(xp, self.backend.dtype(np.int64), d, b, e, mode), axis=axis)
            return x
        # One output: the input in its middle, then the pads of each axis in turn copied
        # from the output itself (so the corners come from the pads of earlier axes).
        out = xp.empty(tuple(shape), dtype=x.dtype)
        out[tuple(slice(b, b + d) for d, b in zip(x.shape, pb))] = x
        for axis, d, b, e in pads:
            if mode == "edge":
                before, after = out[_at(axis, b, b + 1)], out[_at(axis, b + d - 1, b + d)]
            elif mode == "wrap":
                before, after = out[_at(axis, d, d + b)], out[_at(axis, b, b + e)]
            else:
                before = xp.flip(out[_at(axis, b + 1, 2 * b + 1)], axis=axis)
                after = xp.flip(out[_at(axis, b + d - 1 - e, b + d - 1)], axis=axis)
            if b:
                out[_at(axis, 0, b)] = before
            if e:
                out[_at(axis, b + d, b + d + e)] = after
        return out


@_define("Pad", (1, 2))
class PadAttr(Padding):
    """Pad (v1, v2): the pads and the fill value are attributes (``paddings`` in v1)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        name = "paddings" if info.since_version == 1 else "pads"
        self.pads = list(_ints_attr(info, name, required=True))
        if len(self.pads) % 2:
            raise InvalidGraph(f"{self.where()}: {name} {self.pads} must have an even length")
        self.mode = self.pad_mode(_PAD_MODES)
        self.value = float(info.attr("value", 0.0))

    def compute(self, x):
        r = x.ndim
        if len(self.pads) != 2 * r:
            raise ValueError(f"Pad: pads {self.pads} must have 2 * rank ({2 * r}) entries")
        return (self.pad(x, self.pads[:r], self.pads[r:], self.mode, self.value),)


@_define("Pad", (11, 13, 18, 19, *_LATEST), host=(1, 2, 3))
class Pad(Padding):
    """Pad (v11+): ``pads`` and ``constant_value`` inputs; ``axes`` (v18+); wrap (v19+)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.mode = self.pad_mode((*_PAD_MODES, "wrap") if info.since_version >= 19 else _PAD_MODES)

    def compute(self, x, pads, constant_value=None, axes=None):
        r = x.ndim
        p = self.host_ints(self.steer(1, pads))
        a = self.steer(3, axes)
        ax = list(range(r)) if a is None else _norm_axes(self.host_ints(a), r)
        n = len(ax)
        if len(p) != 2 * n:
            raise ValueError(f"Pad: pads {p} must have 2 * {n} entries")
        begins, ends = [0] * r, [0] * r
        for i, axis in enumerate(ax):
            begins[axis], ends[axis] = p[i], p[i + n]
        cv = self.steer(2, constant_value)
        value = None if cv is None or cv.size == 0 else _scalar(cv)
        return (self.pad(x, begins, ends, self.mode, value),)


@_define("CenterCropPad", 18, host=(1,))
class CenterCropPad(Steered):
    """Center-crop or zero-pad the listed ``axes`` (default all) to the sizes in ``shape``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axes = _ints_attr(info, "axes")

    def compute(self, x, shape):
        sizes = self.host_ints(self.steer(1, shape))
        axes = list(range(x.ndim)) if self.axes is None else _norm_axes(self.axes, x.ndim)
        if len(sizes) != len(axes):
            raise ValueError(f"CenterCropPad: shape {sizes} does not match axes {axes}")
        out_shape = list(x.shape)
        src = [slice(None)] * x.ndim
        dst = [slice(None)] * x.ndim
        for a, size in zip(axes, sizes):
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
        out = self.blank(out_shape, x)
        out[tuple(dst)] = x[tuple(src)]
        return (out,)


# ------------------------------------------------------------------------------- Trilu


@_define("Trilu", 14, host=(1,))
class Trilu(Steered):
    """Keep the upper (or lower) triangle of the last two axes, offset by diagonal ``k``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.upper = bool(info.attr("upper", 1))
        self._last: tuple[Any, Any] = (None, None)  # (rows, columns, k), its mask

    def compute(self, x, k=None):
        if x.ndim < 2:
            raise ValueError(f"Trilu: input must have rank >= 2, got shape {x.shape}")
        kv = self.steer(1, k)
        key = (*x.shape[-2:], 0 if kv is None else int(_scalar(kv)))
        last = self._last
        if last[0] != key:
            xp, int64 = self.xp, self.backend.dtype(np.int64)
            n, m, kk = key
            diff = xp.arange(m, dtype=int64) - xp.reshape(xp.arange(n, dtype=int64), (n, 1))
            last = self._last = (key, diff >= kk if self.upper else diff <= kk)
        zero = self.xp.asarray("", dtype=x.dtype) if dtype_name(x.dtype) == "object" else \
            self.xp.zeros((), dtype=x.dtype)
        return (self.xp.where(last[1], x, zero),)


# ------------------------------------------------------------------ DepthToSpace and back


class BlockMove(Steered):
    """Base of DepthToSpace and SpaceToDepth: a reshape, a permutation and a reshape,
    planned (:meth:`plan`) once per input shape."""

    has_mode = 11  # the first version with the ``mode`` attribute

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        bs = info.attr("blocksize")
        if bs is None or int(bs) < 1:
            raise InvalidGraph(f"{self.where()}: blocksize must be a positive integer, got {bs}")
        self.bs = int(bs)
        self.mode = _text_attr(info, "mode", "DCR") if info.since_version >= self.has_mode else "DCR"
        if self.mode not in ("DCR", "CRD"):
            raise InvalidGraph(f"{self.where()}: mode {self.mode!r} must be 'DCR' or 'CRD'")
        self._last: tuple[Any, Any] = (None, None)  # input shape, its plan

    def plan(self, b: int, c: int, h: int, w: int) -> tuple[tuple[int, ...], ...]:
        """The first shape, the permutation and the output shape (ValueError when the
        input does not divide into blocks)."""
        raise NotImplementedError

    def compute(self, x):
        last = self._last
        if last[0] != x.shape:
            if x.ndim != 4:
                raise ValueError(f"{self.info.op_type}: input must be 4-D, got shape {x.shape}")
            last = self._last = (x.shape, self.plan(*x.shape))
        first, perm, out = last[1]
        return (self.view(self.permuted(self.view(x, first), perm), out),)


@_define("DepthToSpace", (1, 11, 13, 28))
class DepthToSpace(BlockMove):
    """Move channel blocks into spatial blocks (mode DCR, or CRD from v11)."""

    def plan(self, b, c, h, w):
        bs = self.bs
        if c % (bs * bs):
            raise ValueError(f"DepthToSpace: channels {c} not divisible by blocksize^2 {bs * bs}")
        oc = c // (bs * bs)
        if self.mode == "DCR":
            return (b, bs, bs, oc, h, w), (0, 3, 4, 1, 5, 2), (b, oc, h * bs, w * bs)
        return (b, oc, bs, bs, h, w), (0, 1, 4, 2, 5, 3), (b, oc, h * bs, w * bs)


@_define("SpaceToDepth", (1, 13, 28))
class SpaceToDepth(BlockMove):
    """Move spatial blocks into channels (the inverse of DepthToSpace; mode from v28)."""

    has_mode = 28

    def plan(self, b, c, h, w):
        bs = self.bs
        if h % bs or w % bs:
            raise ValueError(f"SpaceToDepth: spatial dims {h}x{w} not divisible by {bs}")
        perm = (0, 3, 5, 1, 2, 4) if self.mode == "DCR" else (0, 1, 3, 5, 2, 4)
        return (b, c, h // bs, bs, w // bs, bs), perm, (b, c * bs * bs, h // bs, w // bs)


# -------------------------------------------------------------- ReverseSequence, Compress


@_define("ReverseSequence", (10, 28), host=(1,))
class ReverseSequence(Steered):
    """Reverse the first ``sequence_lens[i]`` time steps of each batch entry ``i``."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.batch_axis = int(info.attr("batch_axis", 1))
        self.time_axis = int(info.attr("time_axis", 0))
        if {self.batch_axis, self.time_axis} != {0, 1}:
            raise InvalidGraph(f"{self.where()}: batch_axis ({self.batch_axis}) and time_axis "
                               f"({self.time_axis}) must be 0 and 1 in some order")

    def compute(self, x, sequence_lens):
        if x.ndim < 2:
            raise ValueError(f"ReverseSequence: input must have rank >= 2, got {x.shape}")
        steps, batch = x.shape[self.time_axis], x.shape[self.batch_axis]
        lens = self.steer(1, sequence_lens).astype(np.int64).reshape(-1)
        if lens.shape[0] != batch:
            raise ValueError(f"ReverseSequence: sequence_lens has {lens.shape[0]} entries, "
                             f"batch is {batch}")
        if np.any(lens < 0) or np.any(lens > steps):
            raise ValueError(f"ReverseSequence: sequence_lens must be in [0, {steps}]")
        # The source row of every (time, batch) row of x viewed as rows of the remaining
        # axes, computed on the host: one row gather (a copy of whole rows) in the namespace.
        t = np.arange(steps, dtype=np.int64)[:, None]
        b = np.arange(batch, dtype=np.int64)[None, :]
        src = np.where(t < lens[None, :], lens[None, :] - 1 - t, t)
        rows = src * batch + b if self.time_axis == 0 else (b * steps + src).T
        flat = self.view(x, (steps * batch, math.prod(x.shape[2:])))
        out = self.xp.take(flat, self.xp.asarray(rows.reshape(-1)), axis=0)
        return (self.view(out, tuple(x.shape)),)


@_define("Compress", (9, 11, 28))
class Compress(Steered):
    """Keep the slices along ``axis`` (or the elements of the flattened input) where the
    condition is true; a condition shorter than the axis keeps none past its end."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        axis = info.attr("axis")
        self.axis = None if axis is None else int(axis)
        self.bool, self.int64 = self.backend.dtype(np.bool_), self.backend.dtype(np.int64)

    def compute(self, x, condition):
        xp = self.xp
        cond = self.view(condition, (-1,))
        if cond.dtype != self.bool:
            cond = xp.astype(cond, self.bool)
        if self.axis is None:
            flat = self.view(x, (-1,))
            n = min(cond.shape[0], flat.shape[0])
            return (flat[:n][cond[:n]],)
        axis = _norm_axis(self.axis, x.ndim)
        dim = x.shape[axis]
        if cond.shape[0] > dim:
            if bool(xp.any(cond[dim:])):
                raise ValueError(f"Compress: condition selects beyond dimension {dim} of axis {axis}")
            cond = cond[:dim]
        keep = xp.arange(cond.shape[0], dtype=self.int64)[cond]
        return (xp.take(x, keep, axis=axis),)
