"""The NPU compiler: one fused group in, one :class:`~onyxrt_simnpu.program.Program` out.

Compilation is a straight pipeline over the group's nodes, already in topological order:

1. **check** each node again with :data:`~onyxrt_simnpu.ops.NPU_OPS` (capability ran the
   same check; doing it here means a program can never hold an op the device refuses);
2. **lower** it into one opset-independent instruction with JSON attributes;
3. **prepack** constant inputs the op wants in another layout;
4. **bake** the constants the schedule reads into storage precision (float16 unless
   ``fp32``; integer constants keep their dtype), read-only;
5. **cost** each instruction from the static shapes (MACs and bytes moved).

:func:`cache_key` names the result for the on-disk cache: a sha256 over everything that
can change the program (the subgraph's content, the value types, the constant bytes, the
compile-relevant options and the provider version), and nothing that cannot (node names,
the group's name). :func:`program_mismatch` checks a program loaded from the cache
against the group it is loaded for (its signature, not its weights: the cache
authenticates those).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from onyxrt.graph import Graph
from onyxrt.kernels import ValueType
from onyxrt.protocol import FusedSubgraph

from .ops import NPU_OPS, check_node, check_precision, storage_dtype, to_storage
from .program import FORMAT_VERSION, Instruction, Program, io_type

__all__ = ["CompileError", "compile_group", "cache_key", "program_mismatch", "COMPILE_OPTIONS"]

#: The provider options that change what :func:`compile_group` produces or how its
#: cost is reported; they are part of :func:`cache_key`.
COMPILE_OPTIONS: tuple[str, ...] = ("precision", "tops", "bandwidth_gbps")


class CompileError(ValueError):
    """A group holds a node the NPU cannot run, or is otherwise not compilable."""


def compile_group(group: FusedSubgraph, precision: str) -> Program:
    """Compile ``group`` into a program that runs at ``precision``.

    The program's ``inputs`` are ``group.runtime_inputs`` (in that order) and its
    ``outputs`` are ``group.outputs``; constant inputs are baked into
    ``Program.constants``. Raises :class:`CompileError` naming the first node the NPU
    refuses.
    """
    check_precision(precision)
    graph = group.graph
    originals = group.constant_inputs()  # original precision, for prepacking
    runtime = list(group.runtime_inputs)
    constants: dict[str, np.ndarray] = {}
    instructions: list[Instruction] = []
    for node in group.nodes:
        reason, category = check_node(node, graph, precision)
        if reason:
            raise CompileError(
                f"{group.name}: node {node.name!r} ({node.qualified_op}) cannot run on the NPU "
                f"[{category}]: {reason}"
            )
        op = NPU_OPS[node.op_type]
        inputs, attrs = op.lower(node, graph)
        packed, attrs = op.prepack(inputs, attrs, originals)
        # Bake every constant the instruction reads (packed ones get a fresh name).
        names: list[str] = []
        for i, item in enumerate(packed):
            if isinstance(item, np.ndarray):
                name = _fresh_name(f"{node.name}/packed{i}", graph, constants)
                constants[name] = _bake(item, precision)
            else:
                name = item
                if name in originals and name not in constants:
                    constants[name] = _bake(originals[name], precision)
            names.append(name)
        # Cost from static shapes and storage itemsizes (inputs, then outputs).
        operands = [_operand(graph, n, constants, precision) for n in names]
        results = [_operand(graph, n, constants, precision) for n in node.outputs if n]
        macs, moved = op.cost(
            [shape for shape, _ in operands],
            [shape for shape, _ in results if shape is not None],
            attrs,
            [size for _, size in [*operands, *results]],
        )
        instructions.append(
            Instruction(node.op_type, names, list(node.outputs), _json_attrs(attrs, node.name), macs, moved)
        )
    io_types = {}
    for name in [*runtime, *group.outputs]:
        shape, _ = _operand(graph, name, constants, precision)
        vt = graph.value_type(name)
        assert vt is not None and vt.dtype is not None and shape is not None
        io_types[name] = io_type(vt.dtype, shape, precision)
    program = Program(
        name=group.name,
        inputs=runtime,
        outputs=list(group.outputs),
        instructions=instructions,
        constants=constants,
        precision=precision,
        io_types=io_types,
    )
    try:
        program.validate()
    except ValueError as exc:
        raise CompileError(f"{group.name}: {exc}") from None
    return program


def _operand(
    graph: Graph, name: str, constants: Mapping[str, np.ndarray], precision: str
) -> tuple[tuple[int, ...] | None, int]:
    """(static shape, storage itemsize) of a buffer; ``(None, 0)`` for an absent input."""
    if not name:
        return None, 0
    if name in constants:
        return tuple(constants[name].shape), constants[name].itemsize
    vt = graph.value_type(name)
    if vt is None or vt.shape is None or vt.dtype is None:
        raise CompileError(f"value {name!r} has no static type")
    return tuple(int(d) for d in vt.shape), storage_dtype(vt.dtype, precision).itemsize  # type: ignore[arg-type]


def _fresh_name(base: str, graph: Graph, taken: Mapping[str, Any]) -> str:
    name, n = base, 1
    while name in taken or name in graph.value_types or name in graph.initializers:
        n += 1
        name = f"{base}.{n}"
    return name


def _bake(value: Any, precision: str) -> np.ndarray:
    """``value`` in storage precision, as a read-only buffer the program owns: baked
    weights never change after compilation, and the graph's own arrays are left alone."""
    src = np.asarray(value)
    arr = to_storage(src, precision)
    if arr is src or not arr.flags.owndata or not arr.flags.c_contiguous:
        arr = np.array(arr, order="C", copy=True)
    arr.setflags(write=False)
    return arr


