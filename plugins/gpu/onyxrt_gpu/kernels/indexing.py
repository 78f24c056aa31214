"""GPU kernels: indexing (Gather, Slice).

Slice returns a view of its input, as CuPy does; its bounds are read on the host (a
constant once, at creation; a runtime input is a registered ``host_inputs``).

Gather uses ``cupy.take``, whose indices wrap around (negative indices count from the end;
out-of-range ones are not detected on the device).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo

from . import registry
from ._common import INTS, TENSORS, GpuKernel, HostInputs, bad, host_ints, norm_axis, register_host

_T = {"T": TENSORS}

# ------------------------------------------------------------------------------- Gather


@registry.register("Gather", since=(1, 11, 13), types={"T": TENSORS, "Tind": INTS})
class Gather(GpuKernel):
    """Gather slices of ``data`` along ``axis`` at ``indices`` (negatives count back).

    Constant indices are uploaded once, at creation; host indices at run time are copied
    to the device (a transfer).
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.axis = int(info.attr("axis", 0))
        c = info.constant(1)
        self.indices = None if c is None else self.upload(np.asarray(c, dtype=np.int64))

    def compute(self, data, indices):
        axis = norm_axis(self.axis, data.ndim)
        idx = self.indices if self.indices is not None else self.device(indices)
        return (self.cp.take(data, idx, axis=axis),)


# -------------------------------------------------------------------------------- Slice


def _slice_tuple(shape: tuple[int, ...], starts: Any, ends: Any, axes: Any,
                 steps: Any) -> tuple[slice, ...]:
    rank = len(shape)
    starts_l = host_ints(starts)
    ends_l = host_ints(ends)
    if len(starts_l) != len(ends_l):
        raise ValueError(f"starts has {len(starts_l)} values but ends has {len(ends_l)}")
    axes_l = list(range(len(starts_l))) if axes is None else [
        norm_axis(a, rank) for a in host_ints(axes)
    ]
    steps_l = [1] * len(starts_l) if steps is None else host_ints(steps)
    if not len(axes_l) == len(steps_l) == len(starts_l):
        raise ValueError(
            f"starts/ends/axes/steps lengths differ: {len(starts_l)}, {len(ends_l)}, "
            f"{len(axes_l)}, {len(steps_l)}"
        )
    if len(set(axes_l)) != len(axes_l):
        raise ValueError(f"repeated axes in Slice: {axes_l}")
    out = [slice(None)] * rank
    for s, e, a, k in zip(starts_l, ends_l, axes_l, steps_l):
        d = shape[a]
        if k == 0:
            raise ValueError(f"Slice step for axis {a} is 0")
        if s < 0:
            s += d
        if e < 0:
            e += d
        if k > 0:
            s = min(max(s, 0), d)
            e = min(max(e, 0), d)
        else:
            s = min(max(s, 0), d - 1)
            e = min(max(e, -1), d - 1)
        out[a] = slice(s, e if e >= 0 else None, k)
    return tuple(out)


@registry.register("Slice", since=1, types=_T)
class Slice1(GpuKernel):
    """Slice v1: starts/ends/axes attributes, unit steps (a view)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.starts = info.attr("starts")
        self.ends = info.attr("ends")
        self.axes = info.attr("axes")
        if self.starts is None or self.ends is None:
            raise bad(info, "attributes 'starts' and 'ends' are required")
        if len(self.starts) != len(self.ends):
            raise bad(info, "'starts' and 'ends' must have the same length")
        if self.axes is not None and len(self.axes) != len(self.starts):
            raise bad(info, "'axes' must have as many values as 'starts'")

    def compute(self, data):
        return (data[_slice_tuple(data.shape, self.starts, self.ends, self.axes, None)],)


@register_host("Slice", (10, 11, 13), host=(1, 2, 3, 4))
class Slice(HostInputs):
    """Slice v10+: starts, ends, optional axes and steps as inputs (a view)."""

    def compute(self, data, starts, ends, axes=None, steps=None):
        key = _slice_tuple(data.shape, self.host(1, starts), self.host(2, ends),
                           self.host(3, axes), self.host(4, steps))
        return (data[key],)
