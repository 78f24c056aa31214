"""Kernels and the kernel registry: how registry-style providers say which nodes they run.

A provider such as CPU or CUDA keeps a :class:`KernelRegistry`. Each kernel class is
registered once per ONNX *since_version* it implements::

    registry = KernelRegistry("CPUExecutionProvider")

    @registry.register("Relu", since=(6, 13, 14), types={"T": FLOAT_TYPES})
    class Relu(Kernel):
        def compute(self, x):
            return (np.maximum(x, 0),)

The model's opset picks the version: ``onnx.defs.get_schema(op, max_inclusive_version=
opset, domain=...)`` gives the since_version in force, and only a kernel registered for
exactly that version runs the node. A kernel object is built once per node when the
session is created (attributes parsed, constant inputs prepacked) and its ``compute`` is
called on every run with the node's input values, returning a tuple of outputs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import field
from typing import Any

import numpy as np
import onnx
import onnx.defs
from onnx import numpy_helper

from .dtypes import np_dtype
from .errors import InvalidGraph
from .kernel_index import note_definition
from .records import record

__all__ = [
    "ValueType",
    "KernelInfo",
    "Kernel",
    "KernelDef",
    "KernelRegistry",
    "SubgraphRunner",
    "parse_attribute",
    "schema_since_version",
    "find_schema",
    "declare_signature",
    "has_signature",
]


@record(frozen=True)
class ValueType:
    """What is known statically about a value: its kind, element type and shape.

    ``shape`` holds ints for fixed dims, strings for symbolic dims and ``None`` for
    unknown dims; ``shape is None`` means even the rank is unknown.
    """

    kind: str = "tensor"  # tensor | sequence | map | optional | sparse_tensor | unknown
    elem_type: int | None = None
    shape: tuple[int | str | None, ...] | None = None

    @property
    def dtype(self) -> np.dtype[Any] | None:
        """The numpy dtype of a tensor value, when its element type is known."""
        if self.kind != "tensor" or not self.elem_type:
            return None
        try:
            return np_dtype(self.elem_type)
        except TypeError:
            return None

    @property
    def static_size(self) -> int | None:
        """Number of elements when every dim is a known int, else ``None``."""
        if self.shape is None or any(not isinstance(d, int) for d in self.shape):
            return None
        return int(np.prod(self.shape, dtype=np.int64))  # type: ignore[arg-type]

    @classmethod
    def from_proto(cls, type_proto: onnx.TypeProto) -> ValueType:
        """Read a ``TypeProto`` (from a graph input, output or value_info)."""
        which = type_proto.WhichOneof("value")
        if which == "tensor_type":
            tt = type_proto.tensor_type
            shape: tuple[int | str | None, ...] | None = None
            if tt.HasField("shape"):
                dims: list[int | str | None] = []
                for d in tt.shape.dim:
                    if d.HasField("dim_value"):
                        dims.append(int(d.dim_value))
                    elif d.HasField("dim_param"):
                        dims.append(d.dim_param)
                    else:
                        dims.append(None)
                shape = tuple(dims)
            return cls("tensor", tt.elem_type or None, shape)
        if which == "sequence_type":
            return cls("sequence")
        if which == "map_type":
            return cls("map")
        if which == "optional_type":
            return cls("optional")
        if which == "sparse_tensor_type":
            return cls("sparse_tensor", type_proto.sparse_tensor_type.elem_type or None)
        return cls("unknown")


class SubgraphRunner:
    """Runs a control-flow body (If branch, Loop/Scan body) with the session's providers.

    The core builds one per graph attribute when a control-flow kernel asks for it through
    :meth:`KernelInfo.subgraph`. ``run`` takes the body's formal inputs in order plus the
    outer-scope values it reads, and returns the body's outputs in order.
    """

    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    outer_names: tuple[str, ...] = ()

    def run(self, inputs: Sequence[Any], outer: Mapping[str, Any]) -> list[Any]:
        """Execute the body once."""
        raise NotImplementedError


def parse_attribute(attr: onnx.AttributeProto) -> Any:
    """Turn an ``AttributeProto`` into a plain Python value.

    Strings become ``str`` (decoded as UTF-8), tensors become numpy arrays, graphs stay
    ``GraphProto`` (control-flow kernels build runners from them), lists become lists.
    """
    t = attr.type
    A = onnx.AttributeProto
    if t == A.FLOAT:
        return float(attr.f)
    if t == A.INT:
        return int(attr.i)
    if t == A.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if t == A.TENSOR:
        return numpy_helper.to_array(attr.t)
    if t == A.GRAPH:
        return attr.g
    if t == A.FLOATS:
        return [float(v) for v in attr.floats]
    if t == A.INTS:
        return [int(v) for v in attr.ints]
    if t == A.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if t == A.TENSORS:
        return [numpy_helper.to_array(v) for v in attr.tensors]
    if t == A.GRAPHS:
        return list(attr.graphs)
    if t == A.SPARSE_TENSOR:
        return attr.sparse_tensor
    if t == A.TYPE_PROTO:
        return attr.tp
    if t == A.TYPE_PROTOS:
        return list(attr.type_protos)
    return onnx.helper.get_attribute_value(attr)


@record(frozen=True)
class KernelInfo:
    """Everything a kernel may read about its node when it is built.

    ``attributes`` holds parsed values (see :func:`parse_attribute`); absent optional
    inputs have the name ``""``; ``constant_inputs`` maps input positions to the values of
    initializers and constants so a kernel can prepack weights once.
    """

    node_name: str
    op_type: str
    domain: str = ""
    since_version: int = 1
    opset: int = 1
    attributes: Mapping[str, Any] = field(default_factory=dict)
    input_names: tuple[str, ...] = ()
    output_names: tuple[str, ...] = ()
    input_types: tuple[ValueType | None, ...] = ()
    output_types: tuple[ValueType | None, ...] = ()
    constant_inputs: Mapping[int, Any] = field(default_factory=dict)
    #: Names read from the enclosing graph by this node's subgraphs; the executor passes
    #: their values after the explicit inputs, in this order.
    implicit_inputs: tuple[str, ...] = ()
    #: Set by the core: builds a :class:`SubgraphRunner` for a graph attribute.
    subgraph_builder: Callable[[onnx.GraphProto], SubgraphRunner] | None = None
    #: Provider options in effect (effective, validated) for the kernel's provider.
    provider_options: Mapping[str, Any] = field(default_factory=dict)

    def attr(self, name: str, default: Any = None) -> Any:
        """The parsed attribute ``name``, or ``default`` when the node does not set it."""
        return self.attributes.get(name, default)

    def constant(self, index: int) -> Any:
        """The constant value of input ``index`` (an initializer), or ``None``."""
        return self.constant_inputs.get(index)

    def has_input(self, index: int) -> bool:
        """Whether optional input ``index`` is present."""
        return index < len(self.input_names) and self.input_names[index] != ""

    def subgraph(self, attr_name: str) -> SubgraphRunner:
        """A runner for the graph attribute ``attr_name`` (If/Loop/Scan bodies)."""
        if self.subgraph_builder is None:
            raise InvalidGraph(f"node {self.node_name!r}: subgraphs are not available here")
        return self.subgraph_builder(self.attributes[attr_name])

    @classmethod
    def from_node(
        cls,
        node: onnx.NodeProto,
        opset: int,
        *,
        since_version: int | None = None,
        constants: Mapping[int, Any] | None = None,
        input_types: Sequence[ValueType | None] = (),
        output_types: Sequence[ValueType | None] = (),
        **extra: Any,
    ) -> KernelInfo:
        """Build the info for ``node`` under ``opset`` (mainly for tests and tools)."""
        if since_version is None:
            since_version = schema_since_version(node.domain, node.op_type, opset) or opset
        return cls(
            node_name=node.name,
            op_type=node.op_type,
            domain=node.domain,
            since_version=since_version,
            opset=opset,
            attributes={a.name: parse_attribute(a) for a in node.attribute},
            input_names=tuple(node.input),
            output_names=tuple(node.output),
            input_types=tuple(input_types),
            output_types=tuple(output_types),
            constant_inputs=dict(constants or {}),
            **extra,
        )


class Kernel:
    """A node's computation, built once per node and called on every run.

    Subclasses parse attributes and prepack constant inputs in ``__init__`` and implement
    :meth:`compute`. Inputs arrive in the provider's memory (numpy arrays on CPU); absent
    optional inputs are ``None``.
    """

    #: Optional: a callable taking what :meth:`compute` takes and returning the node's one
    #: output itself, not in a tuple — typically a numpy ufunc. Small plans' straight-line
    #: runner (:mod:`onyxrt.straight_line`) calls it instead of ``compute``: one Python
    #: frame and a tuple less per node, a third to two thirds of a 64-float elementwise
    #: node's time. It must return exactly what ``compute`` returns first, for every input
    #: a run can pass; it runs only inside a run (floating-point errors ignored).
    single_output: Callable[..., Any] | None = None

    def __init__(self, info: KernelInfo) -> None:
        self.info = info

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        """Compute the node's outputs from its inputs; return one value per output."""
        raise NotImplementedError(f"{type(self).__name__}.compute")


