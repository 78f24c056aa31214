"""The generator operators, written once over an array namespace: outputs built rather than
computed from data.

Constant, ConstantOfShape, EyeLike and Range, and the random operators RandomNormal,
RandomUniform, their ``*Like`` forms and Multinomial. Attributes and steering inputs (a
shape, Range's scalars) are read on the host; the output is made in the backend's arrays.

The array API standard has no random numbers. Each random node gets one generator, created
when its kernel is built and seeded from the node's ``seed`` attribute when it has one (so
a session's sequence of runs is reproducible), else from ``onyxrt.set_seed``'s seed when a
program set one, otherwise from fresh entropy. It is the backend's optional ``random``
extra when it has one — a function of the seed returning a generator with numpy
``Generator``'s ``normal(mean, scale, shape)``, ``uniform(low, high, shape)`` and
``random(shape)``, giving float64 arrays — else ``numpy.random.default_rng`` on the host,
whose draws are handed to the backend: the same numbers for the same seed on every backend
without the extra (the CPU provider's numbers, as they always were). Multinomial samples on
the host (a searchsorted over the rows' cumulative probabilities, which CuPy's namespace
need not have) and hands the indices to the backend.

Bernoulli compares the input probabilities with uniform draws from the node's generator.
Its ONNX node cases expect numpy's legacy global stream, which no seeded generator
reproduces; the library's conformance run reports them as not comparable (as onnxruntime's
own backend tests exclude them), and the operator's tests check the distribution instead.

Known gap: string constants exist only where the backend holds strings (numpy).
"""

from __future__ import annotations

import math
import struct
import threading
from typing import Any

import numpy as np

from onyxrt.dtypes import FLOAT_TYPES, INT_TYPES, np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.limits import check_allocation, output_of
from onyxrt.seeding import default_seed

from .library import OpKernel, library

# The operators are reached through ``library`` (this module registers them on import).
__all__: list[str] = []


def _invalid(kernel: Kernel, message: str) -> InvalidGraph:
    """An InvalidGraph error naming the node."""
    return InvalidGraph(f"node {kernel.info.node_name!r} ({kernel.info.op_type}): {message}")


def dtype_attr(kernel: Kernel, allowed: frozenset[np.dtype[Any]] | None) -> np.dtype[Any] | None:
    """The numpy dtype named by the node's ``dtype`` attribute (None when absent)."""
    code = kernel.info.attr("dtype")
    if code is None:
        return None
    try:
        dt = np_dtype(int(code))
    except TypeError:
        raise _invalid(kernel, f"dtype {code} is not a supported ONNX element type") from None
    if allowed is not None and dt not in allowed:
        raise _invalid(kernel, f"dtype {code} ({dt}) is not allowed for this operator")
    return dt


# ----------------------------------------------------------------------------- Constant

_CONSTANT_ATTRS = ("value", "sparse_value", "value_float", "value_floats", "value_int",
                   "value_ints", "value_string", "value_strings")


def _constant_value(kernel: OpKernel, name: str, v: Any) -> np.ndarray:
    """The host array of Constant attribute ``name`` = ``v``."""
    if name == "sparse_value":
        # Densified as onnxruntime does, with the core's index checks (InvalidGraph
        # naming this node and the index for one outside the dense shape).
        from onyxrt.sparse import dense_from_proto

        return dense_from_proto(v, f"node {kernel.info.node_name!r} (Constant): sparse_value")
    if name == "value":
        return np.array(v, copy=True)
    if name in ("value_float", "value_floats"):
        return np.array(v if name == "value_float" else list(v), dtype=np.float32)
    if name in ("value_int", "value_ints"):
        return np.array(v if name == "value_int" else list(v), dtype=np.int64)
    arr = np.empty(() if name == "value_string" else len(v), dtype=object)
    arr[...] = v if name == "value_string" else list(v)
    return arr


