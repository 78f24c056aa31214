"""Helpers shared by the GPU kernels: the dtype sets, the kernel base class, host values.

Kernels get CuPy through :func:`~onyxrt_gpu.cupy_loader.cupy_module` when they are built
(the real module, or the simulated one a test installed), so a kernel keeps using the
CuPy it was created with.

Values that steer a kernel rather than being computed on (shapes, axes, slice bounds,
pads...) are read on the host: from the node's constants when they are initializers
(once, at creation), else from the runtime input, which the kernel registers as a
``host_inputs`` position so the plan keeps it in host memory; a device array there is
still accepted and copied back with ``.get()``.

The operators of the operator library (:mod:`onyxrt_ops`) run over :data:`BACKEND`, whose
namespace is the same CuPy, resolved when a kernel is built (:class:`CupyBackend`).
"""

from __future__ import annotations

import importlib
import weakref
from dataclasses import field
from typing import Any

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.records import record
from onyxrt_ops import Backend

from ..cupy_loader import cupy_module

__all__ = [
    "FLOATS",
    "SIGNED_INTS",
    "UNSIGNED_INTS",
    "INTS",
    "NUMERIC",
    "BOOL",
    "TENSORS",
    "GpuKernel",
    "bad",
    "host_array",
    "host_ints",
    "host_scalar",
    "widen",
    "norm_axis",
    "norm_axes",
    "wants_output",
    "CupyNamespace",
    "cupy_namespace",
    "CupyBackend",
    "BACKEND",
    "register_host",
    "HostInputs",
]

FLOATS = frozenset(np.dtype(t) for t in (np.float16, np.float32, np.float64))
SIGNED_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
UNSIGNED_INTS = frozenset(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))
INTS = SIGNED_INTS | UNSIGNED_INTS
NUMERIC = FLOATS | INTS
BOOL = frozenset({np.dtype(np.bool_)})
#: Every element type CuPy holds that ONNX tensors use (no strings, bfloat16, float8).
TENSORS = NUMERIC | BOOL

_HALF = np.dtype(np.float16)
_F32 = np.dtype(np.float32)


class GpuKernel(Kernel):
    """Base of the GPU kernels: ``self.cp`` is the CuPy module the kernel was built with."""

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.cp = cupy_module()

    def upload(self, value: Any, dtype: Any = None) -> Any:
        """A host constant as a device array (once, at creation)."""
        return self.cp.asarray(np.asarray(value, dtype=dtype))

    def device(self, value: Any) -> Any:
        """``value`` as a device array; host data is copied over (a counted transfer)."""
        if isinstance(value, self.cp.ndarray):
            return value
        return self.cp.asarray(value)


def bad(info: KernelInfo, message: str) -> InvalidGraph:
    """An InvalidGraph error naming the node."""
    return InvalidGraph(f"node {info.node_name!r} ({info.op_type}): {message}")


def host_array(value: Any) -> np.ndarray:
    """A small steering tensor on the host: host values as they are, device ones copied."""
    if isinstance(value, np.ndarray):
        return value
    get = getattr(value, "get", None)
    if get is not None and not isinstance(value, (list, tuple)):
        return np.asarray(get())
    return np.asarray(value)


def host_ints(value: Any) -> list[int]:
    """A 0-d/1-d integer tensor (host or device) or a list as Python ints."""
    return [int(v) for v in host_array(value).reshape(-1)]


def host_scalar(value: Any) -> Any:
    """The single element of a one-element tensor (host or device) as a numpy scalar."""
    arr = host_array(value)
    if arr.size != 1:
        raise ValueError(f"expected a scalar (one element), got shape {arr.shape}")
    return arr.reshape(-1)[0]


_FUSED_KERNELS: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()


def fused_kernel(cp: Any, name: str, build: Any) -> Any:
    """``cp.fuse`` of the elementwise function ``build(module)`` returns, built once per
    CuPy module ``cp`` and ``name``, then shared by every node: one launch for several
    elementwise steps. ``build`` gets a weak proxy of the module, so the cache does not
    keep a (simulated) CuPy module alive."""
    table = _FUSED_KERNELS.get(cp)
    if table is None:
        table = {}
        _FUSED_KERNELS[cp] = table
    fn = table.get(name)
    if fn is None:
        fn = cp.fuse(kernel_name=f"onyxrt_{name}")(build(weakref.proxy(cp)))
        table[name] = fn
    return fn


def widen(x: Any) -> Any:
    """float16 → float32 (computed in float32 and rounded once at the end); others as is."""
    return x.astype(_F32) if x.dtype == _HALF else x


def norm_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[-rank, rank-1]`` mapped to ``[0, rank-1]``."""
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def norm_axes(axes: Any, rank: int, what: str = "axes") -> list[int]:
    """Normalized, duplicate-free axes."""
    out = [norm_axis(int(a), rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ValueError(f"{what} {list(axes)} contain a duplicate")
    return out


def wants_output(info: KernelInfo, index: int) -> bool:
    """Whether the node's optional output ``index`` is requested."""
    return index < len(info.output_names) and info.output_names[index] != ""


# ------------------------------------------------------------ the operator library's backend


def _astype(x: Any, dtype: Any, /, *, copy: bool = True, device: Any = None) -> Any:
    return x.astype(dtype, copy=copy)


