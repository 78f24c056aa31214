"""CPU overrides of the operator library's com.microsoft.nchwc operators
(:mod:`onyxrt_ops.contrib_nchwc`): onnxruntime's blocked layout at block size 16 is, byte
for byte, the CPU provider's own NCHWc layout (N, ceil(C/16), H, W, 16) of
:mod:`.nchwc` — a reshape apart — so with block size 16 the compiled kernels of that module
run onnxruntime's Conv (filters decoded to OIHW once, then packed for the compiled code),
MaxPool, ReorderInput and ReorderOutput. Anything else (block size 8, grouped convolution
that is not depthwise, an activation the compiled code lacks, ceil_mode, the compiled
module off) defers to the library's kernel.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from onyxrt.spatial import window
from onyxrt_ops import library
from onyxrt_ops.contrib_nchwc import NCHWC, host_block_size

from .. import native
from . import registry
from ._backend import BACKEND
from .fused import native_activation
from .nchwc import NchwcConv

__all__: list[str] = []

_F32 = {"T": (np.float32,)}
_BLOCK = native.NCHWC_BLOCK


def _blocked5(x: np.ndarray) -> np.ndarray:
    """A blocked (N, Cp, H, W) as the compiled layout (N, Cp/16, H, W, 16), contiguous."""
    n, cp, h, w = x.shape
    return np.ascontiguousarray(x).reshape(n, cp // _BLOCK, h, w, _BLOCK)


def _flat4(y: np.ndarray) -> np.ndarray:
    n, blocks, h, w, b = y.shape
    return y.reshape(n, blocks * b, h, w)


def _register(op_type: str):  # type: ignore[no-untyped-def]
    """Register the override where the compiled module is built (else the library's runs)."""

    def wrap(cls):  # type: ignore[no-untyped-def]
        if native.AVAILABLE:
            registry.register(op_type, since=1, domain=NCHWC, types=_F32)(cls)
        return cls

    return wrap


@_register("Conv")
class Conv(library.kernel("Conv", 1, BACKEND, domain=NCHWC)):
    """nchwc Conv through :class:`.nchwc.NchwcConv` at block size 16 (group 1 or
    depthwise, an activation the compiled code has)."""

    def compute(self, x, w, b=None, z=None):
        fast = self._native(x, w, b)
        if fast is None:
            return super().compute(x, w, b, z)
        plain = self.group == 1 and x.shape[1] < _BLOCK  # a first layer's NCHW input
        x5 = np.ascontiguousarray(x) if plain else _blocked5(x)
        (y,) = fast.compute(x5, fast.w, None, None if z is None else _blocked5(z))
        return (_flat4(y),)

    def _native(self, x, w, b):  # type: ignore[no-untyped-def]
        """The compiled kernel for this W, bias and input width (built once), or None
        where it does not apply."""
        key = (w, b, x.shape[1] if x.ndim == 4 else None)
        cached = getattr(self, "_fast", None)
        if cached is not None and all(a is c for a, c in zip(cached[0][:2], key[:2])) and cached[0][2] == key[2]:
            return cached[1]
        fast = None
        act = self.info.attr("activation", "") or ""
        act_ok = not act or native_activation(act, self.info.attr("activation_params", []) or []) is not None
        if native.ENABLED and act_ok and x.dtype == np.float32 and x.ndim == 4 and w.ndim == 4:
            op, ip, cx = w.shape[0], w.shape[1], x.shape[1]
            depthwise = self.group > 1 and ip == 1 and self.group == op
            fits = op % _BLOCK == 0 and (cx % _BLOCK == 0 or (self.group == 1 and cx == ip < _BLOCK))
            if fits and (self.group == 1 or depthwise) and host_block_size() == _BLOCK:
                plain = self.group == 1 and cx < _BLOCK
                wl = np.ascontiguousarray(self._logical_filters(w, _BLOCK, plain or depthwise))
                consts = {1: wl} if b is None else {1: wl, 2: np.asarray(b)}
                fast = NchwcConv(dataclasses.replace(self.info, constant_inputs=consts))
        self._fast = (key, fast)
        return fast


@_register("MaxPool")
class MaxPool(library.kernel("MaxPool", 1, BACKEND, domain=NCHWC)):
    """nchwc MaxPool (2-D, no ceil_mode) by the compiled blocked pool at block size 16."""

    def compute(self, x):
        if not native.ENABLED or self.ceil_mode or x.ndim != 4 or x.shape[1] % _BLOCK \
                or self.check_blocked(x) != _BLOCK:
            return super().compute(x)
        x5 = _blocked5(x)
        k, s, d, pb, pe = self.attrs.resolve(2)
        win = window(x.shape[2:4], k, s, d, pb, pe, self.attrs.auto_pad, self.ceil_mode)
        if any(p < 0 for p in win.pads_begin):
            return super().compute(x)
        y = np.empty((x5.shape[0], x5.shape[1], *win.out_shape, _BLOCK), dtype=np.float32)
        native.nchwc_maxpool(x5, y, k, s, win.pads_begin, d)
        return (_flat4(y),)


@_register("ReorderInput")
class ReorderInput(library.kernel("ReorderInput", 1, BACKEND, domain=NCHWC)):
    """NCHW → blocked by the compiled reorder at block size 16."""

    def compute(self, x):
        if not native.ENABLED or self.channels_last or x.ndim != 4 or host_block_size() != _BLOCK:
            return super().compute(x)
        return (_flat4(native.to_nchwc(np.ascontiguousarray(x))),)


@_register("ReorderOutput")
class ReorderOutput(library.kernel("ReorderOutput", 1, BACKEND, domain=NCHWC)):
    """Blocked → NCHW by the compiled reorder at block size 16."""

    def compute(self, x):
        if not native.ENABLED or self.channels_last or x.ndim != 4 or x.shape[1] % _BLOCK:
            return super().compute(x)
        cp, c = x.shape[1], self.channels
        if self.block_size(lambda b: cp % b == 0 and 0 <= cp - c < b, "X") != _BLOCK:
            return super().compute(x)
        return (native.from_nchwc(_blocked5(x), c),)
