"""A backend: the array namespace a provider computes with, and what it can hold.

The operator library is written against an *array namespace* ``xp`` — the functions of
the Python array API standard (``xp.exp``, ``xp.where``, ``xp.max(x, axis=...)``,
``xp.astype``...), as scikit-learn and SciPy write one implementation for numpy, CuPy and
torch. A :class:`Backend` pairs a namespace with the facts a provider needs to refuse a
node *before* it runs (at capability time, with a reason) instead of failing at run time:

* ``dtypes`` — the ONNX element types (as numpy dtypes) its arrays can hold: CuPy holds no
  bfloat16, float8, int4 or strings; the array API standard has no float16 at all;
* ``extras`` — functions beyond the standard that some operators need (``erf``), by name;
  an operator that needs one the backend lacks is not offered on it;
* ``dtype()`` / ``numpy_dtype()`` — the mapping between numpy dtypes (the core's element
  types) and the namespace's own dtype objects.

:func:`numpy_backend` is the host backend (numpy ≥ 2 is itself an array-API namespace);
:func:`namespace_backend` makes one for any array-API namespace (``array_api_strict``,
CuPy, torch through ``array_api_compat``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import field
from typing import Any

import numpy as np

from onyxrt.records import record

__all__ = ["Backend", "numpy_backend", "namespace_backend", "to_host", "STANDARD_DTYPES"]

#: The element types the array API standard defines (no float16, no bfloat16/float8).
STANDARD_DTYPES = frozenset(
    np.dtype(t)
    for t in (
        np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
        np.uint64, np.float32, np.float64,
    )
)


def to_host(value: Any) -> np.ndarray:
    """``value`` (a host or device array of any namespace, a numpy scalar, a list) as a
    numpy array: as it is when it already is one; CuPy's ``.get()`` (the real or the
    simulated CuPy); DLPack where the array lives in host memory; else a copy to the host
    through ``array_api_compat.to_device`` (torch on a GPU)."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (np.generic, int, float, bool, list, tuple)):
        return np.asarray(value)
    get = getattr(value, "get", None)
    if callable(get) and not isinstance(value, dict):
        return np.asarray(get())
    try:
        return np.from_dlpack(value)
    except (BufferError, RuntimeError, TypeError, ValueError):
        import array_api_compat

        return np.asarray(array_api_compat.to_device(value, "cpu"))


@record(frozen=True, eq=False)
class Backend:
    """An array namespace and what it can do (see the module docstring)."""

    name: str
    xp: Any
    dtypes: frozenset[np.dtype[Any]]
    extras: Mapping[str, Callable[..., Any]] = field(default_factory=dict)

    def dtype(self, dtype: Any) -> Any:
        """The namespace's dtype object for a numpy dtype (``np.float32`` → ``xp.float32``)."""
        dt = np.dtype(dtype)
        if self.xp is np:
            return dt
        return getattr(self.xp, "bool" if dt == np.bool_ else dt.name)

    def numpy_dtype(self, dtype: Any) -> np.dtype[Any]:
        """The numpy dtype of one of the namespace's dtypes (the inverse of :meth:`dtype`)."""
        try:
            return np.dtype(dtype)
        except TypeError:  # a namespace's own dtype object (array_api_strict, torch)
            name = str(dtype).rsplit(".", 1)[-1]
            return np.dtype("bool" if name == "bool" else name)

    def holds(self, dtype: Any) -> bool:
        """Whether arrays of the namespace can hold ``dtype``."""
        return np.dtype(dtype) in self.dtypes

    def lacks(self, needs: Iterable[str]) -> list[str]:
        """The functions of ``needs`` this backend does not provide."""
        return [name for name in needs if name not in self.extras]


def _numpy_view(x: np.ndarray, dtype: np.dtype[Any]) -> np.ndarray:
    """``x``'s little-endian bytes viewed as ``dtype`` (the ``bitcast`` extra)."""
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    return x.view(dtype)


def _numpy_einsum(equation: str, *operands: np.ndarray) -> Any:
    """numpy's einsum with its contraction-order optimizer (the ``einsum`` extra)."""
    return np.einsum(equation, *operands, optimize=True)


def numpy_backend(extras: Mapping[str, Callable[..., Any]] | None = None) -> Backend:
    """The host backend: numpy itself (numpy 2 implements the standard in its main
    namespace; numpy 1.x through ``array_api_compat.numpy``), every dtype numpy holds,
    numpy's ``einsum`` and ``bitcast`` (a byte view) extras, and ``extras``."""
    from onyxrt.dtypes import ALL_TENSOR_TYPES

    xp: Any = np
    if not hasattr(np, "permute_dims"):  # numpy < 2: the standard's names come from the wrapper
        import array_api_compat.numpy as xp
    own: dict[str, Callable[..., Any]] = {"einsum": _numpy_einsum, "bitcast": _numpy_view}
    return Backend("numpy", xp, frozenset(ALL_TENSOR_TYPES), {**own, **(extras or {})})


def namespace_backend(
    xp: Any,
    name: str | None = None,
    dtypes: Iterable[Any] | None = None,
    extras: Mapping[str, Callable[..., Any]] | None = None,
) -> Backend:
    """A backend over any array-API namespace ``xp``; ``dtypes`` defaults to the
    standard's dtypes the namespace defines (plus float16 where it has one)."""
    if dtypes is None:
        found = {dt for dt in STANDARD_DTYPES if hasattr(xp, "bool" if dt == np.bool_ else dt.name)}
        if hasattr(xp, "float16"):
            found.add(np.dtype(np.float16))
        dtypes = found
    return Backend(name or getattr(xp, "__name__", "array namespace"), xp,
                   frozenset(np.dtype(d) for d in dtypes), dict(extras or {}))