@library.define("Constant", (1, 9, 11, 12, 13, 19, 21, 23, 24, 25))
class Constant(OpKernel):
    """Output the tensor given by exactly one of the ``value*`` attributes (made once, when
    the kernel is built, and handed out read-only on every run)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        present = [a for a in _CONSTANT_ATTRS if a in info.attributes]
        if len(present) != 1:
            raise _invalid(self, f"exactly one of {', '.join(_CONSTANT_ATTRS)} must be set, got {present}")
        arr = _constant_value(self, present[0], info.attributes[present[0]])
        arr.setflags(write=False)  # a value handed out on every run cannot be changed
        self.value = self.xp.asarray(arr)

    def compute(self):
        return (self.value,)


# ----------------------------------------------------------------------------- ConstantOfShape


@library.define("ConstantOfShape", (9, 20, 21, 23, 24, 25), host_inputs=(0,))
class ConstantOfShape(OpKernel):
    """A tensor of the given shape filled with ``value`` (a 1-element tensor, default 0.0f)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        value = info.attr("value")
        value = np.zeros(1, dtype=np.float32) if value is None else np.asarray(value)
        if value.size != 1:
            raise _invalid(self, f"value must hold exactly one element, got shape {value.shape}")
        self.np_dtype = value.dtype
        self.dtype = self.backend.dtype(value.dtype)
        self.fill = value.reshape(-1)[0].item()

    def compute(self, shape):
        dims = self.host_ints(shape)
        if any(d < 0 for d in dims):
            raise ValueError(f"ConstantOfShape: shape {dims} has a negative dimension")
        check_allocation(dims, self.np_dtype, output_of(self.info))
        if not self.fill:
            return (self.xp.zeros(dims, dtype=self.dtype),)
        return (self.xp.full(dims, self.fill, dtype=self.dtype),)


# ----------------------------------------------------------------------------- Range