KernelFactory = Callable[[KernelInfo], Kernel]


@record(frozen=True)
class KernelDef:
    """One registered kernel: the op version it implements and its type constraints."""

    domain: str
    op_type: str
    since_version: int
    factory: KernelFactory
    #: Type-constraint name ("T", "T1", ...) → the dtypes this kernel accepts for it.
    #: Constraints not listed accept every type the ONNX schema allows.
    types: Mapping[str, frozenset[np.dtype[Any]]] = field(default_factory=dict)
    #: Input positions the kernel reads from host memory even on a device (shapes, axes,
    #: indices it needs as Python numbers): the plan keeps those inputs on the host.
    host_inputs: frozenset[int] = frozenset()

    def unsupported_type(
        self, input_types: Sequence[ValueType | None], output_types: Sequence[ValueType | None]
    ) -> str | None:
        """Why this kernel cannot take these (statically known) types, or ``None``."""
        if not self.types:
            return None
        in_params, out_params = _formal_type_params(self.domain, self.op_type, self.since_version)
        for values, params in ((input_types, in_params), (output_types, out_params)):
            for i, vt in enumerate(values):
                if vt is None or not params:
                    continue
                param = params[min(i, len(params) - 1)]
                allowed = self.types.get(param)
                dt = vt.dtype
                if allowed is not None and dt is not None and dt not in allowed:
                    return f"dtype {dt} for type constraint {param} is not supported"
        return None

    def unsupported_node(self, graph: Any, node: Any) -> str:
        """Why this kernel cannot run this particular node (an attribute value, a constant
        input it does not handle), or ``""``: the kernel class's optional
        ``refuse_node(graph, node)`` classmethod, asked at capability time so that such a
        node goes to another provider instead of failing when it runs."""
        refuse = getattr(self.factory, "refuse_node", None)
        return str(refuse(graph, node) or "") if refuse is not None else ""


