"""CPU kernels: the elementwise operators the operator library cannot express, and numpy
fast paths of the library's (:mod:`onyxrt_ops.elementwise`, bound over numpy in
``kernels/__init__``).

Overrides of library operators, each subclassing the library's kernel:

* Add, Sub, Mul — when both inputs have the same native type (known when the kernel is
  built) the compute is one ufunc call, without the library's per-call dtype checks: the
  per-node overhead of small graphs (0.40 us instead of 0.67 us for a 4-element Add);
* Div, Max, Min (two inputs), Sqrt, Exp, Log, Abs, Neg — with float32/float64 inputs of
  one type (known when built) the ufunc alone: 0.6-0.8 us instead of 1.0-1.9 us for 64
  floats (a 16-operator graph's run is mostly such calls);
* Pow — a constant exponent 1, 2, 3 or 0.5 by one ufunc call, the cube in place (16.2 us
  instead of 12.9 us for [64, 1024] float32; 1.9 us instead of 0.7 us for 4 elements);
* Erf — float32 through :func:`._special.erf_float32` (a few ulps, ~8x faster than the
  library's float64 path), float64 exactly through ``math.erf`` element by element;
* Mod — ``fmod=1`` by numpy's ``fmod`` for integers and small floats: the library's
  standard-only formula (remainder of magnitudes with the dividend's sign; a sign fix for
  integers) took 2.8 us instead of 1.9 us for 8 float32 elements, 5.7 instead of 1.8 us for
  8 int64, 654 instead of 129 us for [64, 1024] int64, but 675 instead of 1369 us for
  [64, 1024] float32, so larger floats take it (fmod=0 is the library's: 1.9 us either
  way, 624 us for [64, 1024] float32).

CPU-only operators (the array API standard cannot express them):

* Cast, CastLike — strings, the float8/4-bit/2-bit types of ``ml_dtypes``, float8
  saturation and e8m0 rounding modes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.float_errors import float_errors_ignored, quiet_float_errors
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt_ops import library

from . import registry
from ._backend import BACKEND
from ._special import erf, erf_float32

__all__ = ["cast_array", "Add", "Sub", "Mul", "Div", "Max", "Min", "Sqrt", "Exp", "Log", "Abs", "Neg", "Pow", "Erf", "Mod", "Cast", "CastLike"]

_NATIVE_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))
_OBJ = np.dtype(object)


# --------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def _as_float(x: np.ndarray) -> np.ndarray:
    """``x`` in a dtype numpy can compute with: native floats stay, others widen."""
    dt = x.dtype
    if dt in _NATIVE_FLOATS:
        return x
    if dt.kind in "biu":
        return x.astype(np.float64)
    return x.astype(np.float32)


def _out(r: Any, dtype: np.dtype[Any]) -> np.ndarray:
    """Wrap ``r`` as an ndarray of exactly ``dtype``."""
    r = np.asarray(r)
    if r.dtype != dtype:
        with quiet_float_errors():
            r = r.astype(dtype)
    return r


# --------------------------------------------------------------------------------------
# Add, Sub, Mul: one ufunc call when both operands have the same native type
# --------------------------------------------------------------------------------------


def _ufunc_compute(ufunc: Callable[..., Any], arity: int, quiet: bool) -> Callable[..., tuple[np.ndarray]]:
    """A kernel's compute that is ``ufunc`` on its ``arity`` (1 or 2) operands alone, a 0-d
    result (numpy returns a scalar) as an array, for kernels whose operand types are known
    when built (Add/Sub/Mul here, Div/Max/Min and the unary maths below). With ``quiet``
    floating-point errors are ignored (nearly free inside a run, which ignores them
    already; ~0.3 µs of a 0.8 µs call on 64 floats, so not for ufuncs that raise none)."""
    ndarray = np.ndarray
    asarray = np.asarray
    ignored = float_errors_ignored

    if arity == 1 and quiet:
        def compute(x: Any) -> tuple[np.ndarray]:
            if ignored():  # inside a run: errors ignored already
                r = ufunc(x)
            else:
                with quiet_float_errors():
                    r = ufunc(x)
            return (r if type(r) is ndarray else asarray(r),)
    elif arity == 1:
        def compute(x: Any) -> tuple[np.ndarray]:
            r = ufunc(x)
            return (r if type(r) is ndarray else asarray(r),)
    elif quiet:
        def compute(a: Any, b: Any) -> tuple[np.ndarray]:  # type: ignore[misc]
            if ignored():
                r = ufunc(a, b)
            else:
                with quiet_float_errors():
                    r = ufunc(a, b)
            return (r if type(r) is ndarray else asarray(r),)
    else:
        def compute(a: Any, b: Any) -> tuple[np.ndarray]:  # type: ignore[misc]
            r = ufunc(a, b)
            return (r if type(r) is ndarray else asarray(r),)

    return compute


def _rank_aligned(compute: Callable[..., Any], info: KernelInfo) -> Callable[..., Any]:
    """``compute`` with a constant operand of lower rank than the other (a bias (64,)
    added to (batch, 64)) handed over as a view of the other's rank, made once: numpy
    broadcasts operands of unequal rank through a slower path (Mul of (1, 64) by (64,)
    0.82 µs, by (1, 64) 0.31). Leading 1s change no result or output shape."""
    for i in (0, 1):
        src = info.constant(i)
        other = info.input_types[1 - i] if len(info.input_types) > 1 - i else None
        if (isinstance(src, np.ndarray) and src.ndim >= 1 and other is not None and other.shape is not None
                and len(other.shape) > src.ndim):
            return _with_constant(compute, i, src, src.reshape((1,) * (len(other.shape) - src.ndim) + src.shape))
    return compute


def _with_constant(inner: Callable[..., Any], i: int, src: np.ndarray, aligned: np.ndarray) -> Callable[..., Any]:
    """``inner`` given ``aligned`` for operand ``i`` whenever that operand is ``src``
    (an overridden initializer, fed at run time, is passed as it is)."""
    if i == 1:
        def compute(a: Any, b: Any) -> Any:
            return inner(a, aligned if b is src else b)
    else:
        def compute(a: Any, b: Any) -> Any:  # type: ignore[misc]
            return inner(aligned if a is src else a, b)
    return compute


def _ufunc_single_output(ufunc: Callable[..., Any], arity: int, info: KernelInfo) -> Callable[..., Any] | None:
    """``ufunc`` as the kernel's :attr:`~onyxrt.kernels.Kernel.single_output` (its constant
    operand rank-aligned as in ``compute``), where its result is always an array: some
    operand has a rank of at least 1, known when built (a ufunc of 0-d operands returns a
    numpy scalar). A run ignores floating-point errors, so no ``quiet`` is needed."""
    if not any(t is not None and t.shape for t in info.input_types[:arity]):
        return None
    return _rank_aligned(ufunc, info) if arity == 2 else ufunc


_ARITH_VERSIONS = (1, 6, 7, 13, 14)


class _SameType:
    """Mixin for a library arithmetic kernel: with both operands of the same native type
    (known when built), ``compute`` is one ufunc call; otherwise the library's."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)  # type: ignore[call-arg]
        types = [t.elem_type if t is not None else None for t in info.input_types[:2]]
        same = not self.legacy and len(types) == 2 and types[0] and types[0] == types[1]
        if same and np_dtype(types[0]).kind in "biuf":
            self.compute = _rank_aligned(_ufunc_compute(self.fn, 2, quiet=False), info)  # type: ignore[method-assign]
            self.single_output = _ufunc_single_output(self.fn, 2, info)