def _json_attrs(attrs: Mapping[str, Any], node: str) -> dict[str, Any]:
    """``attrs`` as plain JSON values; a lowering that leaks numpy values is a bug."""
    try:
        return json.loads(json.dumps(attrs))
    except TypeError as exc:
        raise CompileError(f"node {node!r}: lowered attributes are not plain JSON: {exc}") from None


def program_mismatch(program: Program, group: FusedSubgraph, precision: str) -> str | None:
    """Why ``program`` cannot be what :func:`compile_group` builds for ``group`` at
    ``precision``, or ``None`` when its signature fits: the precision, the outputs (in
    order), inputs drawn from the group's runtime inputs, and the storage dtype and static
    shape of each of them. A loaded program that passes can be run by the group's kernel
    without a shape or dtype error; one that fails is recompiled."""
    if program.precision != precision:
        return f"precision {program.precision!r}, expected {precision!r}"
    if list(program.outputs) != list(group.outputs):
        return f"outputs {list(program.outputs)}, expected {list(group.outputs)}"
    runtime = set(group.runtime_inputs)
    if len(set(program.inputs)) != len(program.inputs) or not runtime.issuperset(program.inputs):
        return f"inputs {list(program.inputs)} are not among {list(group.runtime_inputs)}"
    for name in [*program.inputs, *program.outputs]:
        expected = _static_io_type(group.graph, name, precision)
        if expected is None:
            return f"value {name!r} has no static type in the graph"
        if program.io_types.get(name) != expected:
            return f"value {name!r} is {program.io_types.get(name)}, expected {expected}"
    return None


def _static_io_type(graph: Graph, name: str, precision: str) -> tuple[str, tuple[int, ...]] | None:
    vt = graph.value_type(name)
    if vt is None or vt.dtype is None or vt.shape is None:
        return None
    dims = [d for d in vt.shape if isinstance(d, int)]
    return io_type(vt.dtype, dims, precision) if len(dims) == len(vt.shape) else None


# -- cache keys -------------------------------------------------------------------------
def cache_key(group: FusedSubgraph, options: Mapping[str, Any], provider_version: str) -> str:
    """sha256 (hex) naming the program ``compile_group`` would build for ``group``.

    Covers: every node's op, domain, attributes, inputs and outputs (in order); the
    value types of everything the group reads or writes; the model's opsets; the bytes,
    dtype and shape of each constant input; the :data:`COMPILE_OPTIONS` in ``options``;
    the provider version and this package's program format version.
    """
    graph = group.graph
    values = dict.fromkeys(
        [*group.inputs, *(n for node in group.nodes for n in [*node.inputs, *node.outputs] if n)]
    )
    document = {
        "format": FORMAT_VERSION,
        "provider_version": str(provider_version),
        "options": {k: _canonical_option(options.get(k)) for k in COMPILE_OPTIONS},
        "opsets": sorted([str(k), int(v)] for k, v in graph.opsets.items()),
        "inputs": list(group.inputs),
        "outputs": list(group.outputs),
        "nodes": [
            {
                "op": node.op_type,
                "domain": node.domain,
                "attrs": {k: _canonical(v) for k, v in sorted(node.attributes.items())},
                "inputs": list(node.inputs),
                "outputs": list(node.outputs),
            }
            for node in group.nodes
        ],
        "types": {name: _canonical_type(graph.value_type(name)) for name in values},
        "constants": [_canonical_constant(name, value) for name, value in group.constant_inputs().items()],
    }
    text = json.dumps(document, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _canonical_constant(name: str, value: Any) -> list[Any]:
    arr = np.ascontiguousarray(value)
    return [name, arr.dtype.str, list(arr.shape), hashlib.sha256(arr.tobytes()).hexdigest()]


def _canonical_option(value: Any) -> Any:
    # 10 and 10.0 (or "10" parsed upstream) must give the same key.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value if value is None or isinstance(value, (str, bool)) else str(value)


def _canonical_type(vt: ValueType | None) -> Any:
    if vt is None:
        return None
    return [vt.kind, vt.elem_type, None if vt.shape is None else [d for d in vt.shape]]


def _canonical(value: Any) -> Any:
    """A deterministic JSON form of a parsed attribute value."""
    if isinstance(value, np.ndarray):
        arr = np.ascontiguousarray(value)
        return {"ndarray": [arr.dtype.str, list(arr.shape), hashlib.sha256(arr.tobytes()).hexdigest()]}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    serialize = getattr(value, "SerializeToString", None)
    if serialize is not None:  # GraphProto, TypeProto, SparseTensorProto
        return {"proto": hashlib.sha256(serialize(deterministic=True)).hexdigest()}
    return {"repr": repr(value)}
