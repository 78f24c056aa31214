"""Elementwise arithmetic, math functions and bitwise operators, written once over an array
namespace.

Add, Sub, Mul, Div, Pow; the unary math functions (Abs, Neg, Sqrt, Reciprocal, Exp, Log,
Floor, Ceil, Round, Sign, the trigonometric and hyperbolic functions and their inverses,
Erf); IsNaN and IsInf; the variadic Max, Min, Sum and Mean; BitShift and the Bitwise
operators; Mod — every ONNX version of each.

Binary operators broadcast like numpy from opset 7 on; the older versions (Add-1/6,
Pow-1, ...) use ONNX's legacy ``broadcast``/``axis`` attributes (:func:`legacy_align`).
Integer arithmetic wraps around; integer Div truncates toward zero as in C, and x / 0 is 0;
an integer Pow with a negative exponent gives what a C cast of the real power gives (1 for
base 1, ±1 for base -1, else 0). bfloat16 is computed in float32 and rounded once, which
is what a correctly rounded native kernel gives for one operation; float16 arithmetic runs
natively where the namespace has it, float16 math functions in float32.

Floating-point exceptions (log of a negative number, 1 / 0, overflow) give their IEEE
results (NaN, inf), which are the ONNX semantics; numpy-based namespaces would also report
them as warnings, which :func:`_quiet` silences (it has no effect on other namespaces).

BitCast reinterprets each element's little-endian bits as another type of the same width:
a reinterpretation of bytes the standard cannot express, so it needs the backend's
``bitcast`` extra (``x.view(dtype)`` in numpy and CuPy). The 4- and 2-bit types (int4,
uint4, float4e2m1, int2, uint2) are held one per byte in their low bits by ml_dtypes, so
they are masked to those bits and viewed byte for byte.

Left with the providers, not expressible with the standard's functions: Cast and CastLike
(strings, float8 saturation and rounding modes, 4- and 2-bit types).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt.float_errors import quiet_float_errors
from onyxrt.kernels import KernelInfo

from .library import OpKernel, dtype_name, library

__all__ = ["legacy_align"]

_name = dtype_name
_INTEGERS = frozenset(f"{s}int{bits}" for s in ("", "u") for bits in (8, 16, 32, 64))
_SIGNED = frozenset(f"int{bits}" for bits in (8, 16, 32, 64))
#: Floats every namespace that holds them computes in directly (bfloat16 is computed in
#: float32: numpy has no native loops for it).
_NATIVE_FLOATS = frozenset({"float16", "float32", "float64"})

#: numpy reports IEEE exceptions as warnings; the IEEE results are the ONNX semantics
#: (a no-op inside a session's run, which ignores them already).
_quiet = quiet_float_errors


def _is_integer(x: Any) -> bool:
    # Not xp.isdtype: numpy's refuses the dtypes it does not define (ml_dtypes' bfloat16).
    return _name(x.dtype) in _INTEGERS


def legacy_align(xp: Any, a: Any, b: Any, broadcast: int, axis: int | None) -> Any:
    """``b`` reshaped for the pre-opset-7 broadcasting rule (``broadcast``/``axis``).

    Without ``broadcast`` both shapes must be equal. With it, ``b`` is a scalar, a
    one-element tensor, or a contiguous run of ``a``'s dims starting at ``axis`` (suffix
    when unset); a size-1 dim of ``b`` stretches, as exporters of the time (PyTorch) relied
    on. Only shapes are inspected; ``b`` is reshaped.
    """
    a_shape, b_shape = tuple(a.shape), tuple(b.shape)
    if not broadcast:
        if a_shape != b_shape:
            raise ValueError(
                f"shapes {a_shape} and {b_shape} differ and the 'broadcast' attribute is not "
                "set (this opset version only broadcasts with broadcast=1)"
            )
        return b
    if math.prod(b_shape) == 1:
        return xp.reshape(b, ())
    if len(b_shape) > len(a_shape):
        raise ValueError(f"cannot broadcast shape {b_shape} onto {a_shape}: rank is larger")
    start = len(a_shape) - len(b_shape) if axis is None else (axis + len(a_shape) if axis < 0 else axis)
    window = a_shape[start : start + len(b_shape)] if start >= 0 else ()
    if (
        start < 0
        or start + len(b_shape) > len(a_shape)
        or any(db not in (1, da) for da, db in zip(window, b_shape))
    ):
        raise ValueError(
            f"cannot broadcast shape {b_shape} onto {a_shape} at axis {start} "
            "(legacy broadcasting needs a contiguous match)"
        )
    return xp.reshape(b, b_shape + (1,) * (len(a_shape) - start - len(b_shape)))


class Elementwise(OpKernel):
    """Base of the elementwise operators: :meth:`result` gives an array of the output type;
    ``wide_floats`` are the namespace's float32 and float64 (computed in directly)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.wide_floats = frozenset(self.backend.dtype(t) for t in (np.float32, np.float64))

    def result(self, r: Any, dtype: Any) -> Any:
        """``r`` as an array of ``dtype`` (numpy makes scalars of 0-d results)."""
        if r.ndim == 0:
            r = self.xp.asarray(r)
        return r if r.dtype == dtype else self.xp.astype(r, dtype)

    def as_float(self, x: Any) -> Any:
        """``x`` in a float type the namespace computes in: float16/32/64 stay, bfloat16 (and
        other narrow floats) widen to float32, integers and bool to float64."""
        name = _name(x.dtype)
        if name in _NATIVE_FLOATS:
            return x
        wide = np.float64 if name in _INTEGERS or name == "bool" else np.float32
        return self.xp.astype(x, self.backend.dtype(wide))