@registry.register("Add", since=_ARITH_VERSIONS)
class Add(_SameType, library.kernel("Add", 14, BACKEND)):
    """C = A + B (integers wrap around)."""


@registry.register("Sub", since=_ARITH_VERSIONS)
class Sub(_SameType, library.kernel("Sub", 14, BACKEND)):
    """C = A - B (integers wrap around)."""


@registry.register("Mul", since=_ARITH_VERSIONS)
class Mul(_SameType, library.kernel("Mul", 14, BACKEND)):
    """C = A * B (integers wrap around)."""


# --------------------------------------------------------------------------------------
# Div, Max, Min and float unary operators: the ufunc alone for float32/float64 operands
# --------------------------------------------------------------------------------------

_WIDE_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64))
#: ufuncs that raise no floating-point error on any float input (NaN and inf included)
_NO_FLOAT_ERRORS = frozenset((np.abs, np.negative, np.maximum, np.minimum))


def _fast_float_kernel(op: str, versions: tuple[int, ...], ufunc: Callable[..., Any], arity: int,
                       doc: str) -> type:
    """The library's ``op`` kernel, whose compute is the ufunc alone when the node's inputs
    are ``arity`` float32 or float64 tensors of one type (known when it is built): the
    library's per-call type checks and widening are most of a small tensor's time (Div of
    64 floats 1.9 us against 0.6)."""
    base = library.kernel(op, versions[-1], BACKEND)

    def __init__(self: Any, info: KernelInfo) -> None:
        base.__init__(self, info)
        types = [t.elem_type if t is not None else None for t in info.input_types]
        if (len(types) == arity and types[0] and len(set(types)) == 1 and info.since_version >= 7
                and np_dtype(types[0]) in _WIDE_FLOATS):
            compute = _ufunc_compute(ufunc, arity, quiet=ufunc not in _NO_FLOAT_ERRORS)
            self.compute = _rank_aligned(compute, info) if arity == 2 else compute
            self.single_output = _ufunc_single_output(ufunc, arity, info)

    cls = type(op, (base,), {"__init__": __init__, "__doc__": doc, "__module__": __name__})
    return registry.register(op, since=versions)(cls)


