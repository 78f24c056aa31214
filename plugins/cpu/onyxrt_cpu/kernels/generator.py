"""CPU kernels: generators, ops whose output is built rather than computed from data.

Constant, ConstantOfShape, Range, EyeLike and the random ops (RandomNormal, RandomUniform,
their ``*Like`` forms, Bernoulli, Multinomial). Random ops draw from a numpy ``Generator``
created once per node: seeded from the ``seed`` attribute when the node has one (so a
session's sequence of runs is reproducible), else from ``onyxrt.set_seed``'s seed when a
program set one, otherwise from fresh OS entropy.
"""

from __future__ import annotations

import math
import struct
import threading
from typing import Any

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES, np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.limits import check_allocation, output_of
from onyxrt.seeding import default_seed

from . import registry


def _invalid(info: KernelInfo, message: str) -> InvalidGraph:
    """An InvalidGraph error naming the node."""
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {message}")


def _readonly(arr: np.ndarray) -> np.ndarray:
    """``arr`` marked read-only, so a value handed out on every run cannot be changed."""
    arr.setflags(write=False)
    return arr


def _dtype_attr(info: KernelInfo, allowed: frozenset[np.dtype[Any]] | None) -> np.dtype[Any] | None:
    """The numpy dtype named by the node's ``dtype`` attribute (None when absent)."""
    code = info.attr("dtype")
    if code is None:
        return None
    try:
        dt = np_dtype(int(code))
    except TypeError:
        raise _invalid(info, f"dtype {code} is not a supported ONNX element type") from None
    if allowed is not None and dt not in allowed:
        raise _invalid(info, f"dtype {code} ({dt}) is not allowed for this operator")
    return dt


# ----------------------------------------------------------------------------- Constant

_CONSTANT_ATTRS = (
    "value",
    "sparse_value",
    "value_float",
    "value_floats",
    "value_int",
    "value_ints",
    "value_string",
    "value_strings",
)


@registry.register("Constant", since=(1, 9, 11, 12, 13, 19, 21, 23, 24, 25))
class Constant(Kernel):
    """Output the tensor given by exactly one of the ``value*`` attributes."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        present = [a for a in _CONSTANT_ATTRS if a in info.attributes]
        if len(present) != 1:
            raise _invalid(
                info, f"exactly one of {', '.join(_CONSTANT_ATTRS)} must be set, got {present}"
            )
        name = present[0]
        v = info.attributes[name]
        if name == "sparse_value":
            # Densified as onnxruntime does, with the core's index checks (InvalidGraph
            # naming this node and the index for one outside the dense shape).
            from onyxrt.sparse import dense_from_proto

            arr = dense_from_proto(v, f"node {info.node_name!r} (Constant): sparse_value")
        elif name == "value":
            arr = np.array(v, copy=True)
        elif name == "value_float":
            arr = np.array(v, dtype=np.float32)
        elif name == "value_floats":
            arr = np.array(list(v), dtype=np.float32).reshape(-1)
        elif name == "value_int":
            arr = np.array(v, dtype=np.int64)
        elif name == "value_ints":
            arr = np.array(list(v), dtype=np.int64).reshape(-1)
        elif name == "value_string":
            arr = np.empty((), dtype=object)
            arr[()] = v
        else:  # value_strings
            arr = np.empty(len(v), dtype=object)
            arr[:] = list(v)
        self.value = _readonly(arr)

    def compute(self):
        return (self.value,)


# ----------------------------------------------------------------------------- ConstantOfShape


@registry.register("ConstantOfShape", since=(9, 20, 21, 23, 24, 25))
class ConstantOfShape(Kernel):
    """A tensor of the given shape filled with ``value`` (a 1-element tensor, default 0.0f)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        value = info.attr("value")
        if value is None:
            value = np.zeros(1, dtype=np.float32)
        value = np.asarray(value)
        if value.size != 1:
            raise _invalid(info, f"value must hold exactly one element, got shape {value.shape}")
        self.dtype = value.dtype
        self.fill = value.reshape(-1)[0]

    def compute(self, shape):
        dims = [int(d) for d in np.asarray(shape).reshape(-1)]
        if any(d < 0 for d in dims):
            raise ValueError(f"ConstantOfShape: shape {dims} has a negative dimension")
        check_allocation(dims, self.dtype, output_of(self.info))
        if self.dtype.kind != "O" and not self.fill:
            return (np.zeros(dims, dtype=self.dtype),)
        return (np.full(dims, self.fill, dtype=self.dtype),)


# ----------------------------------------------------------------------------- Range