class LegacyBinary(Elementwise):
    """A two-input operator; parses the legacy broadcast attributes of versions before 7."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.legacy = info.since_version < 7
        self.broadcast = int(info.attr("broadcast", 0))
        axis = info.attr("axis")
        self.axis = None if axis is None else int(axis)

    def align(self, a: Any, b: Any) -> Any:
        """``b`` reshaped for legacy broadcasting (versions before 7), else ``b``."""
        return legacy_align(self.xp, a, b, self.broadcast, self.axis) if self.legacy else b


# ------------------------------------------------------------------- Add Sub Mul Div

_ARITH_VERSIONS = (1, 6, 7, 13, 14)


class Arithmetic(LegacyBinary):
    """C = fn(A, B) in A's type: :attr:`function` names the namespace's function."""

    function = "add"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn: Callable[[Any, Any], Any] = getattr(self.xp, self.function)

    def compute(self, a, b):
        if self.legacy:
            b = self.align(a, b)
        if _name(a.dtype) == "bfloat16":
            return (self.narrow(self.fn(self.widen(a), self.widen(b)), a),)
        return (self.result(self.fn(a, b), a.dtype),)


@library.define("Add", _ARITH_VERSIONS)
class Add(Arithmetic):
    """C = A + B (integers wrap around)."""

    function = "add"


@library.define("Sub", _ARITH_VERSIONS)
class Sub(Arithmetic):
    """C = A - B (integers wrap around)."""

    function = "subtract"


@library.define("Mul", _ARITH_VERSIONS)
class Mul(Arithmetic):
    """C = A * B (integers wrap around)."""

    function = "multiply"


@library.define("Div", _ARITH_VERSIONS)
class Div(LegacyBinary):
    """C = A / B; integer division truncates toward zero like C, and x / 0 gives 0."""

    def compute(self, a, b):
        xp = self.xp
        b = self.align(a, b)
        dt = a.dtype
        with _quiet():
            if not _is_integer(a):
                if _name(dt) == "bfloat16":
                    return (self.narrow(xp.divide(self.widen(a), self.widen(b)), a),)
                return (self.result(xp.divide(a, b), dt),)
            q = xp.floor_divide(a, b)
            if _name(dt) in _SIGNED:
                # floor → trunc: one more where the division was inexact and the signs differ.
                inexact = xp.remainder(a, b) != 0
                q = q + xp.astype(inexact & ((a < 0) != (b < 0)), dt)
        return (self.result(q, dt),)


# -------------------------------------------------------------------------------- Pow


@library.define("Pow", (1, 7, 12, 13, 15))
class Pow(LegacyBinary):
    """Z = X ** Y in the base's type (the exponent may have another type).

    A constant one-element float exponent 1, 2, 3 or 0.5 of a float base is computed by
    multiplication or ``sqrt`` (exact or within an ulp; the general power costs ~10x more
    per element, and GPT-2's GELU cubes its input). Mixed float types are computed in
    float64 and rounded once.
    """

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.power: float | None = None
        y = info.constant(1)
        if (
            isinstance(y, np.ndarray) and y.size == 1 and y.dtype.kind == "f"
            and not self.legacy and float(y.reshape(-1)[0]) in (1.0, 2.0, 3.0, 0.5)
        ):
            self.power = float(y.reshape(-1)[0])
            self.exponent_rank = y.ndim

    def constant_power(self, x: Any) -> Any:
        """``x`` (a float16/32/64 array) to :attr:`power`."""
        xp = self.xp
        if self.power == 2.0:
            return x * x
        if self.power == 3.0:
            return x * x * x
        if self.power == 0.5:
            return xp.sqrt(x)
        return xp.astype(x, x.dtype, copy=True)

    def compute(self, x, y):
        xp = self.xp
        dt = x.dtype
        name = _name(dt)
        if self.power is not None and name in _NATIVE_FLOATS and x.ndim >= self.exponent_rank:
            with _quiet():
                return (self.result(self.constant_power(x), dt),)
        y = self.align(x, y)
        with _quiet():
            if _is_integer(x) and (_is_integer(y) or _name(y.dtype) == "bool"):
                return (self.result(self.integer_power(x, y), dt),)
            xf, yf = self.as_float(x), self.as_float(y)
            if _is_integer(x) or xf.dtype != yf.dtype:
                f64 = self.backend.dtype(np.float64)
                xf, yf = xp.astype(xf, f64), xp.astype(yf, f64)
            return (self.result(xp.pow(xf, yf), dt),)

    def integer_power(self, x: Any, y: Any) -> Any:
        """x ** y for integer ``x`` and integer (or bool) ``y``, in ``x``'s type."""
        xp = self.xp
        dt = x.dtype
        if _name(y.dtype) not in _SIGNED:
            return xp.pow(x, xp.astype(y, dt))
        neg = y < 0
        r = xp.pow(x, xp.astype(xp.where(neg, 0, y), dt))
        # x ** -n: 1 for x == 1, ±1 for x == -1 (by the parity of n), 0 otherwise.
        odd = xp.remainder(y, 2) != 0
        ones = xp.ones_like(x)
        minus_one = xp.where(odd, -ones, ones)
        negres = xp.where(x == 1, ones, xp.where(x == -1, minus_one, xp.zeros_like(x)))
        return xp.where(neg, negres, r)


# ------------------------------------------------------------------------- unary math


class FloatUnary(Elementwise):
    """Y = fn(X) for float X, computed in float32 for float16/bfloat16 and rounded back;
    :attr:`function` names the namespace's function, :attr:`exact` says it raises no
    floating-point exception (so :func:`_quiet`, ~1 us per call, is not needed)."""

    function = "exp"
    exact = False

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn: Callable[[Any], Any] = getattr(self.xp, self.function)

    def compute(self, x):
        w = x if x.dtype in self.wide_floats else self.widen(x)
        if self.exact:
            return (self.result(self.fn(w), x.dtype),)
        with _quiet():
            y = self.fn(w)
        return (self.result(y, x.dtype),)


class NumericUnary(FloatUnary):
    """Y = fn(X) for floats (as :class:`FloatUnary`) and integers (in their own type)."""

    def compute(self, x):
        if _is_integer(x):
            return (self.result(self.fn(x), x.dtype),)
        return super().compute(x)


def _unary(op: str, since: tuple[int, ...], function: str, ints: bool, doc: str,
           exact: bool = False) -> type:
    base = NumericUnary if ints else FloatUnary
    cls = type(op, (base,), {"function": function, "exact": exact, "__doc__": doc,
                             "__module__": __name__})
    library.define(op, since)(cls)
    return cls


_V1_6_13 = (1, 6, 13)
Sqrt = _unary("Sqrt", _V1_6_13, "sqrt", False, "Y = sqrt(X); NaN for negative inputs.")
Neg = _unary("Neg", _V1_6_13, "negative", True, "Y = -X (integers wrap around).", exact=True)
Abs = _unary("Abs", _V1_6_13, "abs", True, "Y = |X|.", exact=True)
Exp = _unary("Exp", _V1_6_13, "exp", False, "Y = exp(X).")
Log = _unary("Log", _V1_6_13, "log", False, "Y = ln(X).")
Floor = _unary("Floor", _V1_6_13, "floor", False, "Y = floor(X).", exact=True)
Ceil = _unary("Ceil", _V1_6_13, "ceil", False, "Y = ceil(X).", exact=True)
Round = _unary("Round", (11, 22), "round", False, "Y = X rounded to nearest, ties to even.",
               exact=True)
Sign = _unary("Sign", (9, 13), "sign", True, "Y = -1, 0 or 1 by the sign of X.", exact=True)
Sin = _unary("Sin", (7, 22), "sin", False, "Y = sin(X).")
Cos = _unary("Cos", (7, 22), "cos", False, "Y = cos(X).")
Tan = _unary("Tan", (7, 22), "tan", False, "Y = tan(X).")
Asin = _unary("Asin", (7, 22), "asin", False, "Y = asin(X).")
Acos = _unary("Acos", (7, 22), "acos", False, "Y = acos(X).")
Atan = _unary("Atan", (7, 22), "atan", False, "Y = atan(X).")
Sinh = _unary("Sinh", (9, 22), "sinh", False, "Y = sinh(X).")
Cosh = _unary("Cosh", (9, 22), "cosh", False, "Y = cosh(X).")
Asinh = _unary("Asinh", (9, 22), "asinh", False, "Y = asinh(X).")
Acosh = _unary("Acosh", (9, 22), "acosh", False, "Y = acosh(X).")
Atanh = _unary("Atanh", (9, 22), "atanh", False, "Y = atanh(X).")


@library.define("Reciprocal", _V1_6_13)
class Reciprocal(Elementwise):
    """Y = 1 / X."""

    def compute(self, x):
        w = x if x.dtype in self.wide_floats else self.widen(x)
        with _quiet():
            y = 1.0 / w
        return (self.result(y, x.dtype),)


@library.define("Erf", (9, 13), needs=("erf",))
class Erf(Elementwise):
    """Y = erf(X) (the backend's ``erf``): float16 and bfloat16 in float32, integers in
    float64, rounded to the input type."""

    def compute(self, x):
        y = self.backend.extras["erf"](self.widen(self.as_float(x)))
        return (self.result(y, x.dtype),)


class FloatTest(Elementwise):
    """A bool test of float values: integers and bool give all False; bfloat16 and the
    float8 types are tested in float32."""

    def test(self, x: Any) -> Any:
        """The bool result for ``x`` in float16/32/64."""
        raise NotImplementedError

    def compute(self, x):
        xp = self.xp
        name = _name(x.dtype)
        if name in _INTEGERS or name == "bool":
            return (xp.zeros(x.shape, dtype=self.backend.dtype(np.bool_)),)
        if name not in _NATIVE_FLOATS:
            x = xp.astype(x, self.backend.dtype(np.float32))
        return (self.result(self.test(x), self.backend.dtype(np.bool_)),)


@library.define("IsNaN", (9, 13, 20))
class IsNaN(FloatTest):
    """Y = isnan(X) as bool."""

    def test(self, x):
        return self.xp.isnan(x)


@library.define("IsInf", (10, 20))
class IsInf(FloatTest):
    """Y = X is +inf (detect_positive) or -inf (detect_negative), as bool."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.positive = bool(info.attr("detect_positive", 1))
        self.negative = bool(info.attr("detect_negative", 1))

    def test(self, x):
        xp = self.xp
        if self.positive and self.negative:
            return xp.isinf(x)
        if self.positive:
            return x == math.inf
        if self.negative:
            return x == -math.inf
        return xp.zeros(x.shape, dtype=self.backend.dtype(np.bool_))


# ----------------------------------------------------------------- Max Min Sum Mean


class Variadic(Elementwise):
    """fn folded over every present input (broadcasting from opset 8); float16 and
    bfloat16 accumulate in float32 and are rounded once."""

    function = "add"
    #: whether fn raises no floating-point exception (see :class:`FloatUnary`).
    exact = False

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn: Callable[[Any, Any], Any] = getattr(self.xp, self.function)

    def fold(self, inputs: tuple[Any, ...]) -> tuple[Any, int]:
        """The folded inputs (widened when half precision) and how many there were."""
        arrays = [v for v in inputs if v is not None]
        if not arrays:
            raise ValueError(f"{self.info.op_type} needs at least one input")
        arrays = [self.widen(a) for a in arrays]
        if self.exact:
            return functools.reduce(self.fn, arrays), len(arrays)
        with _quiet():
            acc = functools.reduce(self.fn, arrays)
        return acc, len(arrays)

    def compute(self, *inputs):
        acc, _ = self.fold(inputs)
        return (self.result(acc, inputs[0].dtype),)


_VARIADIC_VERSIONS = (1, 6, 8, 12, 13)


@library.define("Max", _VARIADIC_VERSIONS)
class Max(Variadic):
    """Elementwise maximum of all inputs (NaN propagates), broadcasting from opset 8."""

    function = "maximum"
    exact = True


@library.define("Min", _VARIADIC_VERSIONS)
class Min(Variadic):
    """Elementwise minimum of all inputs (NaN propagates), broadcasting from opset 8."""

    function = "minimum"
    exact = True


@library.define("Sum", (1, 6, 8, 13))
class Sum(Variadic):
    """Elementwise sum of all inputs, broadcasting from opset 8."""

    function = "add"


@library.define("Mean", (1, 6, 8, 13))
class Mean(Variadic):
    """Elementwise mean of all inputs, broadcasting from opset 8."""

    function = "add"

    def compute(self, *inputs):
        acc, n = self.fold(inputs)
        if _is_integer(acc):
            return (self.result(self.xp.floor_divide(acc, n), acc.dtype),)
        return (self.result(acc / n, inputs[0].dtype),)


# ---------------------------------------------------------------------------- bitwise


@library.define("BitShift", (11, 28))
class BitShift(Elementwise):
    """Shift X by Y bits; shifts outside [0, bits) leave only the sign fill."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        direction = info.attr("direction")
        if direction not in ("LEFT", "RIGHT"):
            raise InvalidGraph(
                f"{self.where()}: attribute direction must be 'LEFT' or 'RIGHT', got {direction!r}"
            )
        self.left = direction == "LEFT"

    def compute(self, x, y):
        xp = self.xp
        dt = x.dtype
        bits = xp.iinfo(dt).bits
        valid = y < bits
        if _name(y.dtype) in _SIGNED:
            valid = valid & (y >= 0)
        shift = xp.astype(xp.where(valid, y, 0), dt)
        if self.left:
            r = xp.bitwise_left_shift(x, shift)
            fill = xp.zeros_like(x)
        else:
            r = xp.bitwise_right_shift(x, shift)
            # Past the width only the sign is left: -1 for negative signed values, else 0.
            fill = xp.bitwise_right_shift(x, bits - 1) if _name(dt) in _SIGNED else xp.zeros_like(x)
        return (self.result(xp.where(valid, r, fill), dt),)


class Bitwise(Elementwise):
    """C = fn(A, B) bit by bit: :attr:`function` names the namespace's function."""

    function = "bitwise_and"

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fn: Callable[[Any, Any], Any] = getattr(self.xp, self.function)

    def compute(self, a, b):
        return (self.result(self.fn(a, b), a.dtype),)


@library.define("BitwiseAnd", 18)
class BitwiseAnd(Bitwise):
    """C = A & B."""

    function = "bitwise_and"


@library.define("BitwiseOr", 18)
class BitwiseOr(Bitwise):
    """C = A | B."""

    function = "bitwise_or"


@library.define("BitwiseXor", 18)
class BitwiseXor(Bitwise):
    """C = A ^ B."""

    function = "bitwise_xor"


@library.define("BitwiseNot", 18)
class BitwiseNot(Elementwise):
    """Y = ~X."""

    def compute(self, x):
        return (self.result(self.xp.bitwise_invert(x), x.dtype),)


# -------------------------------------------------------------------------------- Mod


@library.define("Mod", (10, 13, 28))
class Mod(Elementwise):
    """Remainder: ``fmod=0`` takes the divisor's sign (Python's %), ``fmod=1`` the
    dividend's (C's fmod); an integer x mod 0 is 0, a float one NaN. float16 and narrower
    floats are computed in float32 and rounded once."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.fmod = int(info.attr("fmod", 0))
        if self.fmod not in (0, 1):
            raise InvalidGraph(f"{self.where()}: attribute fmod must be 0 or 1, got {self.fmod}")

    def compute(self, a, b):
        xp = self.xp
        with _quiet():  # x mod 0
            if _is_integer(a):
                r = xp.remainder(a, b)
                if self.fmod and _name(a.dtype) in _SIGNED:
                    # Python's sign → C's: |r| < |b|, so r - b cannot overflow.
                    r = xp.where((r != 0) & ((r < 0) != (a < 0)), r - b, r)
                return (self.result(r, a.dtype),)
            w = a if a.dtype in self.wide_floats else xp.astype(a, self.backend.dtype(np.float32))
            v = b if b.dtype == w.dtype else xp.astype(b, w.dtype)
            if self.fmod:
                # The remainder of magnitudes is C's fmod exactly (nothing to adjust when
                # both are positive); it takes the dividend's sign.
                r = xp.copysign(xp.remainder(xp.abs(w), xp.abs(v)), w)
            else:
                r = xp.remainder(w, v)
        return (self.result(r, a.dtype),)


# ----------------------------------------------------------------------------- BitCast


def _sub_byte_bits() -> dict[np.dtype[Any], int]:
    """The 4- and 2-bit element types this onnx and ml_dtypes have, with their widths."""
    bits: dict[np.dtype[Any], int] = {}
    for name, width in (("INT4", 4), ("UINT4", 4), ("FLOAT4E2M1", 4), ("INT2", 2), ("UINT2", 2)):
        code = getattr(TensorProto, name, None)
        if code is None:
            continue
        try:
            bits[np_dtype(code)] = width
        except TypeError:  # this ml_dtypes cannot hold it
            pass
    return bits


_SUB_BYTE_BITS = _sub_byte_bits()
_U8 = np.dtype(np.uint8)


def _bit_width(dt: np.dtype[Any]) -> int:
    return _SUB_BYTE_BITS.get(dt, dt.itemsize * 8)


@library.define("BitCast", 26, needs=("bitcast",))
class BitCast(OpKernel):
    """Reinterpret each element's bits as the ``to`` type (same bit width, same shape)."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        to = info.attr("to")
        if to is None:
            raise InvalidGraph(f"{self.where()}: attribute 'to' is required")
        if to == TensorProto.STRING:
            raise InvalidGraph(f"{self.where()}: cannot bit-cast to string")
        try:
            self.to = np_dtype(int(to))
        except TypeError:
            raise InvalidGraph(f"{self.where()}: 'to' = {to} is not a supported type") from None
        src = info.input_types[0].dtype if info.input_types and info.input_types[0] else None
        if src is not None and _bit_width(src) != _bit_width(self.to):
            raise InvalidGraph(f"{self.where()}: cannot bit-cast {src} ({_bit_width(src)} bits) "
                               f"to {self.to} ({_bit_width(self.to)} bits)")
        self._view = self.backend.extras["bitcast"]

    def compute(self, x):
        src = self.backend.numpy_dtype(x.dtype)
        if src.kind == "O":
            raise TypeError("BitCast does not accept string tensors")
        width = _bit_width(src)
        if width != _bit_width(self.to):
            raise ValueError(f"BitCast: {src} is {width} bits wide but {self.to} is "
                             f"{_bit_width(self.to)} bits wide")
        if src == self.to:
            return (x,)
        if width < 8:  # one value per byte, in the low bits
            raw = self.xp.bitwise_and(self._view(x, _U8), (1 << width) - 1)
            return (self._view(raw, self.to),)
        return (self._view(x, self.to),)