_V1_6_13 = (1, 6, 13)
Div = _fast_float_kernel("Div", _ARITH_VERSIONS, np.divide, 2, "C = A / B (the library's, one ufunc for floats).")
Max = _fast_float_kernel("Max", (1, 6, 8, 12, 13), np.maximum, 2,
                         "Elementwise maximum (the library's; two float inputs: one ufunc).")
Min = _fast_float_kernel("Min", (1, 6, 8, 12, 13), np.minimum, 2,
                         "Elementwise minimum (the library's; two float inputs: one ufunc).")
Sqrt = _fast_float_kernel("Sqrt", _V1_6_13, np.sqrt, 1, "Y = sqrt(X) (the library's, one ufunc for floats).")
Exp = _fast_float_kernel("Exp", _V1_6_13, np.exp, 1, "Y = exp(X) (the library's, one ufunc for floats).")
Log = _fast_float_kernel("Log", _V1_6_13, np.log, 1, "Y = ln(X) (the library's, one ufunc for floats).")
Abs = _fast_float_kernel("Abs", _V1_6_13, np.abs, 1, "Y = |X| (the library's, one ufunc for floats).")
Neg = _fast_float_kernel("Neg", _V1_6_13, np.negative, 1, "Y = -X (the library's, one ufunc for floats).")


# --------------------------------------------------------------------------------------
# Pow: constant exponents in place
# --------------------------------------------------------------------------------------


def _cube(x: np.ndarray) -> np.ndarray:
    y = x * x
    y *= x
    return y


_FAST_POWERS: dict[float, Callable[[np.ndarray], np.ndarray]] = {
    1.0: np.copy, 2.0: np.square, 3.0: _cube, 0.5: np.sqrt,
}


@registry.register("Pow", since=(1, 7, 12, 13, 15))
class Pow(library.kernel("Pow", 15, BACKEND)):
    """Pow with a constant exponent 1, 2, 3 or 0.5 of a float base computed by one ufunc
    call (the cube in place), without the library's per-call checks; else the library's."""

    def compute(self, x, y):
        if self.power is not None and x.dtype in _NATIVE_FLOATS and x.ndim >= self.exponent_rank:
            r = _FAST_POWERS[self.power](x)
            return (r if type(r) is np.ndarray else np.asarray(r),)
        return super().compute(x, y)


# --------------------------------------------------------------------------------------
# Erf, Mod
# --------------------------------------------------------------------------------------


@registry.register("Erf", since=(9, 13))
class Erf(library.kernel("Erf", 13, BACKEND)):
    """Y = erf(X): float32 in float32 (:func:`erf_float32`, a few ulps), narrower types in
    float64 and rounded to the input type.

    float64 inputs go through ``math.erf`` element by element: the vectorized erf is
    ~1e-14 accurate, which is well below an ulp of every narrower type but up to a few
    ulps of float64, and float64 Erf is rare enough to favour exactness over speed.
    """

    _exact = np.frompyfunc(math.erf, 1, 1)

    def compute(self, x):
        x = np.asarray(x)
        dt = x.dtype
        if dt == np.float64:
            return (np.asarray(self._exact(x), dtype=np.float64).reshape(x.shape),)
        if dt == np.float32:
            return (erf_float32(x),)
        return (_out(erf(x.astype(np.float64)), dt),)


_FMOD_FLOATS = frozenset(np.dtype(t) for t in (np.float32, np.float64))


@registry.register("Mod", since=(10, 13, 28))
class Mod(library.kernel("Mod", 28, BACKEND)):
    """The library's Mod, with ``fmod=1`` by numpy's ``fmod`` for integers and small
    float32/float64 inputs (one ufunc; the library's standard-only formula takes three or
    four, which is faster only on larger float inputs)."""

    def compute(self, a, b):
        if not self.fmod or not (a.dtype.kind in "iu" or (a.dtype in _FMOD_FLOATS and a.size < 4096)):
            return super().compute(a, b)
        with quiet_float_errors():
            return (_out(np.fmod(a, b), a.dtype),)


