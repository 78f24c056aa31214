"""CPU kernels: elementwise arithmetic, math functions, bitwise operators and Cast.

Binary operators follow numpy (multidirectional) broadcasting from opset 7 on; the older
versions (Add-1/6, Pow-1, ...) use ONNX's legacy ``broadcast``/``axis`` attributes, which
:func:`legacy_align` implements (the logical module reuses it).

Types numpy cannot compute in directly (bfloat16 and the float8 family from ``ml_dtypes``)
are computed in float32 and rounded back once, which is what a correctly rounded native
kernel would give for a single operation.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import ml_dtypes
import numpy as np
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo

from . import registry
from ._special import erf, erf_float32

__all__ = ["legacy_align", "cast_array"]

_NATIVE_FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))
_OBJ = np.dtype(object)


# --------------------------------------------------------------------------------------
# shared helpers
# --------------------------------------------------------------------------------------


def _node(info: KernelInfo) -> str:
    return f"{info.op_type} node {info.node_name!r}"


def legacy_align(a: np.ndarray, b: np.ndarray, broadcast: int, axis: int | None) -> np.ndarray:
    """Reshape ``b`` for the pre-opset-7 broadcasting rule (``broadcast``/``axis`` attributes).

    Without ``broadcast`` both shapes must be equal. With it, ``b`` is a scalar, a one-element
    tensor, or a contiguous run of ``a``'s dims starting at ``axis`` (suffix when unset); a
    size-1 dim of ``b`` stretches, as exporters of the time (PyTorch) relied on.
    """
    if not broadcast:
        if a.shape != b.shape:
            raise ValueError(
                f"shapes {a.shape} and {b.shape} differ and the 'broadcast' attribute is not "
                "set (this opset version only broadcasts with broadcast=1)"
            )
        return b
    if b.size == 1:
        return b.reshape(())
    if b.ndim > a.ndim:
        raise ValueError(f"cannot broadcast shape {b.shape} onto {a.shape}: rank is larger")
    if axis is None:
        start = a.ndim - b.ndim
    else:
        start = axis + a.ndim if axis < 0 else axis
    window = a.shape[start : start + b.ndim] if start >= 0 else ()
    if (
        start < 0
        or start + b.ndim > a.ndim
        or any(db not in (1, da) for da, db in zip(window, b.shape))
    ):
        raise ValueError(
            f"cannot broadcast shape {b.shape} onto {a.shape} at axis {start} "
            "(legacy broadcasting needs a contiguous match)"
        )
    return b.reshape(b.shape + (1,) * (a.ndim - start - b.ndim))


def _is_native_float(dt: np.dtype[Any]) -> bool:
    return dt in _NATIVE_FLOATS


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
        with np.errstate(all="ignore"):
            r = r.astype(dtype)
    return r


def _float_unary(fn: Callable[[np.ndarray], Any], x: np.ndarray) -> np.ndarray:
    """Apply a float ufunc; bfloat16/float8 go through float32 and back."""
    with np.errstate(all="ignore"):
        if x.dtype in _NATIVE_FLOATS:
            return np.asarray(fn(x))
        return _out(fn(x.astype(np.float32)), x.dtype)


class _LegacyBinary(Kernel):
    """Base of two-input ops: parses the legacy broadcast attributes of old versions."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.legacy = info.since_version < 7
        self.broadcast = int(info.attr("broadcast", 0))
        axis = info.attr("axis")
        self.axis = None if axis is None else int(axis)

    def _align(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if self.legacy:
            return legacy_align(a, b, self.broadcast, self.axis)
        return b


# --------------------------------------------------------------------------------------
# Add, Sub, Mul, Div
# --------------------------------------------------------------------------------------


class _Arith(_LegacyBinary):
    ufunc: Callable[..., Any] = np.add

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        types = [t.elem_type if t is not None else None for t in info.input_types[:2]]
        same = not self.legacy and len(types) == 2 and types[0] and types[0] == types[1]
        if same and np_dtype(types[0]).kind in "biuf":
            # Both operands have the same native type: the result has it too, so the
            # per-call dtype checks go (this is the per-node overhead of small graphs).
            self.compute = _same_type_ufunc(self.ufunc)  # type: ignore[method-assign]

    def compute(self, a, b):
        if self.legacy:
            b = self._align(np.asarray(a), np.asarray(b))
        dt = a.dtype
        if dt.kind == "V":  # bfloat16 and friends
            with np.errstate(all="ignore"):
                return (_out(self.ufunc(a.astype(np.float32), b.astype(np.float32)), dt),)
        # The hot path: one ufunc call. 0-d inputs make numpy return a scalar.
        r = self.ufunc(a, b)
        if type(r) is not np.ndarray or r.dtype != dt:
            r = _out(r, dt)
        return (r,)


def _same_type_ufunc(ufunc: Callable[..., Any]) -> Callable[[Any, Any], tuple[np.ndarray]]:
    ndarray = np.ndarray
    asarray = np.asarray

    def compute(a: Any, b: Any) -> tuple[np.ndarray]:
        r = ufunc(a, b)
        if type(r) is not ndarray:  # 0-d operands make numpy return a scalar
            r = asarray(r)
        return (r,)

    return compute


_ARITH_VERSIONS = (1, 6, 7, 13, 14)


@registry.register("Add", since=_ARITH_VERSIONS)
class Add(_Arith):
    """C = A + B (integers wrap around)."""

    ufunc = np.add


@registry.register("Sub", since=_ARITH_VERSIONS)
class Sub(_Arith):
    """C = A - B (integers wrap around)."""

    ufunc = np.subtract


@registry.register("Mul", since=_ARITH_VERSIONS)
class Mul(_Arith):
    """C = A * B (integers wrap around)."""

    ufunc = np.multiply


def _int_div_trunc(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer division rounding toward zero (C semantics); x / 0 gives 0, not a crash."""
    with np.errstate(all="ignore"):
        q, r = np.divmod(a, b)
        if a.dtype.kind == "u" and b.dtype.kind == "u":
            return q
        fix = (r != 0) & ((a < 0) != (b < 0))
        return q + fix.astype(q.dtype)


@registry.register("Div", since=_ARITH_VERSIONS)
class Div(_LegacyBinary):
    """C = A / B; integer division truncates toward zero like C."""

    def compute(self, a, b):
        a = np.asarray(a)
        b = self._align(a, np.asarray(b))
        dt = a.dtype
        if dt.kind in "iu":
            return (_out(_int_div_trunc(a, b), dt),)
        with np.errstate(all="ignore"):
            if dt.kind == "V":
                return (_out(np.divide(a.astype(np.float32), b.astype(np.float32)), dt),)
            return (_out(np.divide(a, b), dt),)


# --------------------------------------------------------------------------------------
# Pow, Mod
# --------------------------------------------------------------------------------------


def _int_pow(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Integer power with integer exponents; negative exponents truncate like C casts."""
    dt = x.dtype
    with np.errstate(all="ignore"):
        if y.dtype.kind == "b":
            y = y.astype(dt)
        neg = y < 0 if y.dtype.kind == "i" else None
        if neg is not None and neg.any():
            yy = np.where(neg, 0, y).astype(dt)
            r = np.power(x, yy)
            # x ** -n: 1 for x == 1, +-1 for x == -1, 0 otherwise (including x == 0)
            odd = (np.abs(y) % 2).astype(bool)
            negres = np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0))
            return _out(np.where(neg, negres, r), dt)
        return _out(np.power(x, y.astype(dt)), dt)


