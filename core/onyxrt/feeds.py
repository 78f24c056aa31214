"""Checking and converting what callers feed a session, as onnxruntime accepts it.

A feed may be a numpy array, an ``OrtValue``, a Python list or scalar, or (for string
inputs) any array of text: ``str``, ``bytes`` (``S``), fixed-size byte records (``V``,
what some libraries build with ``np.void``) or objects, which become an object array of
``str`` (bytes decoded as UTF-8, undecodable bytes kept through ``surrogateescape``);
a list of numbers fed to a string input becomes their text, as onnxruntime makes it.
Everything else must match the input's declared type and fixed dimensions, or the call
fails with :class:`~onyxrt.errors.InvalidInput` naming the input and the fix.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import onnx_elem_type, type_string
from .errors import InvalidInput
from .ortvalue import OrtValue
from .records import record

__all__ = ["InputCheck", "check_feed", "check_shape", "type_name"]


@record
class InputCheck:
    """What a feed of one input must be: dtype, declared shape, kind of value."""

    name: str
    dtype: np.dtype[Any] | None
    shape: tuple[int | str | None, ...] | None
    kind: str

    def __post_init__(self) -> None:
        #: the one shape a feed can have when every dimension is fixed (else None)
        self.fixed = tuple(self.shape) if self.shape is not None and all(isinstance(d, int) for d in self.shape) else None
        #: whether a numpy array of exactly ``dtype`` is taken as it is (not text, which
        #: is normalised to ``str`` objects)
        self.plain = self.kind == "tensor" and self.dtype is not None and self.dtype.kind != "O"
        #: the declared rank, and (axis, size) of each fixed dimension (None: any shape)
        self.rank = len(self.shape) if self.shape is not None else -1
        self.fixed_axes = (
            tuple((axis, d) for axis, d in enumerate(self.shape) if isinstance(d, int))
            if self.shape is not None else ()
        )

    def fits(self, shape: tuple[int, ...]) -> bool:
        """Whether a feed of this ``shape`` matches the declared rank and fixed dims."""
        if self.rank < 0:
            return True
        if len(shape) != self.rank:
            return False
        for axis, size in self.fixed_axes:  # noqa: SIM110 - all() of a generator costs more than the check
            if shape[axis] != size:
                return False
        return True


def check_feed(check: InputCheck, value: Any) -> Any:
    """``value`` as the array (or container) the input takes, or an InvalidInput."""
    if type(value) is np.ndarray and check.plain and value.dtype == check.dtype and (
        value.shape == check.fixed or check.fixed is None and check.fits(value.shape)
    ):  # the usual feed: nothing to convert, nothing further to check
        return value
    if isinstance(value, OrtValue):
        # A sparse input (com.microsoft's sparse operators take them) stays sparse.
        value = value.as_sparse_tensor() if check.kind == "sparse_tensor" and value.is_sparse_tensor() else value.numpy()
    if check.kind != "tensor":
        return value
    expected = check.dtype
    if expected is not None and expected.kind == "O":
        value = _as_strings(check, value)
    elif not isinstance(value, np.ndarray):
        value = _from_python(check, value, expected)
    if expected is not None and value.dtype != expected:
        raise InvalidInput(
            f"input {check.name!r}: unexpected data type {type_name(value.dtype)}, "
            f"expected {type_name(expected)}. Convert it with .astype({_np_name(expected)})."
        )
    check_shape(check, value.shape)
    return value


def _from_python(check: InputCheck, value: Any, expected: np.dtype[Any] | None) -> np.ndarray:
    """A list, tuple or scalar as an array of the input's dtype."""
    if not isinstance(value, (list, tuple, int, float, bool, np.generic)):
        raise InvalidInput(
            f"input {check.name!r}: expected a numpy array of {expected}, got {type(value).__name__}"
        )
    try:
        return np.asarray(value, dtype=expected)
    except OverflowError:
        info = np.iinfo(expected) if expected is not None and expected.kind in "iu" else None
        span = f" (its range is {info.min}..{info.max})" if info is not None else ""
        raise InvalidInput(
            f"input {check.name!r}: a value in {_preview(value)} does not fit {type_name(expected)}{span}; "
            "pass values in range, or a numpy array of the dtype you mean"
        ) from None
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"input {check.name!r}: cannot convert to {expected}: {exc}") from None


def _as_strings(check: InputCheck, value: Any) -> np.ndarray:
    """Text in any of the forms onnxruntime takes, as an object array of ``str``."""
    if isinstance(value, (str, bytes)):
        return np.asarray(_text(value), dtype=object)
    if isinstance(value, (list, tuple)):
        try:
            value = np.asarray(value, dtype=object)
        except ValueError as exc:  # ragged nesting
            raise InvalidInput(f"input {check.name!r}: cannot make an array of the given lists: {exc}") from None
    if not isinstance(value, np.ndarray):
        raise InvalidInput(
            f"input {check.name!r}: expected an array of strings, got {type(value).__name__}"
        )
    kind = value.dtype.kind
    if kind == "U":
        return value.astype(object)
    if kind in "SV" or (kind == "O" and not all(type(v) is str for v in value.flat)):
        out = np.empty(value.shape, dtype=object)
        flat = out.reshape(-1)
        for i, item in enumerate(value.reshape(-1)):
            flat[i] = _text(item)
        return out
    if kind == "O":
        return value
    raise InvalidInput(
        f"input {check.name!r}: unexpected data type {type_name(value.dtype)}, expected tensor(string). "
        "Convert it with .astype(str)."
    )


def _text(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, np.void):
        item = item.tobytes()
    if isinstance(item, bytes):
        return item.decode("utf-8", "surrogateescape")
    return str(item)


def check_shape(check: InputCheck, got: tuple[int, ...], where: str = "") -> None:
    """A feed's rank and fixed dims must match the model's declaration (host or device)."""
    shape = check.shape
    if shape is None:
        return
    if len(got) != len(shape):
        raise InvalidInput(
            f"input {check.name!r}{where}: invalid rank {len(got)} (shape {list(got)}), "
            f"expected rank {len(shape)} (shape {list(shape)})"
        )
    for axis, (dim, want) in enumerate(zip(got, shape)):
        if isinstance(want, int) and dim != want:
            raise InvalidInput(
                f"input {check.name!r}{where}: dimension {axis} is {dim}, but the model fixes it "
                f"to {want} (got shape {list(got)}, expected {list(shape)})"
            )


def type_name(dtype: np.dtype[Any] | None) -> str:
    """onnxruntime's type string of a numpy dtype ('tensor(undefined)' if it has none)."""
    try:
        return type_string(onnx_elem_type(dtype))
    except TypeError:
        return type_string(0)


def _np_name(dtype: np.dtype[Any]) -> str:
    return f"np.{dtype.name}" if dtype.kind in "biuf" else repr(str(dtype))


def _preview(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