def _range_count(start: Any, limit: Any, delta: Any) -> int:
    """max(ceil((limit - start) / delta), 0), exact for integers."""
    if isinstance(start, int):
        if delta == 0:
            raise ValueError("Range: delta must not be 0")
        return max(-((start - limit) // delta), 0)
    if delta == 0 or not math.isfinite(delta):
        raise ValueError(f"Range: delta must be finite and non-zero, got {delta}")
    n = math.ceil((limit - start) / delta)
    return max(int(n), 0)


@registry.register("Range", since=(11, 27))
class Range(Kernel):
    """Range: ``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``.

    The result has the inputs' dtype. For float16/bfloat16, v27's ``stash_type`` = 1 (the
    default) computes in float32; ``stash_type`` = 0 accumulates in the input type.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.stash = int(info.attr("stash_type", 1)) if info.since_version >= 27 else 1
        if self.stash not in (0, 1):
            raise _invalid(info, f"stash_type must be 0 or 1, got {self.stash}")

    def compute(self, start, limit, delta):
        dt = np.asarray(start).dtype
        s, lim, d = (np.asarray(v).reshape(-1) for v in (start, limit, delta))
        if s.size != 1 or lim.size != 1 or d.size != 1:
            raise ValueError("Range: start, limit and delta must be scalars")
        if dt.kind in "iu":
            si, li, di = int(s[0]), int(lim[0]), int(d[0])
            n = _range_count(si, li, di)
            check_allocation((n,), np.int64, output_of(self.info))
            out = si + np.arange(n, dtype=np.int64) * di
            return (out.astype(dt),)
        # float32/float64 compute in their own type; float16 and bfloat16 in float32
        # (stash_type=1), or by successive additions in their own type (stash_type=0).
        work = dt if dt in (np.dtype(np.float32), np.dtype(np.float64)) else np.dtype(np.float32)
        sw, lw, dw = s.astype(work)[0], lim.astype(work)[0], d.astype(work)[0]
        n = _range_count(float(sw), float(lw), float(dw))
        check_allocation((n,), np.float64, output_of(self.info))
        if self.stash == 0 and work != dt:
            steps = np.full(n, d[0], dtype=dt)
            if n:
                steps[0] = s[0]
            return (np.cumsum(steps, dtype=dt),)
        out = sw + np.arange(n, dtype=work) * dw
        return (out.astype(dt, copy=False),)


# ----------------------------------------------------------------------------- EyeLike


@registry.register("EyeLike", since=(9, 22))
class EyeLike(Kernel):
    """A 2-D tensor like the input with ones on diagonal ``k`` and zeros elsewhere."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.dtype = _dtype_attr(info, None)
        self.k = int(info.attr("k", 0))

    def compute(self, x):
        if np.ndim(x) != 2:
            raise ValueError(f"EyeLike: input must be 2-D, got shape {np.shape(x)}")
        dt = self.dtype if self.dtype is not None else np.asarray(x).dtype
        n, m = np.shape(x)
        check_allocation((n, m), dt, output_of(self.info))
        out = np.zeros((n, m), dtype=dt)
        k = self.k
        length = max(0, min(n, m - k) if k >= 0 else min(n + k, m))
        if length:
            rows = np.arange(length) + max(-k, 0)
            out[rows, rows + k] = np.ones((), dtype=dt)
        return (out,)


# ----------------------------------------------------------------------------- random ops


def _seed_to_int(seed: float) -> int:
    """A non-negative integer seed for numpy from ONNX's float ``seed`` attribute."""
    f = float(seed)
    if f.is_integer() and 0 <= f < 2**63:
        return int(f)
    return struct.unpack("<Q", struct.pack("<d", f))[0]


class _RandomKernel(Kernel):
    """Base of the random ops: a per-node numpy Generator guarded by a lock."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        seed = info.attr("seed")
        self.seed = default_seed() if seed is None else _seed_to_int(seed)
        self._rng = np.random.default_rng(self.seed)
        self._lock = threading.Lock()

    def _float_dtype(self, dt: np.dtype[Any]) -> np.dtype[Any]:
        if dt not in FLOAT_TYPES:
            raise ValueError(f"{self.info.op_type}: output dtype {dt} is not a float type")
        return dt


class _NormalMixin:
    info: KernelInfo

    def _params(self) -> None:
        self.mean = float(self.info.attr("mean", 0.0))
        self.scale = float(self.info.attr("scale", 1.0))

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.normal(self.mean, self.scale, shape)


class _UniformMixin:
    info: KernelInfo

    def _params(self) -> None:
        self.low = float(self.info.attr("low", 0.0))
        self.high = float(self.info.attr("high", 1.0))

    def _draw(self, rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        return rng.uniform(self.low, self.high, shape)


class _RandomShaped(_RandomKernel):
    """RandomNormal / RandomUniform: the ``shape`` attribute gives the output shape."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        shape = info.attr("shape")
        if shape is None:
            raise _invalid(info, "attribute 'shape' is required")
        self.shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self.shape):
            raise _invalid(info, f"shape {list(self.shape)} has a negative dimension")
        self.dtype = _dtype_attr(info, FLOAT_TYPES) or np.dtype(np.float32)
        self._params()  # type: ignore[attr-defined]

    def compute(self):
        # Drawn in float64 first, then cast: the float64 draw is the larger of the two.
        check_allocation(self.shape, np.float64, output_of(self.info))
        with self._lock:
            values = self._draw(self._rng, self.shape)  # type: ignore[attr-defined]
        return (values.astype(self.dtype),)


class _RandomLike(_RandomKernel):
    """RandomNormalLike / RandomUniformLike: the input gives the shape (and default dtype)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.dtype = _dtype_attr(info, FLOAT_TYPES)
        self._params()  # type: ignore[attr-defined]

    def compute(self, x):
        dt = self._float_dtype(self.dtype if self.dtype is not None else np.asarray(x).dtype)
        check_allocation(np.shape(x), np.float64, output_of(self.info))
        with self._lock:
            values = self._draw(self._rng, tuple(np.shape(x)))  # type: ignore[attr-defined]
        return (values.astype(dt),)


@registry.register("RandomNormal", since=(1, 22))
class RandomNormal(_NormalMixin, _RandomShaped):
    """Samples from N(mean, scale^2) with the shape and dtype given by attributes."""


@registry.register("RandomUniform", since=(1, 22))
class RandomUniform(_UniformMixin, _RandomShaped):
    """Samples from U[low, high) with the shape and dtype given by attributes."""


@registry.register("RandomNormalLike", since=(1, 22))
class RandomNormalLike(_NormalMixin, _RandomLike):
    """Samples from N(mean, scale^2) shaped like the input."""


@registry.register("RandomUniformLike", since=(1, 22))
class RandomUniformLike(_UniformMixin, _RandomLike):
    """Samples from U[low, high) shaped like the input."""


_BERNOULLI_OUT = FLOAT_TYPES | frozenset(
    np.dtype(t)
    for t in (
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.bool_,
    )
)


@registry.register("Bernoulli", since=(15, 22))
class Bernoulli(_RandomKernel):
    """1 with probability ``p`` (the input element), else 0; dtype defaults to the input's."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.dtype = _dtype_attr(info, _BERNOULLI_OUT)

    def compute(self, p):
        p = np.asarray(p)
        dt = self.dtype if self.dtype is not None else p.dtype
        with self._lock:
            u = self._rng.random(p.shape)
        return ((u < p.astype(np.float64)).astype(dt),)


@registry.register("Multinomial", since=(7, 22))
class Multinomial(_RandomKernel):
    """Draw ``sample_size`` class indices per batch row from unnormalized log-probabilities."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.dtype = _dtype_attr(
            info, frozenset((np.dtype(np.int32), np.dtype(np.int64)))
        ) or np.dtype(np.int32)
        self.sample_size = int(info.attr("sample_size", 1))
        if self.sample_size < 1:
            raise _invalid(info, f"sample_size must be >= 1, got {self.sample_size}")

    def compute(self, x):
        logits = np.asarray(x).astype(np.float64)
        if logits.ndim != 2:
            raise ValueError(f"Multinomial: input must be [batch, classes], got {logits.shape}")
        batch, classes = logits.shape
        if classes == 0:
            raise ValueError("Multinomial: input has no classes")
        check_allocation((batch, self.sample_size), np.float64, output_of(self.info))
        probs = np.exp(logits - logits.max(axis=1, keepdims=True))
        cdf = np.cumsum(probs, axis=1)
        cdf /= cdf[:, -1:]
        with self._lock:
            u = self._rng.random((batch, self.sample_size))
        # Offset each row by its index so one searchsorted over the flattened CDFs works.
        offsets = np.arange(batch, dtype=np.float64)[:, None]
        flat = (cdf + offsets).reshape(-1)
        pos = np.searchsorted(flat, (u + offsets).reshape(-1), side="right")
        idx = pos.reshape(batch, self.sample_size) - offsets.astype(np.int64) * classes
        return (np.clip(idx, 0, classes - 1).astype(self.dtype),)