def _square(x: np.ndarray) -> np.ndarray:
    return x * x


def _cube(x: np.ndarray) -> np.ndarray:
    y = x * x
    y *= x
    return y


# Constant float exponents computed by multiplication or sqrt: libm's powf costs ~10x more
# per element (GPT-2's GELU cubes its input), and these forms are exact or within an ulp.
_FAST_POWERS: dict[float, Callable[[np.ndarray], np.ndarray]] = {
    1.0: np.copy, 2.0: _square, 3.0: _cube, 0.5: np.sqrt,
}


@registry.register("Pow", since=(1, 7, 12, 13, 15))
class Pow(_LegacyBinary):
    """Z = X ** Y; the output has the base's type (the exponent may be another type)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fast: Callable[[np.ndarray], np.ndarray] | None = None
        y = info.constant(1)
        if isinstance(y, np.ndarray) and y.size == 1 and y.ndim == 0 and y.dtype.kind == "f":
            self.fast = _FAST_POWERS.get(float(y))

    def compute(self, x, y):
        x = np.asarray(x)
        if self.fast is not None and x.dtype.kind == "f" and x.dtype in _NATIVE_FLOATS:
            return (self.fast(x),)
        y = self._align(x, np.asarray(y))
        dt = x.dtype
        if dt.kind in "iu":
            if y.dtype.kind in "biu":
                return (_int_pow(x, y),)
            with np.errstate(all="ignore"):
                return (_out(np.power(x.astype(np.float64), _as_float(y)), dt),)
        with np.errstate(all="ignore"):
            if dt.kind == "V" or y.dtype != dt:
                xf = _as_float(x)
                yf = _as_float(y)
                if yf.dtype != xf.dtype:
                    xf = xf.astype(np.float64)
                    yf = yf.astype(np.float64)
                return (_out(np.power(xf, yf), dt),)
            return (np.asarray(np.power(x, y)),)


@registry.register("Mod", since=(10, 13, 28))
class Mod(Kernel):
    """Remainder: fmod=0 takes the divisor's sign (Python %), fmod=1 the dividend's (C)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fmod = int(info.attr("fmod", 0))
        if self.fmod not in (0, 1):
            raise InvalidGraph(f"{_node(info)}: attribute fmod must be 0 or 1, got {self.fmod}")

    def compute(self, a, b):
        a = np.asarray(a)
        b = np.asarray(b)
        dt = a.dtype
        fn = np.fmod if self.fmod else np.mod
        with np.errstate(all="ignore"):
            if dt.kind == "V":
                return (_out(fn(a.astype(np.float32), b.astype(np.float32)), dt),)
            if dt == np.float16:  # compute the remainder exactly, round once
                return (_out(fn(a.astype(np.float32), b.astype(np.float32)), dt),)
            return (_out(fn(a, b), dt),)


