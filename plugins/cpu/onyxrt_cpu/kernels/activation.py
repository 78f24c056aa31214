"""CPU fast paths for activations and the softmax family; the operators themselves come
from the operator library (:mod:`onyxrt_ops.activation`), bound over numpy in
``kernels/__init__``.

Each override subclasses the library's kernel and defers to it where its fast path does
not apply:

* Gelu — float32 through the compiled one-pass kernels (``native.gelu_tanh`` and the erf
  polynomial of :func:`._special.gelu_float32_native`), else in float32 in place with
  :func:`._special.erf_float32`;
* Softmax — the compiled last-axis pass for float32, else numpy in place on one buffer;
* Sigmoid and Tanh (and Swish, built on the sigmoid) — float32 through the compiled
  kernels that compute exactly what onnxruntime's CPU provider does (MLAS's rational
  approximations, :func:`.native.logistic`): quantized models turn a last-bit difference
  into a whole quantization step, so bit-identical activations make them agree with
  onnxruntime exactly; also 1.9x numpy's sigmoid (431 against 808 us per 10^6 floats;
  tanh 281 against ``np.tanh``'s 361 us, 1.2 against 0.8 us for 1000). Otherwise
  1 / (1 + e^-x) in place on one buffer, letting e^-x overflow to inf (which gives
  exactly 0), several times faster than the library's overflow-free form;
* Relu — for a float32/float64 input (known when built) ``np.maximum`` alone (0.65 against
  1.05 us for 64 floats);
* Hardmax — a scatter of ones into zeros (``np.put_along_axis``, which the array API
  lacks) instead of comparing every position with the argmax.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from onyxrt.dtypes import np_dtype
from onyxrt.kernels import KernelInfo
from onyxrt_ops import library

from .. import native
from . import registry
from ._backend import BACKEND
from ._special import erf_float32, gelu_float32_native

__all__ = ["Gelu", "Softmax", "Sigmoid", "Tanh", "Relu", "Clip", "Swish", "Hardmax"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # exp(-x) overflowing to inf correctly gives 0.
    with np.errstate(over="ignore"):
        d = np.exp(-x)
    d += 1.0
    return np.reciprocal(d, out=d)


@registry.register("Gelu", since=20)
class Gelu(library.kernel("Gelu", 20, BACKEND)):
    """Gelu with float32 computed by the compiled kernels, or in place in float32."""

    def compute(self, x):
        if x.dtype != np.float32:
            return super().compute(x)
        if self.approximate == "tanh":
            y = native.gelu_tanh(x)
            return (y,) if y is not None else super().compute(x)
        y = gelu_float32_native(x)
        if y is not None:
            return (y,)
        # In float32, in place on one temporary: y = x * (0.5 + 0.5 erf(x / sqrt 2)).
        y = erf_float32(x * np.float32(1.0 / math.sqrt(2.0)))
        y *= np.float32(0.5)
        y += np.float32(0.5)
        y *= x
        return (y,)


def _float32_input(info: KernelInfo) -> bool:
    """Whether the node's first input is known, when built, to be float32."""
    t = info.input_types[0] if info.input_types else None
    return t is not None and bool(t.elem_type) and np_dtype(t.elem_type) == np.float32


def _compiled_call(kernel: Any, call: Callable[[np.ndarray, np.ndarray], Any]) -> None:
    """Make ``kernel.compute`` ``call(x, y)`` into a new ``y`` for a C-contiguous, non-empty
    float32 ``x`` (the node's input type, checked when built), the kernel's own compute
    otherwise: a one-row model's activation is then one compiled call (Sigmoid of 64
    floats 1.6 → ~0.6 µs), without the library's per-call dispatch and checks."""
    general = kernel.compute
    empty_like = np.empty_like

    def compute(x: Any) -> tuple[Any]:
        if type(x) is np.ndarray and x.flags.c_contiguous and x.size:
            y = empty_like(x)
            call(x, y)
            return (y,)
        return general(x)

    kernel.compute = compute


_NATIVE = native.compiled_module() if native.ENABLED else None


def _over_last_axis(kernel: Any, info: KernelInfo) -> bool:
    """Whether a softmax-like node of a float32 input works along its last axis: ``axis``
    -1 or rank - 1 (known when built), per axis (version 13) or on the input coerced to
    2-D before it, which for the last axis is the same rows."""
    t = info.input_types[0] if info.input_types else None
    rank = len(t.shape) if t is not None and t.shape is not None else None
    last = kernel.axis == -1 or (rank is not None and kernel.axis == rank - 1)
    return last and _float32_input(info)


