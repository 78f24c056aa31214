"""The operator library: each ONNX operator defined once, bound to a provider's backend.

An operator is a :class:`OpKernel` subclass — attribute parsing and validation in
``__init__`` (typed errors naming the node), the computation in ``compute`` written
against ``self.xp`` — registered once with :meth:`OpLibrary.define`, with the ONNX
versions it implements, the element types it takes per type constraint, and the functions
beyond the array API standard it needs (``needs=("erf",)``).

A provider turns the library into kernels with :meth:`OpLibrary.bind`: every operator
becomes a kernel class over the provider's :class:`~onyxrt_ops.backend.Backend`,
registered in the provider's :class:`~onyxrt.kernels.KernelRegistry` with its type
constraints narrowed to what the backend holds — so a node with a dtype the backend cannot
hold, or an operator needing a function it lacks, is refused at capability time with that
reason, never at run time. A provider's own kernel for an (operator, version) — a compiled
or fused fast path — is registered first and wins: ``bind`` skips what the registry
already has. An override that is fast only for some inputs subclasses the library's
bound kernel (:meth:`OpLibrary.kernel`) and defers to it for the rest::

    registry = KernelRegistry("CPUExecutionProvider")
    backend = numpy_backend()

    @registry.register("Gelu", since=20)
    class Gelu(library.kernel("Gelu", 20, backend)):
        def compute(self, x):
            y = native_gelu(x)        # float32 only
            return (y,) if y is not None else super().compute(x)

    library.bind(backend, registry)   # every other operator
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

import numpy as np

from onyxrt.errors import InvalidGraph
from onyxrt.kernel_index import note_definition
from onyxrt.kernels import (
    Kernel,
    KernelDef,
    KernelInfo,
    KernelRegistry,
    declare_signature,
    find_schema,
)
from onyxrt.records import record

from .backend import Backend, to_host

__all__ = ["OpKernel", "OpDef", "OpLibrary", "library", "dtype_name"]

_HALF = frozenset({"float16", "bfloat16"})
_NAMES: dict[tuple[type, Any], str] = {}


def dtype_name(dtype: Any) -> str:
    """``dtype``'s name without its namespace (``"float16"``, ``"bfloat16"``), for any
    namespace's dtype objects. Cached: ``str()`` of a dtype costs microseconds, a sizeable
    part of a small activation (keyed with the dtype's class too: namespaces' dtypes may
    hash alike but must not be compared)."""
    key = (type(dtype), dtype)
    name = _NAMES.get(key)
    if name is None:
        name = _NAMES[key] = str(dtype).rsplit(".", 1)[-1]
    return name


class OpKernel(Kernel):
    """Base of the library's operators: ``self.xp`` is the namespace of the backend the
    kernel was bound to (:meth:`OpLibrary.bind`), ``self.backend`` the backend."""

    backend: ClassVar[Backend]

    def __init__(self, info: KernelInfo) -> None:
        super().__init__(info)
        self.xp = self.backend.xp

    def where(self) -> str:
        """``"Op node 'name'"``, for messages."""
        return f"{self.info.op_type} node {self.info.node_name!r}"

    def widen(self, x: Any) -> Any:
        """float16/bfloat16 → float32: half-precision inputs are computed in float32 and
        rounded once at the end (:meth:`narrow`), so no rounding error accumulates."""
        if dtype_name(x.dtype) in _HALF:
            return self.xp.astype(x, self.backend.dtype(np.float32))
        return x

    def int_attr(self, name: str, default: int) -> int:
        """Integer attribute ``name`` (``default`` when absent); InvalidGraph naming the node
        for any other type."""
        value = self.info.attr(name, default)
        if not isinstance(value, (int, np.integer)):
            raise InvalidGraph(f"{self.where()}: attribute {name!r} must be an int, got {value!r}")
        return int(value)

    def flag_attr(self, name: str, default: int) -> bool:
        """A 0/1 attribute (``keepdims``, ``onesided``...) as a bool; InvalidGraph naming the
        node for any other value."""
        value = self.int_attr(name, default)
        if value not in (0, 1):
            raise InvalidGraph(f"{self.where()}: attribute {name!r} must be 0 or 1, got {value}")
        return bool(value)

    def host(self, value: Any) -> np.ndarray:
        """A steering value (a shape, axes, slice bounds, pads) as a numpy array on the
        host. Providers keep such inputs in host memory when the operator is defined with
        ``host_inputs``; a device array is still accepted and copied back."""
        return to_host(value)

    def host_ints(self, value: Any) -> list[int]:
        """A 0-d/1-d integer steering value (host or device) as Python ints."""
        return [int(v) for v in to_host(value).reshape(-1)]

    def narrow(self, y: Any, like: Any) -> Any:
        """``y`` in ``like``'s dtype (the input's, after :meth:`widen`)."""
        return y if y.dtype == like.dtype else self.xp.astype(y, like.dtype)


@record(frozen=True)
class OpDef:
    """One operator of the library: what :meth:`OpLibrary.bind` registers."""

    op_type: str
    versions: tuple[int, ...]
    cls: type[OpKernel]
    domain: str = ""
    #: type constraint → element types taken (numpy dtypes); unlisted: every schema type.
    types: Mapping[str, frozenset[np.dtype[Any]]] | None = None
    #: functions beyond the array API standard the computation calls (``Backend.extras``).
    needs: tuple[str, ...] = ()
    host_inputs: tuple[int, ...] = ()
    #: for an operator onnx has no schema for: the type-constraint name of each input and
    #: output (see :func:`onyxrt.kernels.declare_signature`).
    signature: tuple[tuple[str, ...], tuple[str, ...]] | None = None


class OpLibrary:
    """The operators, each defined once (see the module docstring)."""

    def __init__(self) -> None:
        self._defs: list[OpDef] = []
        self._bound: dict[tuple[type[OpKernel], int], type[OpKernel]] = {}
        self._loaders: tuple[Callable[[str, str], None], Callable[[], None]] | None = None

    def load_on_demand(self, load_op: Callable[[str, str], None], load_all: Callable[[], None]) -> None:
        """Define operators when first asked for: ``load_op(domain, op_type)`` imports the
        modules defining that operator, ``load_all()`` every module (both idempotent).
        Asking about one operator (:meth:`definition`, :meth:`kernel`, :meth:`versions`,
        :meth:`op_definitions`, ``bind(..., only=...)``) loads it; :attr:`definitions`,
        :meth:`op_types` and a whole :meth:`bind` load everything."""
        self._loaders = (load_op, load_all)

    def _need(self, op_type: str, domain: str) -> None:
        if self._loaders is not None:
            self._loaders[0](domain, op_type)

    def _need_all(self) -> None:
        if self._loaders is not None:
            self._loaders[1]()

    def define(
        self,
        op_type: str,
        since: int | Iterable[int],
        *,
        domain: str = "",
        types: Mapping[str, Iterable[Any]] | None = None,
        needs: Iterable[str] = (),
        host_inputs: Iterable[int] = (),
        signature: tuple[Iterable[str], Iterable[str]] | None = None,
    ) -> Callable[[type[OpKernel]], type[OpKernel]]:
        """Class decorator: ``cls`` implements ``op_type`` at each version in ``since``.

        An operator onnx has no schema for (the com.microsoft domain) gives its
        ``signature`` — the type-constraint name of each input and of each output — and
        ``types`` for every constraint named there, so that its nodes' element types are
        checked and narrowed to what a backend holds as onnx's operators' are."""
        versions = (since,) if isinstance(since, int) else tuple(since)
        norm = None if types is None else {k: frozenset(np.dtype(t) for t in v) for k, v in types.items()}
        sig = None if signature is None else (tuple(signature[0]), tuple(signature[1]))
        if sig is not None:
            unlisted = sorted({*sig[0], *sig[1]} - set(norm or {}))
            if unlisted:
                raise ValueError(f"{domain}::{op_type}: give the types of constraints {unlisted}")
            declare_signature(domain, op_type, *sig)

        def decorator(cls: type[OpKernel]) -> type[OpKernel]:
            note_definition(domain, op_type)
            self._defs.append(OpDef(op_type, versions, cls, domain, norm, tuple(needs), tuple(host_inputs), sig))
            return cls

        return decorator

    @property
    def definitions(self) -> list[OpDef]:
        """Every operator definition, in registration order."""
        self._need_all()
        return list(self._defs)

    def op_types(self, domain: str = "") -> set[str]:
        """The operator types the library defines in ``domain``."""
        self._need_all()
        return {d.op_type for d in self._defs if d.domain == domain}

    def op_definitions(self, op_type: str, domain: str = "") -> list[OpDef]:
        """Every definition of ``op_type`` (one per group of versions it shares a class)."""
        self._need(op_type, domain)
        return [d for d in self._defs if d.op_type == op_type and d.domain == domain]

    def definition(self, op_type: str, since: int, domain: str = "") -> OpDef:
        """The definition of ``op_type`` at version ``since``; KeyError when there is none."""
        for d in self.op_definitions(op_type, domain):
            if since in d.versions:
                return d
        raise KeyError(f"the operator library has no {domain or 'ai.onnx'}::{op_type} version {since}")

    def kernel(self, op_type: str, since: int, backend: Backend, domain: str = "") -> type[OpKernel]:
        """The library's kernel class for ``op_type`` at version ``since``, bound to
        ``backend`` (to subclass in a provider's override)."""
        return self._bind_class(self.definition(op_type, since, domain).cls, backend)

    def versions(self, op_type: str, domain: str = "") -> tuple[int, ...]:
        """Every version of ``op_type`` the library defines, ascending."""
        return tuple(sorted(v for d in self.op_definitions(op_type, domain) for v in d.versions))

    def types(self, op_type: str, since: int, backend: Backend,
              domain: str = "") -> dict[str, frozenset[np.dtype[Any]]] | None:
        """The type constraints :meth:`bind` registers ``op_type`` at ``since`` with over
        ``backend`` (the schema's, narrowed to what the operator takes and the backend
        holds), or None when one is left empty: what a provider's override registers with
        to take exactly the library kernel's nodes."""
        return _narrowed(self.definition(op_type, since, domain), since, backend)

    def refusal(self, op_type: str, since: int, backend: Backend, input_types: Any, output_types: Any,
                domain: str = "") -> str:
        """Why the kernel :meth:`bind` registers for ``op_type`` at ``since`` over
        ``backend`` would refuse a node with these input and output ``ValueType`` s (an
        element type outside what the operator takes or the backend holds), or ``""``."""
        try:
            d = self.definition(op_type, since, domain)
        except KeyError as exc:
            return str(exc.args[0])
        types = _narrowed(d, since, backend)
        if types is None:
            return f"{backend.name} holds none of the element types {op_type} takes"
        kdef = KernelDef(domain, op_type, since, d.cls, types)
        return kdef.unsupported_type(list(input_types), list(output_types)) or ""

    def bind(self, backend: Backend, registry: KernelRegistry,
             only: tuple[str, str] | None = None) -> dict[str, str]:
        """Register every operator over ``backend`` in ``registry``, except the
        (operator, version) pairs the registry already has (the provider's overrides);
        with ``only=(domain, op_type)``, that operator alone (a registry loading its
        kernels on demand binds each operator when first asked for it).

        Returns the operators not offered, with the reason (a function the backend lacks,
        or no element type it can hold); the registry refuses their nodes.
        """
        missing: dict[str, str] = {}
        if only is None:
            self._need_all()
            defs = self._defs
        else:
            defs = self.op_definitions(only[1], only[0])
        for d in defs:
            lacks = backend.lacks(d.needs)
            if lacks:
                missing[d.op_type] = f"{backend.name} lacks {', '.join(lacks)}"
                if not any((d.domain, d.op_type, v) in registry for v in d.versions):
                    # The node is refused at capability time with this reason.
                    registry.refuse(d.op_type, missing[d.op_type], domain=d.domain)
                continue
            cls = self._bind_class(d.cls, backend)
            for version in d.versions:
                if (d.domain, d.op_type, version) in registry:
                    continue
                types = _narrowed(d, version, backend)
                if types is None:
                    missing[d.op_type] = f"{backend.name} holds none of the element types it takes"
                    continue
                registry.register(d.op_type, version, domain=d.domain, types=types,
                                  host_inputs=d.host_inputs)(cls)
        return missing

    def _bind_class(self, cls: type[OpKernel], backend: Backend) -> type[OpKernel]:
        key = (cls, id(backend))
        bound = self._bound.get(key)
        if bound is None:
            bound = type(cls.__name__, (cls,), {"backend": backend, "__module__": cls.__module__,
                                                "__doc__": cls.__doc__})
            self._bound[key] = bound
        return bound


def _narrowed(d: OpDef, version: int, backend: Backend) -> dict[str, frozenset[np.dtype[Any]]] | None:
    """``d``'s type constraints at ``version`` narrowed to what ``backend`` holds (every
    constraint of the schema, listed or not), or None when one is left with nothing."""
    schema = find_schema(d.domain, d.op_type, version)
    if schema is None:  # onnx has no schema for a com.microsoft operator: its declared types
        narrowed = {k: frozenset(v & backend.dtypes) for k, v in (d.types or {}).items()}
        return None if any(not v for v in narrowed.values()) else narrowed
    from onyxrt.dtypes import np_dtype

    result: dict[str, frozenset[np.dtype[Any]]] = {}
    for constraint in schema.type_constraints:
        allowed: set[np.dtype[Any]] = set()
        for text in constraint.allowed_type_strs:
            if text.startswith("tensor("):
                try:
                    allowed.add(np_dtype(_ELEM_TYPES[text[len("tensor("):-1]]))
                except (KeyError, TypeError):
                    pass
        declared = (d.types or {}).get(constraint.type_param_str)
        if declared is not None:
            allowed &= declared
        if not allowed and constraint.allowed_type_strs:
            if any(t.startswith("tensor(") for t in constraint.allowed_type_strs):
                return None
            continue  # sequences, maps: not an element-type constraint
        result[constraint.type_param_str] = frozenset(allowed & backend.dtypes)
        if not result[constraint.type_param_str]:
            return None
    return result


def _elem_types() -> dict[str, int]:
    from onnx import TensorProto

    names = {
        "float": TensorProto.FLOAT, "double": TensorProto.DOUBLE, "float16": TensorProto.FLOAT16,
        "bfloat16": TensorProto.BFLOAT16, "bool": TensorProto.BOOL, "string": TensorProto.STRING,
        "complex64": TensorProto.COMPLEX64, "complex128": TensorProto.COMPLEX128,
    }
    for bits in (8, 16, 32, 64):
        names[f"int{bits}"] = getattr(TensorProto, f"INT{bits}")
        names[f"uint{bits}"] = getattr(TensorProto, f"UINT{bits}")
    for name in ("float8e4m3fn", "float8e4m3fnuz", "float8e5m2", "float8e5m2fnuz", "uint4", "int4",
                 "float4e2m1", "float8e8m0", "uint2", "int2"):
        code = getattr(TensorProto, name.upper(), None)
        if code is not None:
            names[name] = code
    return names


_ELEM_TYPES = _elem_types()

#: The library every provider binds (operator modules register into it on import).
library = OpLibrary()