# --------------------------------------------------------------------------------------
# Cast, CastLike
# --------------------------------------------------------------------------------------

_FLOAT8_SATURATING = frozenset(
    np.dtype(t)
    for t in (
        ml_dtypes.float8_e4m3fn,
        ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2,
        ml_dtypes.float8_e5m2fnuz,
    )
)
_E8M0 = np.dtype(ml_dtypes.float8_e8m0fnu)
_ROUND_MODES = ("up", "down", "nearest")


def _target_dtype(code: int) -> np.dtype[Any]:
    """The numpy dtype for TensorProto element type ``code`` (strings are object)."""
    if code == TensorProto.STRING:
        return _OBJ
    try:
        return np_dtype(code)
    except TypeError:
        pass
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, TypeError, ValueError):
        raise TypeError(f"element type {code} has no numpy equivalent") from None


def _str_array(x: np.ndarray) -> np.ndarray:
    """A numpy unicode array holding the text of a string tensor (bytes are decoded)."""
    if x.dtype.kind == "U":
        return x
    if x.dtype.kind == "S":
        return np.char.decode(x, "utf-8")
    flat = x.ravel().tolist()
    if any(isinstance(v, bytes) for v in flat):
        flat = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in flat]
        return np.array(flat, dtype=str).reshape(x.shape)
    return x.astype(str)


def _parse_float(s: np.ndarray) -> np.ndarray:
    """Parse text as float64: plain, scientific, 'NaN', 'INF', '+INF', '-INF' (any case)."""
    s = np.char.strip(s)
    try:
        return s.astype(np.float64)
    except ValueError:
        pass
    out = np.empty(s.shape, dtype=np.float64)
    flat = out.reshape(-1)
    for i, v in enumerate(s.reshape(-1).tolist()):  # rare path: report the offending text
        try:
            flat[i] = float(v)
        except ValueError:
            raise ValueError(f"cannot parse {v!r} as a number") from None
    return out