# --------------------------------------------------------------------------------------
# unary math
# --------------------------------------------------------------------------------------


class _UnaryFloat(Kernel):
    """Base of float-only unary ops."""

    fn: Callable[[np.ndarray], Any] = np.negative

    def compute(self, x):
        return (_float_unary(self.fn, np.asarray(x)),)


class _UnaryAny(Kernel):
    """Base of unary ops that also take integers (numpy keeps the dtype)."""

    fn: Callable[[np.ndarray], Any] = np.negative

    def compute(self, x):
        x = np.asarray(x)
        if x.dtype.kind in "iub":
            with np.errstate(all="ignore"):
                return (_out(self.fn(x), x.dtype),)
        return (_float_unary(self.fn, x),)


def _unary(name: str, since: tuple[int, ...], fn: Callable[..., Any], ints: bool, doc: str):
    base = _UnaryAny if ints else _UnaryFloat
    cls = type(name, (base,), {"fn": staticmethod(fn), "__doc__": doc, "__module__": __name__})
    registry.register(name, since=since)(cls)
    return cls


_V1_6_13 = (1, 6, 13)
Sqrt = _unary("Sqrt", _V1_6_13, np.sqrt, False, "Y = sqrt(X); NaN for negative inputs.")
Neg = _unary("Neg", _V1_6_13, np.negative, True, "Y = -X (integers wrap around).")
Reciprocal = _unary("Reciprocal", _V1_6_13, np.reciprocal, False, "Y = 1 / X.")
Abs = _unary("Abs", _V1_6_13, np.abs, True, "Y = |X|.")
Exp = _unary("Exp", _V1_6_13, np.exp, False, "Y = exp(X).")
Log = _unary("Log", _V1_6_13, np.log, False, "Y = ln(X).")
Floor = _unary("Floor", _V1_6_13, np.floor, False, "Y = floor(X).")
Ceil = _unary("Ceil", _V1_6_13, np.ceil, False, "Y = ceil(X).")
Round = _unary("Round", (11, 22), np.rint, False, "Y = X rounded to nearest, ties to even.")
Sign = _unary("Sign", (9, 13), np.sign, True, "Y = -1, 0 or 1 by the sign of X.")
Sin = _unary("Sin", (7, 22), np.sin, False, "Y = sin(X).")
Cos = _unary("Cos", (7, 22), np.cos, False, "Y = cos(X).")
Tan = _unary("Tan", (7, 22), np.tan, False, "Y = tan(X).")
Asin = _unary("Asin", (7, 22), np.arcsin, False, "Y = asin(X).")
Acos = _unary("Acos", (7, 22), np.arccos, False, "Y = acos(X).")
Atan = _unary("Atan", (7, 22), np.arctan, False, "Y = atan(X).")
Sinh = _unary("Sinh", (9, 22), np.sinh, False, "Y = sinh(X).")
Cosh = _unary("Cosh", (9, 22), np.cosh, False, "Y = cosh(X).")
Asinh = _unary("Asinh", (9, 22), np.arcsinh, False, "Y = asinh(X).")
Acosh = _unary("Acosh", (9, 22), np.arccosh, False, "Y = acosh(X).")
Atanh = _unary("Atanh", (9, 22), np.arctanh, False, "Y = atanh(X).")