def find_schema(domain: str, op_type: str, max_version: int) -> onnx.defs.OpSchema | None:
    """onnx's schema of ``op_type`` in force at ``max_version``, or None where onnx has
    none (a com.microsoft operator) or none at or below that version. onnx is asked whether
    it knows the operator first: a SchemaError costs ~0.2 ms, ~17 ms of a provider's
    creation over the contrib operators."""
    if not onnx.defs.has(op_type, domain):
        return None
    try:
        return onnx.defs.get_schema(op_type, max_inclusive_version=max_version, domain=domain)
    except onnx.defs.SchemaError:
        return None


@functools.lru_cache(maxsize=4096)
def schema_since_version(domain: str, op_type: str, opset: int) -> int | None:
    """The since_version of ``op_type`` in force at ``opset``, from onnx's schemas."""
    schema = find_schema(domain, op_type, opset)
    return None if schema is None else int(schema.since_version)


#: Type-constraint names of the inputs and outputs of operators onnx has no schema for
#: (com.microsoft, com.microsoft.nchwc...), keyed by (domain, op_type), as
#: :func:`declare_signature` recorded them.
_SIGNATURES: dict[tuple[str, str], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def declare_signature(domain: str, op_type: str, inputs: Sequence[str], outputs: Sequence[str]) -> None:
    """Record the type-constraint name of each input and output of an operator onnx has no
    schema for (``("T", "T", "M")``, ``("T",)``; a variadic last input repeats its name),
    so kernels' type constraints are checked for its nodes as for onnx's operators — a
    provider whose arrays cannot hold a node's dtype refuses it at capability time."""
    domain = "" if domain == "ai.onnx" else domain
    _SIGNATURES[(domain, op_type)] = (tuple(inputs), tuple(outputs))
    _formal_type_params.cache_clear()


def has_signature(domain: str, op_type: str) -> bool:
    """Whether :func:`declare_signature` declared ``op_type`` (an operator onnx has no
    schema for, which an installed operator library defines)."""
    return ("" if domain == "ai.onnx" else domain, op_type) in _SIGNATURES


@functools.lru_cache(maxsize=4096)
def _formal_type_params(
    domain: str, op_type: str, since: int
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    schema = find_schema(domain, op_type, since)
    if schema is None:
        return _SIGNATURES.get((domain, op_type), ((), ()))
    return (
        tuple(p.type_str for p in schema.inputs),
        tuple(p.type_str for p in schema.outputs),
    )


class KernelRegistry:
    """Kernels of one provider, keyed by (domain, op_type, since_version).

    Registering the same key twice is an error, so two modules cannot silently shadow
    each other.
    """

    def __init__(self, provider_name: str) -> None:
        self.provider_name = provider_name
        self._defs: dict[tuple[str, str, int], KernelDef] = {}
        self._versions: dict[tuple[str, str], list[int]] = {}
        self._refused: dict[tuple[str, str], str] = {}
        # On-demand loading (see load_on_demand): the loaders, the operators already
        # loaded, and whether everything is; the lock makes one thread load an operator
        # (twice would register its kernels twice), the flag lets that thread's loader
        # read the registry without loading again.
        self._loaders: tuple[Callable[[str, str], None], Callable[[], None]] | None = None
        self._loaded: set[tuple[str, str]] = set()
        self._loaded_all = False
        self._load_lock = threading.RLock()
        self._loading = False

    def load_on_demand(self, load_op: Callable[[str, str], None], load_all: Callable[[], None]) -> None:
        """Register kernels when they are first asked for instead of all up front.

        ``load_op(domain, op_type)`` registers every kernel of that operator (importing the
        modules that define them); ``load_all()`` registers every kernel. :meth:`lookup`
        and ``in`` load the operator they ask about, once; :meth:`definitions`,
        :meth:`op_types` and ``len`` load everything. A provider with hundreds of kernels
        thus imports only the modules of the operators its sessions' models use (the CPU
        provider: ~40 ms less of a small model's session creation).
        """
        self._loaders = (load_op, load_all)

    def _load(self, domain: str, op_type: str) -> None:
        if self._loaders is None or self._loaded_all or (domain, op_type) in self._loaded:
            return
        with self._load_lock:
            if self._loading or (domain, op_type) in self._loaded:
                return
            self._loading = True
            try:
                self._loaders[0](domain, op_type)
                self._loaded.add((domain, op_type))
            finally:
                self._loading = False

    def _load_everything(self) -> None:
        if self._loaders is None or self._loaded_all:
            return
        with self._load_lock:
            if self._loading or self._loaded_all:
                return
            self._loading = True
            try:
                self._loaders[1]()
                self._loaded_all = True
            finally:
                self._loading = False

    def register(
        self,
        op_type: str,
        since: int | Iterable[int],
        *,
        domain: str = "",
        types: Mapping[str, Iterable[Any]] | None = None,
        host_inputs: Iterable[int] = (),
    ) -> Callable[[KernelFactory], KernelFactory]:
        """Class decorator: register a kernel for each since_version in ``since``.

        ``types`` restricts type constraints (``{"T": FLOAT_TYPES}``); values are numpy
        dtypes. ``host_inputs`` lists input positions a device kernel wants in host memory
        (a Reshape's shape, a Slice's starts). ``domain`` "" and "ai.onnx" are the same
        default domain.
        """
        versions = (since,) if isinstance(since, int) else tuple(since)
        domain = "" if domain == "ai.onnx" else domain
        norm_types = {k: frozenset(np.dtype(t) for t in v) for k, v in (types or {}).items()}

        def decorator(factory: KernelFactory) -> KernelFactory:
            note_definition(domain, op_type)
            for v in versions:
                key = (domain, op_type, int(v))
                if key in self._defs:
                    raise ValueError(
                        f"{self.provider_name}: kernel for {domain or 'ai.onnx'}::{op_type} "
                        f"version {v} is registered twice ({self._defs[key].factory!r} and "
                        f"{factory!r})"
                    )
                self._defs[key] = KernelDef(
                    domain, op_type, int(v), factory, norm_types, frozenset(host_inputs)
                )
                self._versions.setdefault((domain, op_type), []).append(int(v))
                self._versions[(domain, op_type)].sort()
            return factory

        return decorator

    def refuse(self, op_type: str, reason: str, *, domain: str = "") -> None:
        """Record why this provider has no kernel for ``op_type`` (its array library lacks
        a function the operator needs): :meth:`lookup` gives that reason for its nodes
        instead of a bare "no kernel"."""
        domain = "" if domain == "ai.onnx" else domain
        self._refused[(domain, op_type)] = reason

    def definitions(self) -> list[KernelDef]:
        """Every registered kernel, sorted by domain, op and version."""
        self._load_everything()
        return [self._defs[k] for k in sorted(self._defs)]

    def op_types(self, domain: str = "") -> set[str]:
        """Operator names this registry knows in ``domain``."""
        self._load_everything()
        return {op for (d, op) in self._versions if d == domain}

    def lookup(self, domain: str, op_type: str, opset: int) -> tuple[KernelDef | None, str]:
        """The kernel that runs ``op_type`` under ``opset``, or ``(None, reason)``."""
        domain = "" if domain == "ai.onnx" else domain
        self._load(domain, op_type)
        versions = self._versions.get((domain, op_type))
        if not versions:
            refused = self._refused.get((domain, op_type))
            if refused is not None:
                return None, f"no {self.provider_name} kernel for {domain or 'ai.onnx'}::{op_type}: {refused}"
            return None, f"no {self.provider_name} kernel for {domain or 'ai.onnx'}::{op_type}"
        since = schema_since_version(domain, op_type, opset)
        if since is None:
            # Not an onnx-defined op (a custom domain): take the newest version <= opset.
            eligible = [v for v in versions if v <= opset]
            if not eligible:
                return None, f"{op_type}: no kernel version <= opset {opset}"
            since = eligible[-1]
        kdef = self._defs.get((domain, op_type, since))
        if kdef is None:
            return None, (
                f"{op_type} version {since} (opset {opset}) is not implemented; "
                f"kernels exist for versions {versions}"
            )
        return kdef, ""

    def __len__(self) -> int:
        self._load_everything()
        return len(self._defs)

    def __contains__(self, key: object) -> bool:
        """Whether a kernel is registered for ``(domain, op_type, since_version)``."""
        if isinstance(key, tuple) and len(key) == 3:
            self._load(key[0], key[1])
        return key in self._defs
