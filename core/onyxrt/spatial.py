"""Window geometry of convolutions and pools, shared by every provider's kernels.

Parsing ``kernel_shape``/``strides``/``dilations``/``pads``/``auto_pad`` and computing a
window's output shape and explicit pads for a given input (with pooling's ``ceil_mode``)
is pure arithmetic on shapes that every Conv and pool kernel needs, on any device: it
lives here once. Errors name the node (:class:`~onyxrt.errors.InvalidGraph`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .errors import InvalidGraph
from .kernels import KernelInfo
from .records import record

__all__ = ["AUTO_PADS", "SpatialAttrs", "Window", "read_spatial_attrs", "window", "prod"]


def _bad(info: KernelInfo, message: str) -> InvalidGraph:
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {message}")


AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@record(frozen=True)
class SpatialAttrs:
    """The parsed window attributes of a conv or pool node (``None``: not set)."""

    kernel_shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None
    dilations: tuple[int, ...] | None
    pads: tuple[int, ...] | None
    auto_pad: str

    def resolve(
        self, nsp: int, kernel: Sequence[int] | None = None
    ) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(kernel, strides, dilations, pads_begin, pads_end) for ``nsp`` spatial axes."""
        k = tuple(kernel) if kernel is not None else self.kernel_shape
        if k is None:
            raise ValueError("kernel_shape is not set and cannot be inferred")
        if len(k) != nsp:
            raise ValueError(f"kernel has {len(k)} spatial dims but the input has {nsp}")
        s = self.strides or (1,) * nsp
        d = self.dilations or (1,) * nsp
        p = self.pads or (0,) * (2 * nsp)
        for name, v, n in (("strides", s, nsp), ("dilations", d, nsp), ("pads", p, 2 * nsp)):
            if len(v) != n:
                raise ValueError(f"{name} has {len(v)} values, expected {n} for this input")
        return k, s, d, p[:nsp], p[nsp:]


def _ints(info: KernelInfo, name: str, minimum: int) -> tuple[int, ...] | None:
    v = info.attr(name)
    if v is None:
        return None
    vals = (int(v),) if isinstance(v, int) else tuple(int(x) for x in v)
    if any(x < minimum for x in vals):
        raise _bad(info, f"attribute {name}={list(vals)} has a value below {minimum}")
    return vals


def read_spatial_attrs(info: KernelInfo, *, need_kernel: bool = False) -> SpatialAttrs:
    """Parse and validate the window attributes of ``info``'s node."""
    kernel = _ints(info, "kernel_shape", 1)
    if need_kernel and kernel is None:
        raise _bad(info, "attribute kernel_shape is required")
    strides = _ints(info, "strides", 1)
    dilations = _ints(info, "dilations", 1)
    pads = _ints(info, "pads", 0)
    auto_pad = info.attr("auto_pad", "NOTSET") or "NOTSET"
    if isinstance(auto_pad, bytes):
        auto_pad = auto_pad.decode()
    if auto_pad not in AUTO_PADS:
        raise _bad(info, f"auto_pad={auto_pad!r} is not one of {', '.join(AUTO_PADS)}")
    if pads is not None and len(pads) % 2:
        raise _bad(info, f"pads={list(pads)} must have an even number of values")
    if kernel is not None:
        n = len(kernel)
        for name, v, want in (("strides", strides, n), ("dilations", dilations, n),
                              ("pads", pads, 2 * n)):
            if v is not None and len(v) != want:
                raise _bad(info, f"{name}={list(v)} has {len(v)} values; kernel_shape "
                                f"{list(kernel)} needs {want}")
    return SpatialAttrs(kernel, strides, dilations, pads, auto_pad)


@record(frozen=True)
class Window:
    """Where a sliding window runs over a padded input.

    ``pads_end`` is the declared end padding; ``extra_end`` holds elements past it that
    ceil-mode windows still reach (they count as padding nowhere).
    """

    out_shape: tuple[int, ...]
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    extra_end: tuple[int, ...]

    @property
    def padded(self) -> bool:
        """Whether any padding (declared or ceil-mode overhang) is involved."""
        return any(self.pads_begin) or any(self.pads_end) or any(self.extra_end)

    @property
    def total_end(self) -> tuple[int, ...]:
        """End padding including the ceil-mode overhang."""
        return tuple(e + x for e, x in zip(self.pads_end, self.extra_end))


def window(
    in_shape: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads_begin: Sequence[int],
    pads_end: Sequence[int],
    auto_pad: str,
    ceil_mode: bool = False,
) -> Window:
    """Output shape and explicit pads for a strided, dilated window over ``in_shape``."""
    out: list[int] = []
    pb_out: list[int] = []
    pe_out: list[int] = []
    extra: list[int] = []
    for n, k, s, d, pb, pe in zip(in_shape, kernel, strides, dilations, pads_begin, pads_end):
        ke = (k - 1) * d + 1
        if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max(0, (o - 1) * s + ke - n)
            small = total // 2
            pb, pe = (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)
        elif auto_pad == "VALID":
            pb = pe = 0
            o = (n - ke) // s + 1 if n >= ke else 0
        else:
            span = n + pb + pe - ke
            if span < 0:
                o = 0
            elif ceil_mode:
                o = -(-span // s) + 1
                # A window that would start inside the end padding is dropped.
                if (o - 1) * s >= n + pb:
                    o -= 1
            else:
                o = span // s + 1
        if o <= 0:
            raise ValueError(
                f"window of size {k} (dilation {d}, stride {s}) does not fit an input of "
                f"size {n} with pads ({pb}, {pe})"
            )
        reach = (o - 1) * s + ke
        out.append(o)
        pb_out.append(pb)
        pe_out.append(pe)
        extra.append(max(0, reach - (n + pb + pe)))
    return Window(tuple(out), tuple(pb_out), tuple(pe_out), tuple(extra))


def prod(values: Sequence[int]) -> int:
    """Product of ints (1 for an empty sequence)."""
    return math.prod(values)