@registry.register("Erf", since=(9, 13))
class Erf(Kernel):
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


@registry.register("IsNaN", since=(9, 13, 20))
class IsNaN(Kernel):
    """Y = isnan(X) as bool."""

    def compute(self, x):
        x = np.asarray(x)
        if x.dtype.kind in "iub":
            return (np.zeros(x.shape, dtype=bool),)
        return (np.asarray(np.isnan(_as_float(x))),)


@registry.register("IsInf", since=(10, 20))
class IsInf(Kernel):
    """Y = X is +inf (detect_positive) or -inf (detect_negative), as bool."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.positive = bool(info.attr("detect_positive", 1))
        self.negative = bool(info.attr("detect_negative", 1))

    def compute(self, x):
        x = np.asarray(x)
        if x.dtype.kind in "iub":
            return (np.zeros(x.shape, dtype=bool),)
        xf = _as_float(x)
        if self.positive and self.negative:
            return (np.asarray(np.isinf(xf)),)
        if self.positive:
            return (np.asarray(xf == np.inf),)
        if self.negative:
            return (np.asarray(xf == -np.inf),)
        return (np.zeros(x.shape, dtype=bool),)


# --------------------------------------------------------------------------------------
# variadic: Min, Max, Sum, Mean
# --------------------------------------------------------------------------------------


class _Variadic(Kernel):
    ufunc: Callable[..., Any] = np.add

    def _reduce(self, inputs: tuple[Any, ...]) -> tuple[np.ndarray, np.dtype[Any]]:
        arrays = [np.asarray(v) for v in inputs if v is not None]
        if not arrays:
            raise ValueError(f"{self.info.op_type} needs at least one input")
        dt = arrays[0].dtype
        if dt.kind == "V" or dt == np.float16:  # accumulate in float32, round once
            arrays = [a.astype(np.float32) for a in arrays]
        with np.errstate(all="ignore"):
            acc = functools.reduce(self.ufunc, arrays)
        return np.asarray(acc), dt


_VARIADIC_VERSIONS = (1, 6, 8, 12, 13)


@registry.register("Max", since=_VARIADIC_VERSIONS)
class Max(_Variadic):
    """Elementwise maximum of all inputs (NaN propagates), broadcasting from opset 8."""

    ufunc = np.maximum

    def compute(self, *inputs):
        acc, dt = self._reduce(inputs)
        return (_out(acc, dt),)


@registry.register("Min", since=_VARIADIC_VERSIONS)
class Min(_Variadic):
    """Elementwise minimum of all inputs (NaN propagates), broadcasting from opset 8."""

    ufunc = np.minimum

    def compute(self, *inputs):
        acc, dt = self._reduce(inputs)
        return (_out(acc, dt),)


@registry.register("Sum", since=(1, 6, 8, 13))
class Sum(_Variadic):
    """Elementwise sum of all inputs, broadcasting from opset 8."""

    ufunc = np.add

    def compute(self, *inputs):
        acc, dt = self._reduce(inputs)
        return (_out(acc, dt),)


@registry.register("Mean", since=(1, 6, 8, 13))
class Mean(_Variadic):
    """Elementwise mean of all inputs, broadcasting from opset 8."""

    ufunc = np.add

    def compute(self, *inputs):
        n = sum(v is not None for v in inputs)
        acc, dt = self._reduce(inputs)
        if acc.dtype.kind in "iu":
            return (_out(acc // n, dt),)
        return (_out(acc / acc.dtype.type(n), dt),)


# --------------------------------------------------------------------------------------
# bitwise
# --------------------------------------------------------------------------------------


@registry.register("BitShift", since=(11, 28))
class BitShift(Kernel):
    """Shift X by Y bits; shifts outside [0, bits) leave only the sign fill."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        direction = info.attr("direction")
        if direction not in ("LEFT", "RIGHT"):
            raise InvalidGraph(
                f"{_node(info)}: attribute direction must be 'LEFT' or 'RIGHT', got {direction!r}"
            )
        self.left = direction == "LEFT"

    def compute(self, x, y):
        x = np.asarray(x)
        y = np.asarray(y)
        dt = x.dtype
        bits = dt.itemsize * 8
        with np.errstate(all="ignore"):
            valid = y < bits
            if y.dtype.kind == "i":
                valid &= y >= 0
            shift = np.where(valid, y, 0).astype(dt)
            if self.left:
                r = np.left_shift(x, shift)
                fill = np.zeros((), dtype=dt)
            else:
                r = np.right_shift(x, shift)
                fill = np.where(x < 0, -1, 0).astype(dt) if dt.kind == "i" else dt.type(0)
            if valid.all():
                return (_out(r, dt),)
            return (_out(np.where(valid, r, fill), dt),)


class _Bitwise(Kernel):
    ufunc: Callable[..., Any] = np.bitwise_and

    def compute(self, a, b):
        a = np.asarray(a)
        return (_out(self.ufunc(a, np.asarray(b)), a.dtype),)


@registry.register("BitwiseAnd", since=18)
class BitwiseAnd(_Bitwise):
    """C = A & B."""

    ufunc = np.bitwise_and


@registry.register("BitwiseOr", since=18)
class BitwiseOr(_Bitwise):
    """C = A | B."""

    ufunc = np.bitwise_or


@registry.register("BitwiseXor", since=18)
class BitwiseXor(_Bitwise):
    """C = A ^ B."""

    ufunc = np.bitwise_xor


@registry.register("BitwiseNot", since=18)
class BitwiseNot(Kernel):
    """Y = ~X."""

    def compute(self, x):
        return (np.asarray(np.invert(np.asarray(x))),)


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
        with np.errstate(all="ignore"):
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
    with np.errstate(all="ignore"):
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
    with np.errstate(all="ignore"):
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

    def compute(self, x):
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