#: The array API standard's names the library uses that some CuPy modules lack (CuPy
#: before 14 and the simulated CuPy have no ``astype`` or ``bool``), made from what every
#: CuPy has.
_STANDARD_FALLBACKS: dict[str, Any] = {"astype": _astype, "bool": np.bool_}

#: The array API standard's names for functions CuPy before 14 (and the simulated CuPy)
#: has under numpy's names.
_STANDARD_ALIASES: dict[str, str] = {
    "pow": "power", "round": "rint", "acos": "arccos", "asin": "arcsin", "atan": "arctan",
    "acosh": "arccosh", "asinh": "arcsinh", "atanh": "arctanh",
    "bitwise_left_shift": "left_shift", "bitwise_right_shift": "right_shift",
    "bitwise_invert": "invert", "concat": "concatenate", "permute_dims": "transpose",
    "cumulative_sum": "cumsum",
}  # fmt: skip

_NAMESPACES: weakref.WeakValueDictionary[int, CupyNamespace] = weakref.WeakValueDictionary()


class CupyNamespace:
    """A CuPy module as an array-API namespace: the module's own names, plus the few of
    the standard it lacks (:data:`_STANDARD_FALLBACKS`) or has under numpy's name
    (:data:`_STANDARD_ALIASES`). ``module`` is the CuPy module."""

    def __init__(self, module: Any) -> None:
        self.module = module
        for name, fallback in _STANDARD_FALLBACKS.items():
            if not hasattr(module, name):
                setattr(self, name, fallback)
        for name, numpy_name in _STANDARD_ALIASES.items():
            if not hasattr(module, name) and hasattr(module, numpy_name):
                setattr(self, name, getattr(module, numpy_name))

    def __getattr__(self, name: str) -> Any:
        value = getattr(self.module, name)
        setattr(self, name, value)  # later lookups find it without __getattr__
        return value

    def __repr__(self) -> str:
        return f"<array namespace of {self.module!r}>"


def cupy_namespace(module: Any = None) -> CupyNamespace:
    """The namespace of CuPy ``module`` (default: the one in use), one per module."""
    module = cupy_module() if module is None else module
    ns = _NAMESPACES.get(id(module))
    if ns is None or ns.module is not module:
        ns = CupyNamespace(module)
        # Keyed by id: the namespace holds the module, so the id is not reused while the
        # entry lives; the entry goes when no kernel holds the namespace any more.
        _NAMESPACES[id(module)] = ns
    return ns


def _current_namespace(backend: Backend) -> CupyNamespace:
    return cupy_namespace()


def _erf(x: Any) -> Any:
    """erf from the ``cupyx.scipy.special`` of the CuPy in use (the library's Gelu)."""
    return importlib.import_module("cupyx.scipy.special").erf(x)


def _einsum(equation: str, *operands: Any) -> Any:
    """``cupy.einsum`` of the CuPy in use (the library's Einsum)."""
    return cupy_module().einsum(equation, *operands)


def _bitcast(x: Any, dtype: np.dtype[Any]) -> Any:
    """``x``'s bytes viewed as ``dtype`` on the device (the library's BitCast; CuPy's
    arrays are little-endian)."""
    return x.view(dtype)


@record(frozen=True, eq=False)
class CupyBackend(Backend):
    """The operator library's backend on the GPU: CuPy, whose ``xp`` is resolved when it is
    read, so a library kernel, which reads it once when built, keeps the CuPy current at
    its creation (the real module, or the simulated one a test installed), as
    :class:`GpuKernel` does."""

    # A property as the field's class-level default: init=False keeps it out of __init__,
    # so reading ``xp`` calls it.
    xp: Any = field(init=False, repr=False, default=property(_current_namespace))


#: What the library's operators compute with on the GPU (bound in ``kernels/__init__``):
#: CuPy, the element types it holds, and cupyx's ``erf``, ``cupy.einsum`` and a byte view.
BACKEND = CupyBackend("cupy", TENSORS, {"erf": _erf, "einsum": _einsum, "bitcast": _bitcast})


def _registry() -> Any:
    from . import registry  # the package's registry (defined before its modules import this)

    return registry


def register_host(op: str, since: Any, host: tuple[int, ...] = (), types: Any = None) -> Any:
    """Register a kernel whose inputs at positions ``host`` are read on the host: declared
    as the registry's ``host_inputs``, so the plan keeps them in host memory."""

    def decorator(cls: Any) -> Any:
        if host:
            cls.host_inputs = host
        return _registry().register(op, since=since, types={"T": TENSORS} if types is None else types,
                                    host_inputs=host)(cls)

    return decorator


class HostInputs(GpuKernel):
    """A kernel whose steering inputs (positions in ``host_inputs``) are read on the host:
    once at creation when they are constants, else as the plan hands them over (host
    memory, as registered; a device array is copied back)."""

    host_inputs: tuple[int, ...] = ()

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.consts: dict[int, np.ndarray] = {}
        for i in self.host_inputs:
            c = info.constant(i)
            if c is not None:
                self.consts[i] = np.asarray(c)

    def host(self, i: int, value: Any) -> np.ndarray | None:
        """Input ``i`` on the host (its constant, or the runtime value), ``None`` if absent."""
        c = self.consts.get(i)
        if c is not None:
            return c
        if value is None:
            return None
        return host_array(value)