def _parse_strings(x: np.ndarray, to: np.dtype[Any]) -> np.ndarray:
    """Text → numbers in a dtype from which :func:`cast_array` finishes the job."""
    s = np.char.strip(_str_array(x))
    if to.kind == "b":
        low = np.char.lower(s)
        s = np.where(low == "true", "1", np.where(low == "false", "0", s))
        return _parse_float(s) != 0
    if to.kind in "iu":
        candidates = (np.uint64, np.int64) if to == np.uint64 else (np.int64,)
        for c in candidates:
            try:
                return s.astype(c)
            except (ValueError, OverflowError):
                continue
        f = _parse_float(s)
        with quiet_float_errors():
            return np.trunc(f).astype(np.int64)
    return _parse_float(s)


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers → text the way onnxruntime writes it ('%.8g', 'NaN', 'INF', '-INF')."""
    dt = x.dtype
    if dt.kind in "OUS":
        return _str_array(x).astype(object)
    if dt.kind == "b":
        return np.where(x, "1", "0").astype(object)
    if dt.kind in "iu":
        return x.astype(str).astype(object)
    if dt.kind == "V" and dt not in _NATIVE_FLOATS:
        try:
            info = ml_dtypes.iinfo(dt)
        except ValueError:
            info = None
        if info is not None:  # int4/uint4/int2/uint2
            return x.astype(np.int64).astype(str).astype(object)
    f = x.astype(np.float64) if dt not in _NATIVE_FLOATS else x
    text = np.char.mod("%.8g", f)
    text = np.where(np.isnan(f), "NaN", text)
    text = np.where(np.isposinf(f), "INF", text)
    text = np.where(np.isneginf(f), "-INF", text)
    return np.asarray(text).astype(object)


def _to_e8m0(x: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    """Cast to float8e8m0 (powers of two 2**-127 .. 2**127, code 255 is NaN).

    The sign is ignored (negative inputs are unspecified). ``up`` rounds the magnitude up
    to a power of two, ``down`` down, ``nearest`` to the nearer one with ties up.
    Saturation clamps to the range (zero and -inf/+inf included); otherwise out-of-range
    values, zero and infinities become NaN.
    """
    f = np.abs(x.astype(np.float64))
    with quiet_float_errors():
        mant, expo = np.frexp(f)  # f = mant * 2**expo, mant in [0.5, 1)
    k = expo.astype(np.int64) - 1  # floor(log2(f)) for finite nonzero f
    if round_mode == "up":
        k += mant != 0.5
    elif round_mode == "nearest":
        k += mant >= 0.75
    code = k + 127
    nan = np.isnan(f)
    zero = f == 0
    inf = np.isinf(f)
    if saturate:
        code = np.clip(code, 0, 254)
        code = np.where(zero, 0, np.where(inf, 254, code))
    else:
        code = np.where((code < 0) | (code > 254) | zero | inf, 255, code)
    code = np.where(nan, 255, code)
    return code.astype(np.uint8).view(_E8M0)


def cast_array(
    x: Any, to: np.dtype[Any], *, saturate: bool = True, round_mode: str = "up"
) -> np.ndarray:
    """Cast ``x`` to numpy dtype ``to`` with ONNX Cast semantics (see the Cast kernel)."""
    x = np.asarray(x)
    to = np.dtype(to)
    if to.kind in "OUS":
        return _to_strings(x)
    if x.dtype.kind in "OUS":
        x = _parse_strings(x, to)
    if x.dtype == to:
        return x
    with quiet_float_errors():
        if to in _FLOAT8_SATURATING:
            xf = _as_float(x)
            if saturate:
                limit = float(ml_dtypes.finfo(to).max)
                xf = np.clip(xf, -limit, limit)  # NaN stays NaN
            return np.asarray(xf.astype(to))
        if to == _E8M0:
            return _to_e8m0(x, saturate, round_mode)
        if to.kind == "b" and x.dtype.kind == "V":
            return np.asarray(x.astype(np.float32) != 0)
        try:
            return np.asarray(x.astype(to))
        except (TypeError, ValueError):
            return np.asarray(x.astype(np.float32).astype(to))


def _cast_options(info: KernelInfo) -> tuple[bool, str]:
    saturate = bool(info.attr("saturate", 1)) if info.since_version >= 19 else True
    round_mode = info.attr("round_mode", "up") if info.since_version >= 25 else "up"
    if round_mode not in _ROUND_MODES:
        raise InvalidGraph(
            f"{_node(info)}: attribute round_mode must be one of {_ROUND_MODES}, got {round_mode!r}"
        )
    return saturate, round_mode


#: numpy's own bool, integer and IEEE float types (not ml_dtypes', some of which say
#: kind "f" too: float8_e5m2).
_NUMPY_NUMBERS = frozenset(np.dtype(t) for t in (
    np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
    np.float16, np.float32, np.float64))


@registry.register("Cast", since=(1, 6, 9, 13, 19, 21, 23, 24, 25, 28))
class Cast(Kernel):
    """Convert to the element type ``to``: numbers, strings, float8/4-bit/2-bit types.

    Floats to strings are written like onnxruntime ('%.8g', 'NaN', 'INF', '-INF'); strings
    parse plain and scientific numbers and NaN/INF/+INF/-INF in any case. ``saturate``
    clamps out-of-range values for float8 targets; ``round_mode`` applies to float8e8m0.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        to = info.attr("to")
        if to is None:
            raise InvalidGraph(f"{_node(info)}: the required attribute 'to' is missing")
        if isinstance(to, str):  # Cast-1 names the type: 'FLOAT', 'INT64', ...
            try:
                to = TensorProto.DataType.Value(to.strip().upper())
            except ValueError:
                raise InvalidGraph(f"{_node(info)}: unknown element type to={to!r}") from None
        try:
            self.to = _target_dtype(int(to))
        except TypeError:
            raise InvalidGraph(
                f"{_node(info)}: attribute to={to} is not a tensor element type this "
                "provider can hold"
            ) from None
        self.saturate, self.round_mode = _cast_options(info)
        #: A target numpy's astype reaches as Cast does (bool, integers, IEEE floats): a numeric
        #: array inside a run is cast as cast_array would, without its checks (a third of
        #: the scikit-learn conversions' many one-value Casts).
        self._plain = self.to in _NUMPY_NUMBERS

    def compute(self, x):
        if self._plain and type(x) is np.ndarray and x.dtype in _NUMPY_NUMBERS and float_errors_ignored():
            return (x if x.dtype == self.to else x.astype(self.to),)
        return (cast_array(x, self.to, saturate=self.saturate, round_mode=self.round_mode),)


@registry.register("CastLike", since=(15, 19, 21, 23, 24, 25))
class CastLike(Kernel):
    """Cast the first input to the element type of the second (see Cast)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.saturate, self.round_mode = _cast_options(info)

    def compute(self, x, like):
        to = np.asarray(like).dtype
        if to.kind in "US":
            to = _OBJ
        return (cast_array(x, to, saturate=self.saturate, round_mode=self.round_mode),)