def _range_count(start: Any, limit: Any, delta: Any) -> int:
    """max(ceil((limit - start) / delta), 0), exact for integers."""
    if isinstance(start, int):
        if delta == 0:
            raise ValueError("Range: delta must not be 0")
        return max(-((start - limit) // delta), 0)
    if delta == 0 or not math.isfinite(delta):
        raise ValueError(f"Range: delta must be finite and non-zero, got {delta}")
    return max(int(math.ceil((limit - start) / delta)), 0)


@library.define("Range", (11, 27), host_inputs=(0, 1, 2))
class Range(OpKernel):
    """Range: ``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``.

    The result has the inputs' dtype. For float16/bfloat16, v27's ``stash_type`` = 1 (the
    default) computes in float32; ``stash_type`` = 0 accumulates in the input type.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.stash = int(info.attr("stash_type", 1)) if info.since_version >= 27 else 1
        if self.stash not in (0, 1):
            raise _invalid(self, f"stash_type must be 0 or 1, got {self.stash}")
        self.int64 = self.backend.dtype(np.int64)
        #: numpy dtype -> the namespace's, of the types computed in their own precision.
        self.work = {np.dtype(t): self.backend.dtype(t) for t in (np.float32, np.float64)}

    def compute(self, start, limit, delta):
        xp = self.xp
        s, lim, d = (self.host(v).reshape(-1) for v in (start, limit, delta))
        if s.size != 1 or lim.size != 1 or d.size != 1:
            raise ValueError("Range: start, limit and delta must be scalars")
        dt = s.dtype
        if dt.kind in "iu":
            si, di = int(s[0]), int(d[0])
            n = _range_count(si, int(lim[0]), di)
            check_allocation((n,), np.int64, output_of(self.info))
            out = si + xp.arange(n, dtype=self.int64) * di
            return (out if dt == np.int64 else xp.asarray(out, dtype=self.backend.dtype(dt)),)
        # float32/float64 compute in their own type; float16 and bfloat16 in float32
        # (stash_type=1), or by successive additions in their own type (stash_type=0).
        work = self.work.get(dt, self.work[np.dtype(np.float32)])
        # Python floats hold each value exactly (halves widen exactly to float32) and do
        # not widen the work dtype's arrays they meet.
        sw, dw = float(s[0]), float(d[0])
        n = _range_count(sw, float(lim[0]), dw)
        check_allocation((n,), np.float64, output_of(self.info))
        if self.stash == 0 and dt not in self.work:
            # Rare (half types, opset 27): the running sum is made on the host.
            steps = np.full(n, d[0], dtype=dt)
            if n:
                steps[0] = s[0]
            return (xp.asarray(np.cumsum(steps, dtype=dt)),)
        out = sw + xp.arange(n, dtype=work) * dw
        return (out if dt in self.work else xp.asarray(out, dtype=self.backend.dtype(dt)),)


# ----------------------------------------------------------------------------- EyeLike


@library.define("EyeLike", (9, 22))
class EyeLike(OpKernel):
    """A 2-D tensor like the input with ones on diagonal ``k`` and zeros elsewhere."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        dt = dtype_attr(self, None)
        self.dtype = None if dt is None else self.backend.dtype(dt)
        self.k = int(info.attr("k", 0))
        self.bool = self.backend.dtype(np.bool_)

    def compute(self, x):
        xp = self.xp
        if x.ndim != 2:
            raise ValueError(f"EyeLike: input must be 2-D, got shape {tuple(x.shape)}")
        dt = self.dtype if self.dtype is not None else x.dtype
        n, m = x.shape
        check_allocation((n, m), self.backend.numpy_dtype(dt), output_of(self.info))
        # Not xp.eye (CuPy's namespace need not have it): the diagonal is every (m + 1)-th
        # element of the flattened matrix, from row max(-k, 0), column max(k, 0).
        k = self.k
        length = max(0, min(n, m - k) if k >= 0 else min(n + k, m))
        if not length:
            return (xp.zeros((n, m), dtype=dt),)
        out = xp.zeros((n * m,), dtype=dt)
        first = max(-k, 0) * m + max(k, 0)
        out[first : first + (length - 1) * (m + 1) + 1 : m + 1] = True if dt == self.bool else 1
        return (xp.reshape(out, (n, m)),)


# ----------------------------------------------------------------------------- random ops


def seed_to_int(seed: float) -> int:
    """A non-negative integer seed from ONNX's float ``seed`` attribute."""
    f = float(seed)
    if f.is_integer() and 0 <= f < 2**63:
        return int(f)
    return struct.unpack("<Q", struct.pack("<d", f))[0]


class _RandomKernel(OpKernel):
    """Base of the random ops: the node's generator (see the module docstring), guarded by
    a lock."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        seed = info.attr("seed")
        self.seed = default_seed() if seed is None else seed_to_int(seed)
        self._rng = self.backend.extras.get("random", np.random.default_rng)(self.seed)
        self._lock = threading.Lock()


class _Distribution(_RandomKernel):
    """Base of RandomNormal, RandomUniform and their ``*Like`` forms: draws from the
    distribution the node's attributes name."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        normal = "Normal" in info.op_type
        self._method = self._rng.normal if normal else self._rng.uniform
        self._a = float(info.attr("mean", 0.0) if normal else info.attr("low", 0.0))
        self._b = float(info.attr("scale", 1.0) if normal else info.attr("high", 1.0))

    def draw(self, shape: tuple[int, ...], dtype: Any) -> Any:
        """Samples of ``shape`` in ``dtype``, the namespace's (drawn in float64 first, then
        cast: the float64 draw is the larger of the two, so it is the one checked against
        the limit)."""
        check_allocation(shape, np.float64, output_of(self.info))
        with self._lock:
            values = self._method(self._a, self._b, shape)
        # asarray casts as astype does (at a fraction of numpy's astype's call overhead),
        # and hands host draws to the backend.
        return self.xp.asarray(values, dtype=dtype)


class _RandomShaped(_Distribution):
    """RandomNormal / RandomUniform: the ``shape`` attribute gives the output shape."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        shape = info.attr("shape")
        if shape is None:
            raise _invalid(self, "attribute 'shape' is required")
        self.shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in self.shape):
            raise _invalid(self, f"shape {list(self.shape)} has a negative dimension")
        self.dtype = self.backend.dtype(dtype_attr(self, FLOAT_TYPES) or np.float32)

    def compute(self):
        return (self.draw(self.shape, self.dtype),)


class _RandomLike(_Distribution):
    """RandomNormalLike / RandomUniformLike: the input gives the shape (and default dtype)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        dt = dtype_attr(self, FLOAT_TYPES)
        self.dtype = None if dt is None else self.backend.dtype(dt)

    def compute(self, x):
        dt = self.dtype
        if dt is None:
            dt = x.dtype
            if self.backend.numpy_dtype(dt) not in FLOAT_TYPES:
                raise ValueError(f"{self.info.op_type}: output dtype {dt} is not a float type")
        return (self.draw(tuple(x.shape), dt),)


@library.define("RandomNormal", (1, 22))
class RandomNormal(_RandomShaped):
    """Samples from N(mean, scale^2) with the shape and dtype given by attributes."""


@library.define("RandomUniform", (1, 22))
class RandomUniform(_RandomShaped):
    """Samples from U[low, high) with the shape and dtype given by attributes."""


@library.define("RandomNormalLike", (1, 22))
class RandomNormalLike(_RandomLike):
    """Samples from N(mean, scale^2) shaped like the input."""


@library.define("RandomUniformLike", (1, 22))
class RandomUniformLike(_RandomLike):
    """Samples from U[low, high) shaped like the input."""


@library.define("Multinomial", (7, 22))
class Multinomial(_RandomKernel):
    """Draw ``sample_size`` class indices per batch row from unnormalized log-probabilities
    (sampled on the host, see the module docstring)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        dt = dtype_attr(self, frozenset((np.dtype(np.int32), np.dtype(np.int64))))
        self.dtype = dt or np.dtype(np.int32)
        self.sample_size = int(info.attr("sample_size", 1))
        if self.sample_size < 1:
            raise _invalid(self, f"sample_size must be >= 1, got {self.sample_size}")

    def compute(self, x):
        logits = self.host(x).astype(np.float64)
        if logits.ndim != 2:
            raise ValueError(f"Multinomial: input must be [batch, classes], got {logits.shape}")
        batch, classes = logits.shape
        if classes == 0:
            raise ValueError("Multinomial: input has no classes")
        check_allocation((batch, self.sample_size), np.float64, output_of(self.info))
        cdf = np.cumsum(np.exp(logits - logits.max(axis=1, keepdims=True)), axis=1)
        cdf /= cdf[:, -1:]
        with self._lock:
            u = self.host(self._rng.random((batch, self.sample_size)))
        # Offset each row by its index so one searchsorted over the flattened CDFs works.
        offsets = np.arange(batch, dtype=np.float64)[:, None]
        pos = np.searchsorted((cdf + offsets).reshape(-1), (u + offsets).reshape(-1), side="right")
        idx = pos.reshape(batch, self.sample_size) - offsets.astype(np.int64) * classes
        return (self.xp.asarray(np.clip(idx, 0, classes - 1).astype(self.dtype)),)


@library.define("Bernoulli", (15, 22))
class Bernoulli(_RandomKernel):
    """1 with probability ``p`` (the input element), else 0; the output dtype is the
    ``dtype`` attribute's, else the input's."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        dt = dtype_attr(self, FLOAT_TYPES | INT_TYPES | {np.dtype(np.bool_)})
        self.dtype = None if dt is None else self.backend.dtype(dt)

    def compute(self, p):
        xp = self.xp
        check_allocation(tuple(p.shape), np.float64, output_of(self.info))
        with self._lock:
            u = xp.asarray(self._rng.random(tuple(p.shape)))
        hit = u < xp.astype(p, u.dtype)
        return (xp.astype(hit, p.dtype if self.dtype is None else self.dtype),)
