"""CPU kernels for the blocked channel layout NCHWc (domain ``ai.onyxrt``, version 1).

The optimizer's layout pass (:mod:`onyxrt.optimizer.layout`) rewrites chains of float32
convolutions to run on tensors held as (N, ceil(C/16), H, W, 16), where the 16 channels of
a pixel are one vector (csrc/nchwc.c says why that is faster):

* ``NchwcConv(X, W, B?, Z?)``: Conv's attributes plus FusedConv's ``activation`` /
  ``activation_params``. X is blocked (rank 5) or plain NCHW (rank 4: a first layer with
  few channels reads the image as it is); W, B are the Conv's own constants, packed here
  once; Z, the residual, and Y are blocked. ``group`` is 1, or the channel count
  (depthwise, one filter per channel).
* ``ReorderInput(X)``: NCHW → blocked, lanes past C zero.
* ``ReorderOutput(X)``: blocked → NCHW, attribute ``channels`` = C.
* ``NchwcGlobalAveragePool(X)``: GlobalAveragePool on a blocked tensor (N, B, 1, 1, 16).
* ``NchwcMaxPool(X)``: MaxPool's attributes (one output: no Indices) on a blocked tensor.

Lanes past C stay zero through every operator: bias and filters are zero-padded, and the
activations here map 0 to a finite value, which the next convolution multiplies by its
zero filters. They are registered only where :data:`onyxrt_cpu.native.NCHWC_ENABLED`
(the compiled module is on and the CPU has AVX-512, or ``ONYXRT_CPU_NCHWC=1``):
elsewhere the pass leaves models in NCHW.
"""

from __future__ import annotations

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.optimizer import FUSED_DOMAIN, FUSED_DOMAIN_VERSION
from onyxrt.optimizer.fused_ops import conv_epilogue
from onyxrt.spatial import read_spatial_attrs, window
from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND
from .fused import native_activation

__all__ = ["NchwcConv", "ReorderInput", "ReorderOutput", "NchwcGlobalAveragePool", "NchwcMaxPool"]

BLOCK = native.NCHWC_BLOCK


def _register(op_type: str):  # type: ignore[no-untyped-def]
    """Register in the fused domain when the NCHWc kernels are offered; else leave the class
    unregistered (the layout pass then never produces the operator)."""

    def wrap(cls: type[Kernel]) -> type[Kernel]:
        if native.NCHWC_ENABLED:
            registry.register(op_type, since=FUSED_DOMAIN_VERSION, domain=FUSED_DOMAIN)(cls)
        return cls

    return wrap