@registry.register("Softmax", since=(1, 11, 13))
class Softmax(library.kernel("Softmax", 13, BACKEND)):
    """Softmax with the compiled last-axis pass for float32, numpy in place otherwise."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if _over_last_axis(self, info) and hasattr(_NATIVE, "softmax"):
            softmax = _NATIVE.softmax
            _compiled_call(self, lambda x, y: softmax(x, y, x.shape[-1]))

    def along(self, x, axis):
        if axis == x.ndim - 1:
            y = native.softmax_last_axis(x)
            if y is not None:
                return y
        with np.errstate(invalid="ignore", over="ignore", under="ignore"):  # inf - inf: nan
            e = x - np.max(x, axis=axis, keepdims=True)
            np.exp(e, out=e)  # in place: one buffer for the whole computation
            e /= np.sum(e, axis=axis, keepdims=True)
        return e


@registry.register("LogSoftmax", since=(1, 11, 13))
class LogSoftmax(library.kernel("LogSoftmax", 13, BACKEND)):
    """LogSoftmax with a compiled pass over each row for a float32 input along its last
    axis (a CTC head's [80, 1, 100] scores: ~5 numpy passes before), the library's
    otherwise."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if _over_last_axis(self, info) and hasattr(_NATIVE, "log_softmax"):
            log_softmax = _NATIVE.log_softmax
            _compiled_call(self, lambda x, y: log_softmax(x, y, x.shape[-1]))


def _fast_sigmoid(x: np.ndarray) -> np.ndarray:
    """onnxruntime's float32 sigmoid where compiled, else :func:`_sigmoid`."""
    y = native.logistic(x) if x.dtype == np.float32 else None
    return _sigmoid(x) if y is None else y


@registry.register("Sigmoid", since=(1, 6, 13))
class Sigmoid(library.kernel("Sigmoid", 13, BACKEND)):
    """Sigmoid: compiled (onnxruntime's numerics) for float32, else in place on one buffer."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if _float32_input(info) and hasattr(_NATIVE, "logistic_tanh"):
            logistic_tanh = _NATIVE.logistic_tanh
            _compiled_call(self, lambda x, y: logistic_tanh(x, y, False))

    def f(self, x):
        return _fast_sigmoid(x)


@registry.register("Tanh", since=(1, 6, 13))
class Tanh(library.kernel("Tanh", 13, BACKEND)):
    """Tanh: compiled (onnxruntime's numerics) for float32, else the library's."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        if _float32_input(info) and hasattr(_NATIVE, "logistic_tanh"):
            logistic_tanh = _NATIVE.logistic_tanh
            _compiled_call(self, lambda x, y: logistic_tanh(x, y, True))

    def f(self, x):
        y = native.tanh(x) if x.dtype == np.float32 else None
        return super().f(x) if y is None else y


#: Elements from which a float32 Relu or Clip runs compiled: numpy's maximum against a
#: scalar is ~3.5x slower than one compiled pass on large arrays ([1, 96, 112, 112]: 389
#: against ~110 us), and as fast on small ones, where its call costs less.
_COMPILED_CLIP_MIN = 4096


def _compiled_clip(x: Any, lo: float, hi: float) -> np.ndarray | None:
    """min(max(x, lo), hi) of a large C-contiguous float32 array, compiled; else None."""
    if type(x) is not np.ndarray or x.dtype != np.float32 or x.size < _COMPILED_CLIP_MIN:
        return None
    return native.unary_activation(x, "Clip", lo, hi)


@registry.register("Relu", since=(1, 6, 13, 14))
class Relu(library.kernel("Relu", 14, BACKEND)):
    """Relu: for a float32/float64 input (known when built) ``np.maximum`` alone, without
    the library's per-call type test (1.0 against 0.5 us for 64 floats); large float32
    arrays in one compiled pass (:func:`_compiled_clip`)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        t = info.input_types[0] if info.input_types else None
        dt = np_dtype(t.elem_type) if t is not None and t.elem_type else None
        if dt is not None and dt in (np.float32, np.float64):
            zero = dt.type(0)
            maximum, ndarray, asarray = np.maximum, np.ndarray, np.asarray
            compiled = _compiled_clip if dt == np.float32 else None
            inf = float("inf")

            def compute(x: np.ndarray) -> tuple[np.ndarray]:
                if compiled is not None:
                    y = compiled(x, 0.0, inf)
                    if y is not None:
                        return (y,)
                r = maximum(x, zero)
                return (r if type(r) is ndarray else asarray(r),)

            self.compute = compute
            if t is not None and t.shape:  # rank >= 1: the ufunc returns an array

                def single_output(x: np.ndarray) -> np.ndarray:
                    if compiled is not None:
                        y = compiled(x, 0.0, inf)
                        if y is not None:
                            return y
                    return maximum(x, zero)  # type: ignore[no-any-return]

                self.single_output = single_output


@registry.register("Clip", since=(11, 12, 13))
class Clip(library.kernel("Clip", 13, BACKEND)):
    """The library's Clip; a large float32 input with number bounds (not NaN) in one
    compiled pass (:func:`_compiled_clip`: MobileNetV2's ReLU6 on [1, 96, 112, 112]
    1249 -> ~110 us, where a quantized model keeps it apart from its convolutions)."""

    def compute(self, x, lo=None, hi=None):
        if type(x) is np.ndarray and x.dtype == np.float32 and x.size >= _COMPILED_CLIP_MIN:
            bounds = []
            for bound, none in ((lo, float("-inf")), (hi, float("inf"))):
                if bound is None:
                    bounds.append(none)
                elif isinstance(bound, np.ndarray) and bound.size == 1 and bound.dtype == np.float32:
                    bounds.append(float(bound.reshape(())))
                else:
                    bounds.append(float("nan"))  # not a float32 number: the library checks it
            if not any(b != b for b in bounds):
                y = _compiled_clip(x, bounds[0], bounds[1])
                if y is not None:
                    return (y,)
        return super().compute(x, lo, hi)


@registry.register("Swish", since=24)
class Swish(library.kernel("Swish", 24, BACKEND)):
    """Swish with the compiled (or in-place) sigmoid."""

    def f(self, x):
        y = _fast_sigmoid(x * self.alpha)
        y *= x
        return y


@registry.register("Hardmax", since=(1, 11, 13))
class Hardmax(library.kernel("Hardmax", 13, BACKEND)):
    """Hardmax by scattering ones at the argmax."""

    def along(self, x, axis):
        first = np.expand_dims(np.argmax(x, axis=axis), axis)
        y = np.zeros(x.shape, dtype=x.dtype)
        np.put_along_axis(y, first, 1, axis=axis)
        return y