def _blocks(channels: int) -> int:
    return -(-channels // BLOCK)


def _check_blocked(x: np.ndarray, what: str, blocks: int | None = None) -> None:
    if x.ndim != 5 or x.shape[4] != BLOCK or x.dtype != np.float32 or (blocks is not None and x.shape[1] != blocks):
        want = f"(N, {blocks}, H, W, {BLOCK})" if blocks is not None else f"(N, B, H, W, {BLOCK})"
        raise ValueError(f"{what} must be a blocked float32 tensor {want}, got {x.dtype} {x.shape}")


@_register("NchwcConv")
class NchwcConv(Kernel):
    """Conv [+ bias + residual + activation] from and into the blocked layout."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        w = info.constant(1)
        if not isinstance(w, np.ndarray) or w.ndim != 4 or w.dtype != np.float32:
            raise InvalidGraph(
                f"node {info.node_name!r} (NchwcConv): W must be a constant float32 (M, C, KH, KW) "
                "tensor; the layout pass only converts convolutions with constant weights"
            )
        self.w = w
        self.m, c_per_group = int(w.shape[0]), int(w.shape[1])
        self.group = int(info.attr("group", 1))
        self.depthwise = self.group != 1
        if self.depthwise and (c_per_group != 1 or self.group != self.m):
            raise InvalidGraph(
                f"node {info.node_name!r} (NchwcConv): group={self.group} with W {list(w.shape)}; "
                "only group=1 or one filter per channel (depthwise) is supported"
            )
        self.channels = self.group if self.depthwise else c_per_group
        self.attrs = read_spatial_attrs(info)
        b = info.constant(2) if info.has_input(2) else None
        if info.has_input(2) and not isinstance(b, np.ndarray):
            raise InvalidGraph(f"node {info.node_name!r} (NchwcConv): B must be a constant")
        self.bias = native.pad_channels(np.asarray(b, np.float32).reshape(-1)) if b is not None else None
        if self.bias is not None and b.size != self.m:
            raise InvalidGraph(
                f"node {info.node_name!r} (NchwcConv): B has {b.size} values for {self.m} output channels"
            )
        self.native_act = native_activation(
            info.attr("activation", "") or "", info.attr("activation_params", []) or []
        )
        # activations the compiled code lacks run after it, on the blocked output
        self.epilogue = None if self.native_act is not None else conv_epilogue(info)
        self.filters: dict[bool, np.ndarray] = {}  # by whether the input is blocked
        if self.depthwise:
            self.filters[True] = native.pack_nchwc_depthwise(w)
        else:
            # Packed at creation, not in the first run, for the input the layout pass gives
            # it: blocked, except a first layer of fewer than 16 channels reading NCHW (the
            # other packing is made on first use if the guess is wrong).
            blocked = self.channels >= BLOCK
            self.filters[blocked] = native.pack_nchwc_filters(w, blocked)
        self.act = self.native_act or (native.ACT_NONE, 0.0, 0.0)
        # The last input shape's output shape and compiled call, checked and built once:
        # a node sees one shape run after run, and between two of its calls the whole
        # model runs, so every Python step here runs cold (measured: ~10 µs per call).
        self._last: tuple[tuple[int, ...], tuple[int, ...], native.NchwcRunner] | None = None

    def _prepare(self, x: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...], native.NchwcRunner]:
        """Check ``x`` and build the output shape and the compiled call for its shape."""
        blocked = x.ndim == 5
        if blocked:
            _check_blocked(x, "X", _blocks(self.channels))
        elif self.depthwise or x.ndim != 4 or x.dtype != np.float32 or x.shape[1] != self.channels:
            raise ValueError(
                f"X must be a blocked float32 tensor (N, {_blocks(self.channels)}, H, W, {BLOCK})"
                + ("" if self.depthwise else f" or NCHW (N, {self.channels}, H, W)")
                + f", got {x.dtype} {x.shape}"
            )
        k, s, d, pb, pe = self.attrs.resolve(2, tuple(int(v) for v in self.w.shape[2:]))
        win = window(x.shape[2:4], k, s, d, pb, pe, self.attrs.auto_pad)
        if any(p < 0 for p in win.pads_begin):
            raise ValueError(f"negative leading pads {list(win.pads_begin)} are not supported")
        out = (x.shape[0], _blocks(self.m), *win.out_shape, BLOCK)
        filters = self.filters.get(blocked)
        if filters is None:
            filters = self.filters[blocked] = native.pack_nchwc_filters(self.w, blocked)
        runner = native.nchwc_runner(x.shape, out, filters, k, s, win.pads_begin, d, self.depthwise)
        self._last = (x.shape, out, runner)
        return self._last

    def compute(self, x, w, b=None, z=None):
        last = self._last
        if last is None or last[0] != x.shape or x.dtype != np.float32:
            last = self._prepare(x)
        if w is not self.w and not np.array_equal(w, self.w):
            raise ValueError("W differs from the constant the node was built with")
        if not x.flags.c_contiguous:
            x = np.ascontiguousarray(x)
        y = np.empty(last[1], dtype=np.float32)
        if z is not None:
            if z.shape != y.shape or z.dtype != np.float32:
                raise ValueError(f"residual Z is {z.dtype} {z.shape}, the convolution gives float32 {y.shape}")
            if not z.flags.c_contiguous:
                z = np.ascontiguousarray(z)
        last[2](x, y, self.bias, z if self.epilogue is None else None, *self.act)
        if self.epilogue is not None:
            self.epilogue(np, y, z)
        return (y,)


@_register("ReorderInput")
class ReorderInput(Kernel):
    """NCHW float32 → blocked (N, ceil(C/16), H, W, 16)."""

    def compute(self, x):
        if x.ndim != 4 or x.dtype != np.float32:
            raise ValueError(f"X must be a float32 NCHW tensor, got {x.dtype} {x.shape}")
        return (native.to_nchwc(np.ascontiguousarray(x)),)


@_register("ReorderOutput")
class ReorderOutput(Kernel):
    """Blocked → NCHW with ``channels`` channels."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.channels = int(info.attr("channels", 0))
        if self.channels < 1:
            raise InvalidGraph(
                f"node {info.node_name!r} (ReorderOutput): attribute channels={self.channels} must be >= 1"
            )

    def compute(self, x):
        _check_blocked(x, "X", _blocks(self.channels))
        return (native.from_nchwc(np.ascontiguousarray(x), self.channels),)


@_register("NchwcGlobalAveragePool")
class NchwcGlobalAveragePool(Kernel):
    """Mean over H and W of a blocked tensor, kept as size-1 dims (padding lanes stay 0)."""

    def compute(self, x):
        _check_blocked(x, "X")
        return (native.nchwc_global_average(np.ascontiguousarray(x)),)


@_register("NchwcMaxPool")
class NchwcMaxPool(library.kernel("MaxPool", 22, BACKEND)):
    """MaxPool (2-D, no Indices) on a blocked tensor; padding counts as -inf."""

    def compute(self, x):
        _check_blocked(x, "X")
        k, s, d, pb, pe = self.attrs.resolve(2)
        win = window(x.shape[2:4], k, s, d, pb, pe, self.attrs.auto_pad, self.ceil_mode)
        y = np.empty((x.shape[0], x.shape[1], *win.out_shape, BLOCK), dtype=np.float32)
        native.nchwc_maxpool(np.ascontiguousarray(x), y, k, s, win.pads_begin, d)
        return (y,)
