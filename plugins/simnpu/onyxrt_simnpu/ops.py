"""The NPU's op set: which ONNX nodes the simulated hardware runs, and how it computes them.

A real NPU executes a fixed menu of operations, each with restrictions baked into silicon
or firmware: 2-D convolutions only, static shapes only, nearest-neighbour resize but not
linear, weights that must be known at compile time. A vendor's compiler encodes that menu
so that the runtime can ask, node by node, "can you run this?" and get an honest answer
with a reason. This module is that menu for the simulated NPU.

Each supported op is one small class deriving from :class:`NpuOp`, registered in
:data:`NPU_OPS` by ONNX op type. An op has five duties, used at different times:

``check(node, graph, precision)``
    Capability time. Returns ``("", "")`` if the NPU runs the node at ``precision``, else a
    human-readable reason and a category (``op``, ``dtype``, ``shape``, ``attribute``)
    that the placement report shows. The base class checks, in this order: the op itself
    (domain, opset), element types, static shapes; then the op's own attribute rules.
``lower(node, graph)``
    Compile time. Turns an ONNX node, whose meaning depends on the model's opset (Clip
    moved min/max from attributes to inputs at opset 11, Softmax stopped flattening at
    opset 13), into one opset-independent instruction: its input names and plain-JSON
    attributes with every default filled in. Parameters that are really configuration
    (Clip bounds, Resize scales) move from constant inputs into attributes here.
``prepack(inputs, attrs, constants)``
    Compile time, optional. Rewrites weights into the layout the kernel wants, once
    (Gemm's transposed B is stored transposed; BatchNormalization is folded into a
    per-channel scale and shift).
``run(inputs, attrs, precision)``
    Run time. The simulated hardware kernel: it receives *storage* arrays (see below)
    and the instruction's attributes, and returns storage arrays.
``cost(in_shapes, out_shapes, attrs)``
    Compile time. Multiply-accumulates and bytes moved, for the roofline cost model.

Precision: the numerics of the simulated hardware
-------------------------------------------------
The ``precision`` option picks how tensors are *stored* on the device and how the
arithmetic is done:

* ``fp32``: float tensors are stored as float32 and all math is float32.
* ``fp16`` (the default): float tensors are stored as float16. Matrix products,
  convolutions and reductions (Softmax, LayerNormalization, pools) accumulate in
  float32 and round the result to float16; elementwise ops compute in float32 and
  round. Results therefore differ from the CPU provider the way real NPUs' do.
* ``int8``: like ``fp16`` for float tensors; in addition QuantizeLinear and
  DequantizeLinear run on the NPU, with int8/uint8 storage for quantized tensors, so a
  QDQ model's quantized sections execute as the NPU would.

Integer tensors (Reshape's int64 shape, int8 quantized data) keep their dtype in every
mode. :func:`storage_dtype` and :func:`to_storage` implement that rule for the rest of
the package (the transfer into device memory uses them too).

Nothing here depends on the CPU provider or on ``onnx.reference``: these kernels are the
NPU's own, written for clarity over speed (numpy, float32 accumulation).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
from onnx import helper

from onyxrt.graph import Graph, Node
from onyxrt.kernels import KernelInfo, schema_since_version
from onyxrt.records import record
from onyxrt_ops import library, numpy_backend

__all__ = [
    "PRECISIONS",
    "FLOAT_DTYPES",
    "NPU_OPS",
    "NpuOp",
    "Param",
    "check_precision",
    "check_node",
    "storage_dtype",
    "to_storage",
]

#: The values of the ``precision`` option.
PRECISIONS: tuple[str, ...] = ("fp32", "fp16", "int8")
#: Float element types the NPU accepts at its boundary (stored per :func:`storage_dtype`).
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float16")
#: Quantized element types (``int8`` precision only).
QUANT_DTYPES: tuple[str, ...] = ("int8", "uint8")

_F32 = np.float32
_F16 = np.dtype(np.float16)
_F16_MAX = float(np.finfo(np.float16).max)


# -- precision and storage ------------------------------------------------------------
def check_precision(precision: str) -> str:
    """Return ``precision`` if it is one of :data:`PRECISIONS`; raise ``ValueError`` else."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown NPU precision {precision!r}; expected one of {PRECISIONS}")
    return precision


def storage_dtype(dtype: Any, precision: str) -> np.dtype[Any]:
    """The dtype a tensor of ``dtype`` has in NPU memory at ``precision``.

    Float tensors are float16 unless ``precision == "fp32"``; other dtypes are unchanged.
    """
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return np.dtype(np.float32 if precision == "fp32" else np.float16)
    return dt


def to_storage(array: Any, precision: str) -> np.ndarray:
    """``array`` converted to its storage dtype (no copy when it already has it).

    Conversion to float16 *saturates*: values beyond ±65504 (float32's most negative
    number in an attention mask, say) become ±65504 rather than ±inf, as NPU converters
    and float16 write-back units do, so ``0 * mask`` stays 0 instead of becoming NaN.
    """
    arr = np.asarray(array)
    target = storage_dtype(arr.dtype, precision)
    if target == arr.dtype:
        return arr
    if target == _F16 and arr.dtype.kind == "f" and arr.dtype.itemsize > 2:
        arr = np.clip(arr, -_F16_MAX, _F16_MAX)
    return arr.astype(target)


def _math(x: np.ndarray) -> np.ndarray:
    """Widen a storage array to the float32 the arithmetic units compute in."""
    return x.astype(_F32, copy=False)


def _store(y: np.ndarray, precision: str) -> np.ndarray:
    """Round a float32 result to the storage dtype, saturating (the write-back of an op)."""
    return to_storage(y, precision)


def _size(shape: Sequence[int] | None) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def _fmt_shape(shape: Sequence[Any] | None) -> str:
    if shape is None:
        return "(unknown rank)"
    return "(" + ", ".join("?" if d is None else str(d) for d in shape) + ")"


def _static_shape(graph: Graph, name: str) -> tuple[int, ...]:
    """The static shape of ``name``; only call after :meth:`NpuOp.check_shapes` passed."""
    vt = graph.value_type(name)
    assert vt is not None and vt.shape is not None
    return tuple(int(d) for d in vt.shape)  # type: ignore[arg-type]


def _rank(graph: Graph, name: str) -> int:
    return len(_static_shape(graph, name))


def _constant(graph: Graph, name: str) -> np.ndarray | None:
    """The value of an optional constant input; ``None`` if absent or empty."""
    if not name or not graph.is_constant(name):
        return None
    value = np.asarray(graph.initializers[name])
    return value if value.size else None


@record(frozen=True)
class Param:
    """A non-data input of an op: it must be a constant initializer of one of ``dtypes``.

    ``category`` is the refusal category when the input is computed at run time instead
    (a runtime Reshape shape is a ``shape`` problem, runtime Clip bounds an ``attribute``
    one).
    """

    role: str
    dtypes: tuple[str, ...]
    category: str = "attribute"


# -- the base class ---------------------------------------------------------------------
class NpuOp:
    """One operation of the NPU's instruction set. Subclasses set ``op_type`` and override
    the hooks they need; see the module docstring for when each runs."""

    op_type: ClassVar[str] = ""
    #: The oldest default-domain opset whose semantics this op implements.
    min_opset: ClassVar[int] = 1
    #: Non-data inputs by position (all other inputs are float data tensors).
    params: ClassVar[Mapping[int, Param]] = {}
    #: Multiply-accumulates charged per output element by the default :meth:`cost`.
    macs_per_element: ClassVar[int] = 1

    # -- capability ----------------------------------------------------------------
    def check(self, node: Node, graph: Graph, precision: str) -> tuple[str, str]:
        """``("", "")`` if the NPU runs ``node`` at ``precision``, else (reason, category)."""
        check_precision(precision)
        for step in (self.check_op, self.check_types, self.check_shapes, self.check_attributes):
            reason, category = step(node, graph, precision)
            if reason:
                return reason, category
        return "", ""

    def check_op(self, node: Node, graph: Graph, precision: str) -> tuple[str, str]:
        """The op in its domain and opset (category ``op``)."""
        if node.domain not in ("", "ai.onnx") or node.op_type != self.op_type:
            return f"{node.qualified_op} is not in the NPU op set", "op"
        opset = graph.opset("")
        if opset < self.min_opset:
            return (
                f"{self.op_type} at opset {opset} is not supported "
                f"(the NPU implements opset {self.min_opset} and later)",
                "op",
            )
        return "", ""

    def input_dtypes(self, index: int, node: Node, graph: Graph) -> tuple[str, ...]:
        """Element types accepted for data input ``index`` (float by default)."""
        return FLOAT_DTYPES

    def output_dtypes(self, index: int, node: Node, graph: Graph) -> tuple[str, ...]:
        """Element types accepted for output ``index`` (float by default)."""
        return FLOAT_DTYPES

    def check_types(self, node: Node, graph: Graph, precision: str) -> tuple[str, str]:
        """Element types of every input and output; constness of parameter inputs."""
        for i, name in enumerate(node.inputs):
            if not name:
                continue
            param = self.params.get(i)
            if param is not None:
                if not graph.is_constant(name):
                    what = "dynamic shape: " if param.category == "shape" else ""
                    return (
                        f"{what}the {param.role} input {name!r} of {self.op_type} is computed at "
                        "run time; the NPU needs it as a constant initializer",
                        param.category,
                    )
                allowed = param.dtypes
            else:
                allowed = self.input_dtypes(i, node, graph)
            problem = _dtype_problem(graph, name, allowed, "input")
            if problem:
                return problem, "dtype"
        for i, name in enumerate(node.outputs):
            if name:
                problem = _dtype_problem(graph, name, self.output_dtypes(i, node, graph), "output")
                if problem:
                    return problem, "dtype"
        return "", ""

    def check_shapes(self, node: Node, graph: Graph, precision: str) -> tuple[str, str]:
        """Every input and output must have a fully known static shape."""
        for name in [*node.inputs, *node.outputs]:
            if not name:
                continue
            vt = graph.value_type(name)
            if vt is None or vt.shape is None:
                return (
                    f"dynamic shape: the shape of {name!r} is unknown; the NPU compiles "
                    "static shapes only",
                    "shape",
                )
            if any(not isinstance(d, int) for d in vt.shape):
                return (
                    f"dynamic shape: {name!r} has shape {_fmt_shape(vt.shape)}; the NPU compiles "
                    "static shapes only (fix the free dimensions, e.g. with "
                    "add_free_dimension_override_by_name)",
                    "shape",
                )
        return "", ""

    def check_attributes(self, node: Node, graph: Graph, precision: str) -> tuple[str, str]:
        """Op-specific attribute rules (category ``attribute``, or ``shape`` for ranks)."""
        return "", ""

    # -- compilation ----------------------------------------------------------------
    def lower(self, node: Node, graph: Graph) -> tuple[list[str], dict[str, Any]]:
        """The instruction for ``node``: its input names (``""`` for an absent optional
        input) and JSON attributes, every default filled in. Call only after
        :meth:`check` accepted the node."""
        return list(node.inputs), {}

    def prepack(
        self, inputs: list[str], attrs: dict[str, Any], constants: Mapping[str, np.ndarray]
    ) -> tuple[list[str | np.ndarray], dict[str, Any]]:
        """Rewrite constant inputs into the layout :meth:`run` wants, once, at compile time.

        ``constants`` holds the group's constant inputs in their original precision.
        Returns the instruction inputs, where an array replaces a name when the op packed
        a new constant (the compiler names it and converts it to storage precision),
        and the attributes adjusted to match. The default packs nothing.
        """
        return list(inputs), attrs

    # -- execution ------------------------------------------------------------------
    def run(
        self, inputs: list[np.ndarray | None], attrs: dict[str, Any], precision: str
    ) -> list[np.ndarray]:
        """Compute the outputs from storage arrays (``None`` for an absent optional
        input) and the lowered attributes; return storage arrays."""
        raise NotImplementedError(f"{type(self).__name__}.run")

    def cost(
        self,
        in_shapes: Sequence[Sequence[int] | None],
        out_shapes: Sequence[Sequence[int]],
        attrs: Mapping[str, Any],
        itemsizes: Sequence[int] | None = None,
    ) -> tuple[int, int]:
        """(MACs, bytes moved) of one execution.

        ``itemsizes`` gives the storage bytes per element of each input then each output
        (``None`` entries for absent inputs are skipped); without it every element counts
        2 bytes, the float16 default. The default charges ``macs_per_element`` per output
        element and moves every input and output once.
        """
        macs = self.macs_per_element * sum(_size(s) for s in out_shapes)
        return macs, _bytes_moved(in_shapes, out_shapes, itemsizes)


class LibraryOp(NpuOp):
    """An op whose semantics come from the operator library (:mod:`onyxrt_ops`): the
    instruction keeps the node's ONNX version and attributes, and :meth:`run` computes
    with the library's kernel for them over numpy — on float32 math arrays, rounded to
    storage — so attribute defaults, validation and shapes are the library's and only the
    numerics (float32 arithmetic, float16/int8 storage) are the NPU's own."""

    def lower(self, node, graph):
        """Attributes: ``since`` (the operator version at the model's opset) and the
        node's ``attributes``."""
        since = schema_since_version("", self.op_type, graph.opset("")) or graph.opset("")
        return list(node.inputs), {"since": since, "attributes": _json_attributes(node)}

    def kernel(self, attrs: Mapping[str, Any], n_inputs: int) -> Any:
        """The library kernel for an instruction's attributes (built once per attributes)."""
        key = json.dumps([attrs, n_inputs], sort_keys=True)
        cache = self.__dict__.setdefault("_kernels", {})
        found = cache.get(key)
        if found is None:
            since = int(attrs["since"])
            proto = helper.make_node(self.op_type, [f"in{i}" for i in range(n_inputs)], ["out"],
                                     name=f"npu_{self.op_type}", **attrs["attributes"])
            cls = library.kernel(self.op_type, since, NPU_BACKEND)
            found = cache[key] = cls(KernelInfo.from_node(proto, since, since_version=since))
        return found

    def run(self, inputs, attrs, precision):
        """The library's computation on float32 math arrays, rounded to storage."""
        args = [None if v is None else (_math(v) if v.dtype.kind == "f" else v) for v in inputs]
        with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
            outputs = self.kernel(attrs, len(inputs)).compute(*args)
        return [_store(np.asarray(y), precision) if np.asarray(y).dtype.kind == "f" else np.asarray(y)
                for y in outputs]


def _json_attributes(node: Node) -> dict[str, Any]:
    """The node's attributes as JSON values (strings decoded)."""
    out: dict[str, Any] = {}
    for name, value in node.attributes.items():
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        elif isinstance(value, (list, tuple)):
            value = [v.decode("utf-8") if isinstance(v, bytes) else v for v in value]
        out[name] = value
    return out


def _bytes_moved(
    in_shapes: Sequence[Sequence[int] | None],
    out_shapes: Sequence[Sequence[int]],
    itemsizes: Sequence[int] | None,
) -> int:
    shapes = [*in_shapes, *out_shapes]
    sizes = list(itemsizes) if itemsizes is not None else [2] * len(shapes)
    return sum(_size(s) * int(b) for s, b in zip(shapes, sizes) if s is not None)


def _dtype_problem(graph: Graph, name: str, allowed: tuple[str, ...], role: str) -> str:
    vt = graph.value_type(name)
    if vt is None or vt.kind == "unknown":
        return ""  # nothing known: check_shapes reports it
    if vt.kind != "tensor":
        return f"{role} {name!r} is a {vt.kind}; the NPU handles tensors only"
    dt = vt.dtype
    if dt is None:
        return ""
    if dt.name not in allowed:
        return f"dtype {dt.name} of {role} {name!r} is not supported (the NPU takes {'/'.join(allowed)} here)"
    return ""


def _attr(node: Node, name: str, default: Any) -> Any:
    return node.attributes.get(name, default)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# -- elementwise ------------------------------------------------------------------------
class _Unary(LibraryOp):
    """An elementwise activation: the library's, in float32, rounded to storage."""


class Relu(_Unary):
    """max(x, 0)."""

    op_type = "Relu"
    min_opset = 6


class LeakyRelu(_Unary):
    """x if x >= 0 else alpha * x."""

    op_type = "LeakyRelu"
    min_opset = 6


class Sigmoid(_Unary):
    """1 / (1 + exp(-x))."""

    op_type = "Sigmoid"
    min_opset = 6
    macs_per_element = 4


class Tanh(_Unary):
    """tanh(x)."""

    op_type = "Tanh"
    min_opset = 6
    macs_per_element = 4


class HardSwish(_Unary):
    """x * clip(x / 6 + 1/2, 0, 1)."""

    op_type = "HardSwish"
    min_opset = 14
    macs_per_element = 2


def _erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function in float64 (fractional error < 1.2e-7 everywhere).

    The Chebyshev fit of Press et al., *Numerical Recipes* (``erfcc``); numpy has no erf
    and the package must not depend on scipy.
    """
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (
            -0.82215223 + t * 0.17087277))))))))
    r = t * np.exp(poly)
    return np.where(x >= 0, r, 2.0 - r)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf in ``x``'s dtype, computed in float64 from :func:`_erfc` (the NPU's erf unit)."""
    return (1.0 - _erfc(np.asarray(x, np.float64))).astype(x.dtype)


#: The numpy backend the NPU computes the library's operators with, and its erf.
NPU_BACKEND = numpy_backend(extras={"erf": _erf})


class Gelu(_Unary):
    """x * Phi(x) (``approximate="none"``) or its tanh approximation."""

    op_type = "Gelu"
    min_opset = 20
    macs_per_element = 8

    def check_attributes(self, node, graph, precision):
        """approximate must be none or tanh."""
        approx = _attr(node, "approximate", "none")
        if approx not in ("none", "tanh"):
            return f"Gelu approximate={approx!r} is not supported (none or tanh)", "attribute"
        return "", ""


class Clip(_Unary):
    """clip(x, min, max); the bounds are attributes (opset < 11) or constant inputs,
    lowered to the attributes of Clip-6 (the input is just x)."""

    op_type = "Clip"
    min_opset = 6
    params = {1: Param("min", FLOAT_DTYPES), 2: Param("max", FLOAT_DTYPES)}

    def lower(self, node, graph):
        """Clip-6 with ``min``/``max`` attributes (absent = unbounded)."""
        if graph.opset("") < 11:
            return [node.inputs[0]], super().lower(node, graph)[1]
        bounds = [_constant(graph, node.inputs[i]) if len(node.inputs) > i else None for i in (1, 2)]
        attributes = {k: float(b.reshape(-1)[0]) for k, b in zip(("min", "max"), bounds) if b is not None}
        return [node.inputs[0]], {"since": 6, "attributes": attributes}


class _Binary(LibraryOp):
    """A broadcasting binary op: the library's, in float32, rounded to storage."""

    min_opset = 7  # before opset 7 these ops had the legacy 'broadcast'/'axis' attributes


class Add(_Binary):
    """a + b."""

    op_type = "Add"


class Sub(_Binary):
    """a - b."""

    op_type = "Sub"


class Mul(_Binary):
    """a * b."""

    op_type = "Mul"


class Div(_Binary):
    """a / b (IEEE: x / 0 is inf or nan)."""

    op_type = "Div"


# -- matrix products --------------------------------------------------------------------
class MatMul(NpuOp):
    """numpy.matmul semantics, float32 accumulation."""

    op_type = "MatMul"
    min_opset = 1

    def run(self, inputs, attrs, precision):
        """a @ b in float32, rounded to storage."""
        return [_store(np.matmul(_math(inputs[0]), _math(inputs[1])), precision)]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """K MACs per output element."""
        a = in_shapes[0]
        k = a[-1] if a else 1
        return int(k) * _size(out_shapes[0]), _bytes_moved(in_shapes, out_shapes, itemsizes)


class Gemm(NpuOp):
    """alpha * A' @ B' + beta * C with A', B' optionally transposed; float32 accumulation."""

    op_type = "Gemm"
    min_opset = 7

    def check_attributes(self, node, graph, precision):
        """A and B must be matrices."""
        for name in node.inputs[:2]:
            if _rank(graph, name) != 2:
                return f"Gemm input {name!r} is not a matrix (rank {_rank(graph, name)})", "shape"
        return "", ""

    def lower(self, node, graph):
        """Attributes: ``alpha``, ``beta``, ``transA``, ``transB``."""
        attrs = {
            "alpha": float(_attr(node, "alpha", 1.0)),
            "beta": float(_attr(node, "beta", 1.0)),
            "transA": int(_attr(node, "transA", 0)),
            "transB": int(_attr(node, "transB", 0)),
        }
        return list(node.inputs), attrs

    def prepack(self, inputs, attrs, constants):
        """A constant B given transposed (as torch's Linear exports it) is stored
        transposed once, so every run reads it in (K, N) order."""
        packed: list[str | np.ndarray] = list(inputs)
        if attrs["transB"] and inputs[1] in constants:
            packed[1] = np.ascontiguousarray(np.asarray(constants[inputs[1]]).T)
            attrs = {**attrs, "transB": 0}
        return packed, attrs

    def run(self, inputs, attrs, precision):
        """The product in float32, rounded to storage."""
        a, b = _math(inputs[0]), _math(inputs[1])
        if attrs.get("transA"):
            a = a.T
        if attrs.get("transB"):
            b = b.T
        y = a @ b
        alpha = attrs.get("alpha", 1.0)
        if alpha != 1.0:
            y = y * _F32(alpha)
        c = inputs[2] if len(inputs) > 2 else None
        beta = attrs.get("beta", 1.0)
        if c is not None and beta != 0.0:
            y = y + _F32(beta) * _math(c)
        return [_store(y, precision)]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """K MACs per output element (plus one for the bias)."""
        a = in_shapes[0] or (1, 1)
        k = a[0] if attrs.get("transA") else a[-1]
        extra = 1 if len(in_shapes) > 2 and in_shapes[2] is not None else 0
        macs = (int(k) + extra) * _size(out_shapes[0])
        return macs, _bytes_moved(in_shapes, out_shapes, itemsizes)


# -- convolution and pooling ------------------------------------------------------------
def _check_2d(node: Node, graph: Graph, what: str) -> tuple[str, str]:
    """Shared rules for Conv and the pools: NCHW input, explicit padding."""
    rank = _rank(graph, node.inputs[0])
    if rank != 4:
        return (
            f"{what} on a {rank - 2}-D input is not supported (2-D only, NCHW input of rank 4)",
            "shape",
        )
    auto_pad = _attr(node, "auto_pad", "NOTSET")
    if auto_pad != "NOTSET":
        return f"{what} auto_pad={auto_pad} is not supported (explicit pads only)", "attribute"
    for name, length in (("pads", 4), ("strides", 2), ("kernel_shape", 2), ("dilations", 2)):
        value = node.attributes.get(name)
        if value is not None and len(value) != length:
            return f"{what} {name}={value} does not fit a 2-D input", "attribute"
    return "", ""


def _windows(size: int, kernel: int, stride: int, begin: int, end: int, ceil: bool) -> int:
    """Output length of a sliding window (ONNX/PyTorch rule: with ceil_mode, the last
    window must start inside the input or its leading padding)."""
    span = size + begin + end - kernel
    if not ceil:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + begin:
        out -= 1
    return out


class Conv(NpuOp):
    """2-D convolution (groups, strides, dilations, explicit pads), float32 accumulation.

    The kernel walks the kh x kw taps of the filter and accumulates one matrix product per
    tap over channels-last data: the way systolic arrays run convolutions, and it avoids
    materialising an im2col buffer.
    """

    op_type = "Conv"
    min_opset = 1

    def check_attributes(self, node, graph, precision):
        """2-D only, explicit pads, consistent groups."""
        reason = _check_2d(node, graph, "Conv")
        if reason[0]:
            return reason
        x, w = _static_shape(graph, node.inputs[0]), _static_shape(graph, node.inputs[1])
        group = int(_attr(node, "group", 1))
        if len(w) != 4 or group < 1 or w[1] * group != x[1] or w[0] % group:
            return f"Conv weight shape {w} does not fit input {x} with group={group}", "shape"
        return "", ""

    def lower(self, node, graph):
        """Attributes: ``kernel_shape``, ``strides``, ``pads`` (top, left, bottom,
        right), ``dilations``, ``group``."""
        w = _static_shape(graph, node.inputs[1])
        attrs = {
            "kernel_shape": list(w[2:]),
            "strides": list(_attr(node, "strides", [1, 1])),
            "pads": list(_attr(node, "pads", [0, 0, 0, 0])),
            "dilations": list(_attr(node, "dilations", [1, 1])),
            "group": int(_attr(node, "group", 1)),
        }
        return list(node.inputs), attrs

    def run(self, inputs, attrs, precision):
        """The convolution in float32, rounded to storage."""
        x, w = _math(inputs[0]), _math(inputs[1])
        b = inputs[2] if len(inputs) > 2 else None
        n, c, h, wd = x.shape
        m, cg, kh, kw = w.shape
        g = int(attrs.get("group", 1))
        mg = m // g
        sh, sw = attrs.get("strides", [1, 1])
        dh, dw = attrs.get("dilations", [1, 1])
        pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
        ho = _windows(h, dh * (kh - 1) + 1, sh, pt, pb, False)
        wo = _windows(wd, dw * (kw - 1) + 1, sw, pl, pr, False)
        # Channels-last, padded once; each tap is then a strided view.
        xl = np.pad(x.transpose(0, 2, 3, 1), ((0, 0), (pt, pb), (pl, pr), (0, 0)))
        p = n * ho * wo
        acc = np.zeros((p, g, mg), _F32)
        wgt = w.reshape(g, mg, cg, kh, kw)
        for i in range(kh):
            for j in range(kw):
                tap = xl[:, i * dh: i * dh + sh * (ho - 1) + 1: sh, j * dw: j * dw + sw * (wo - 1) + 1: sw]
                tap = tap.reshape(p, g, cg)
                wk = wgt[:, :, :, i, j]  # (g, mg, cg)
                if cg == 1:  # depthwise: a per-channel multiply-accumulate
                    acc += tap * wk[:, :, 0][None]
                elif g == 1:
                    acc[:, 0, :] += tap[:, 0, :] @ wk[0].T
                else:
                    acc += np.matmul(tap.transpose(1, 0, 2), wk.transpose(0, 2, 1)).transpose(1, 0, 2)
        y = acc.reshape(n, ho, wo, m)
        if b is not None:
            y = y + _math(b)
        return [_store(y.transpose(0, 3, 1, 2), precision)]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """C/group x kh x kw MACs per output element."""
        w = in_shapes[1] or (1, 1, 1, 1)
        per_output = int(math.prod(w[1:]))
        return per_output * _size(out_shapes[0]), _bytes_moved(in_shapes, out_shapes, itemsizes)


class _Pool(NpuOp):
    """Shared checks and lowering of MaxPool and AveragePool (2-D, dilations 1)."""

    def output_dtypes(self, index, node, graph):
        """Float; MaxPool's Indices output is int64 (refused by :meth:`check_attributes`)."""
        return FLOAT_DTYPES if index == 0 else ("int64",)

    def check_attributes(self, node, graph, precision):
        """2-D, explicit pads, dilations 1, no Indices output."""
        reason = _check_2d(node, graph, self.op_type)
        if reason[0]:
            return reason
        dilations = _attr(node, "dilations", [1, 1])
        if any(d != 1 for d in dilations):
            return f"{self.op_type} dilations={dilations} are not supported (1 only)", "attribute"
        if len(node.outputs) > 1 and node.outputs[1]:
            return f"{self.op_type} Indices output is not supported", "attribute"
        if "kernel_shape" not in node.attributes:
            return f"{self.op_type} without kernel_shape is not supported", "attribute"
        return "", ""

    def lower(self, node, graph):
        """Attributes: ``kernel_shape``, ``strides``, ``pads``, ``ceil_mode``."""
        attrs = {
            "kernel_shape": list(node.attributes["kernel_shape"]),
            "strides": list(_attr(node, "strides", [1, 1])),
            "pads": list(_attr(node, "pads", [0, 0, 0, 0])),
            "ceil_mode": int(_attr(node, "ceil_mode", 0)),
        }
        return [node.inputs[0]], attrs

    @staticmethod
    def geometry(shape: Sequence[int], attrs: Mapping[str, Any]) -> tuple[int, ...]:
        """(ho, wo, extra_bottom, extra_right): output size and the padding ceil_mode adds."""
        kh, kw = attrs["kernel_shape"]
        sh, sw = attrs.get("strides", [1, 1])
        pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
        ceil = bool(attrs.get("ceil_mode", 0))
        h, w = shape[2], shape[3]
        ho = _windows(h, kh, sh, pt, pb, ceil)
        wo = _windows(w, kw, sw, pl, pr, ceil)
        eb = max(0, (ho - 1) * sh + kh - (h + pt + pb))
        er = max(0, (wo - 1) * sw + kw - (w + pl + pr))
        return ho, wo, eb, er

    @staticmethod
    def taps(xp: np.ndarray, attrs: Mapping[str, Any], ho: int, wo: int):
        """Yield the strided view of every kernel tap over padded ``xp`` (..., H, W)."""
        kh, kw = attrs["kernel_shape"]
        sh, sw = attrs.get("strides", [1, 1])
        for i in range(kh):
            for j in range(kw):
                yield xp[..., i: i + sh * (ho - 1) + 1: sh, j: j + sw * (wo - 1) + 1: sw]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """kh x kw operations per output element."""
        per_output = int(math.prod(attrs["kernel_shape"]))
        return per_output * _size(out_shapes[0]), _bytes_moved(in_shapes, out_shapes, itemsizes)


class MaxPool(_Pool):
    """2-D max pooling (exact in any storage precision)."""

    op_type = "MaxPool"

    def run(self, inputs, attrs, precision):
        """The window maxima, computed directly on storage values."""
        x = inputs[0]
        ho, wo, eb, er = self.geometry(x.shape, attrs)
        pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + eb), (pl, pr + er)), constant_values=-np.inf)
        out = None
        for tap in self.taps(xp, attrs, ho, wo):
            out = tap.copy() if out is None else np.maximum(out, tap, out=out)
        return [out]


class AveragePool(_Pool):
    """2-D average pooling; the divisor counts padding when ``count_include_pad`` is set
    but never the extra cells ``ceil_mode`` adds."""

    op_type = "AveragePool"

    def lower(self, node, graph):
        """Attributes: those of MaxPool plus ``count_include_pad``."""
        inputs, attrs = super().lower(node, graph)
        attrs["count_include_pad"] = int(_attr(node, "count_include_pad", 0))
        return inputs, attrs

    def run(self, inputs, attrs, precision):
        """Window sums in float32 divided by the window counts, rounded to storage."""
        x = _math(inputs[0])
        h, w = x.shape[2], x.shape[3]
        ho, wo, eb, er = self.geometry(x.shape, attrs)
        pt, pl, pb, pr = attrs.get("pads", [0, 0, 0, 0])
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb + eb), (pl, pr + er)))
        mask = np.zeros(xp.shape[2:], _F32)
        if attrs.get("count_include_pad"):
            mask[: pt + h + pb, : pl + w + pr] = 1
        else:
            mask[pt: pt + h, pl: pl + w] = 1
        total = np.zeros((*x.shape[:2], ho, wo), _F32)
        count = np.zeros((ho, wo), _F32)
        for tap, mtap in zip(self.taps(xp, attrs, ho, wo), self.taps(mask, attrs, ho, wo)):
            total += tap
            count += mtap
        return [_store(total / np.maximum(count, 1), precision)]


class GlobalAveragePool(NpuOp):
    """Mean over all spatial axes, float32 accumulation."""

    op_type = "GlobalAveragePool"

    def check_attributes(self, node, graph, precision):
        """An (N, C, spatial...) input."""
        rank = _rank(graph, node.inputs[0])
        if rank < 3:
            return f"GlobalAveragePool needs an input of rank 3 or more, not {rank}", "shape"
        return "", ""

    def run(self, inputs, attrs, precision):
        """The spatial mean in float32, rounded to storage."""
        x = _math(inputs[0])
        return [_store(x.mean(axis=tuple(range(2, x.ndim)), keepdims=True), precision)]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """One accumulation per input element."""
        return _size(in_shapes[0]), _bytes_moved(in_shapes, out_shapes, itemsizes)


# -- normalization ----------------------------------------------------------------------
class Softmax(LibraryOp):
    """exp(x - max) / sum along ``axis`` (from opset 13; before it, over every axis from
    ``axis`` on, as ONNX then flattened to 2-D): the library's, with float32 reductions."""

    op_type = "Softmax"
    macs_per_element = 4


class LayerNormalization(NpuOp):
    """(x - mean) / sqrt(var + epsilon) * scale + bias over the trailing axes from
    ``axis``; also produces Mean and InvStdDev when the node asks for them."""

    op_type = "LayerNormalization"
    min_opset = 17
    macs_per_element = 5

    def lower(self, node, graph):
        """Attributes: ``axes`` (normalized trailing axes) and ``epsilon``."""
        rank = _rank(graph, node.inputs[0])
        start = _axis(int(_attr(node, "axis", -1)), rank)
        attrs = {"axes": list(range(start, rank)), "epsilon": float(_attr(node, "epsilon", 1e-5))}
        return list(node.inputs), attrs

    def run(self, inputs, attrs, precision):
        """Y, Mean, InvStdDev with float32 statistics, rounded to storage."""
        x = _math(inputs[0])
        axes = tuple(attrs["axes"])
        mean = x.mean(axis=axes, keepdims=True)
        centred = x - mean
        inv = 1 / np.sqrt((centred * centred).mean(axis=axes, keepdims=True) + _F32(attrs["epsilon"]))
        y = centred * inv * _math(inputs[1])
        if len(inputs) > 2 and inputs[2] is not None:
            y = y + _math(inputs[2])
        return [_store(y, precision), _store(mean, precision), _store(inv, precision)]


class BatchNormalization(NpuOp):
    """Inference batch normalization, per channel (axis 1).

    When the four statistics are constants the compiler folds them into one scale and
    one shift per channel (in float64, before rounding to storage), as NPU compilers do.
    """

    op_type = "BatchNormalization"
    min_opset = 7
    macs_per_element = 1

    def check_attributes(self, node, graph, precision):
        """Inference mode only: training_mode 0, one output, spatial 1."""
        if int(_attr(node, "training_mode", 0)):
            return "BatchNormalization training_mode=1 is not supported (inference only)", "attribute"
        if any(node.outputs[1:]):
            return "BatchNormalization running-statistics outputs are not supported", "attribute"
        if int(_attr(node, "spatial", 1)) != 1:
            return "BatchNormalization spatial=0 is not supported", "attribute"
        if _rank(graph, node.inputs[0]) < 2:
            return "BatchNormalization needs an input of rank 2 or more", "shape"
        return "", ""

    def lower(self, node, graph):
        """Attributes: ``epsilon``; ``folded`` is set by :meth:`prepack`."""
        return list(node.inputs), {"epsilon": float(_attr(node, "epsilon", 1e-5)), "folded": 0}

    def prepack(self, inputs, attrs, constants):
        """Fold scale, bias, mean and var into y = x * a + b when all are constants."""
        if not all(name in constants for name in inputs[1:5]):
            return list(inputs), attrs
        scale, bias, mean, var = (np.asarray(constants[n], np.float64) for n in inputs[1:5])
        a = scale / np.sqrt(var + attrs["epsilon"])
        return [inputs[0], a, bias - mean * a], {**attrs, "folded": 1}

    def run(self, inputs, attrs, precision):
        """Normalization in float32, rounded to storage."""
        x = _math(inputs[0])
        per_channel = (1, -1) + (1,) * (x.ndim - 2)
        if attrs.get("folded"):
            a, b = (_math(v).reshape(per_channel) for v in inputs[1:3])
        else:
            scale, bias, mean, var = (_math(v).reshape(per_channel) for v in inputs[1:5])
            a = scale / np.sqrt(var + _F32(attrs["epsilon"]))
            b = bias - mean * a
        return [_store(x * a + b, precision)]


# -- data movement ----------------------------------------------------------------------
class Concat(NpuOp):
    """Concatenation along ``axis``."""

    op_type = "Concat"
    min_opset = 4

    def lower(self, node, graph):
        """Attributes: ``axis`` (normalized)."""
        rank = _rank(graph, node.inputs[0])
        return list(node.inputs), {"axis": _axis(int(node.attributes["axis"]), rank)}

    def run(self, inputs, attrs, precision):
        """numpy.concatenate of the storage arrays."""
        return [np.concatenate([v for v in inputs if v is not None], axis=attrs["axis"])]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """Pure data movement."""
        return 0, _bytes_moved(in_shapes, out_shapes, itemsizes)


class Reshape(NpuOp):
    """A new view of the same buffer; the shape is a constant int64 input (``0`` copies
    a dimension unless ``allowzero``; ``-1`` is inferred)."""

    op_type = "Reshape"
    min_opset = 5
    params = {1: Param("shape", ("int64",), "shape")}

    def lower(self, node, graph):
        """Attributes: ``allowzero``; the shape stays an int64 constant input."""
        return list(node.inputs), {"allowzero": int(_attr(node, "allowzero", 0))}

    def run(self, inputs, attrs, precision):
        """The data with its new shape (no copy)."""
        x, shape = inputs[0], [int(d) for d in inputs[1].reshape(-1)]
        if not attrs.get("allowzero"):
            shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return [x.reshape(shape)]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """Free: a reshape only changes the buffer's descriptor."""
        return 0, 0


class Flatten(NpuOp):
    """Reshape to 2-D at ``axis``."""

    op_type = "Flatten"

    def lower(self, node, graph):
        """Attributes: ``axis`` (normalized)."""
        rank = _rank(graph, node.inputs[0])
        return list(node.inputs), {"axis": _axis(int(_attr(node, "axis", 1)), rank)}

    def run(self, inputs, attrs, precision):
        """The data as (prod(shape[:axis]), prod(shape[axis:])) (no copy)."""
        x, axis = inputs[0], attrs["axis"]
        return [x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """Free: only the descriptor changes."""
        return 0, 0


class Transpose(NpuOp):
    """Axis permutation (reversed axes by default), materialised in a new buffer."""

    op_type = "Transpose"

    def lower(self, node, graph):
        """Attributes: ``perm``."""
        rank = _rank(graph, node.inputs[0])
        perm = _attr(node, "perm", None)
        return list(node.inputs), {"perm": list(perm) if perm is not None else list(range(rank))[::-1]}

    def run(self, inputs, attrs, precision):
        """The permuted data in a fresh contiguous buffer."""
        return [np.ascontiguousarray(np.transpose(inputs[0], attrs["perm"]))]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """Pure data movement."""
        return 0, _bytes_moved(in_shapes, out_shapes, itemsizes)


class Resize(NpuOp):
    """Nearest-neighbour resize with ``half_pixel`` or ``asymmetric`` coordinates.

    The constant scales or sizes are lowered into attributes: ``sizes`` (the static
    output shape) and ``scales`` (the factors that map output to input coordinates).
    """

    op_type = "Resize"
    min_opset = 11
    params = {
        1: Param("roi", ("float32", "float16", "float64")),
        2: Param("scales", ("float32",), "shape"),
        3: Param("sizes", ("int64",), "shape"),
    }
    _COORDINATES = ("half_pixel", "asymmetric")
    _NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")

    def check_attributes(self, node, graph, precision):
        """Nearest mode, supported coordinate modes, stretch policy."""
        mode = _attr(node, "mode", "nearest")
        if mode != "nearest":
            return f"Resize mode {mode!r} is not supported (nearest only)", "attribute"
        coord = _attr(node, "coordinate_transformation_mode", "half_pixel")
        if coord not in self._COORDINATES:
            return (
                f"Resize coordinate_transformation_mode {coord!r} is not supported "
                "(half_pixel or asymmetric)",
                "attribute",
            )
        nearest = _attr(node, "nearest_mode", "round_prefer_floor")
        if nearest not in self._NEAREST:
            return f"Resize nearest_mode {nearest!r} is not supported", "attribute"
        policy = _attr(node, "keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            return f"Resize keep_aspect_ratio_policy {policy!r} is not supported (stretch only)", "attribute"
        names = list(node.inputs) + ["", "", ""]
        if _constant(graph, names[2]) is None and _constant(graph, names[3]) is None:
            return "Resize needs constant scales or sizes", "shape"
        return "", ""

    def lower(self, node, graph):
        """Attributes: ``coordinate_transformation_mode``, ``nearest_mode``, ``scales``
        and ``sizes`` (full rank); the input is just X."""
        names = list(node.inputs) + ["", "", ""]
        in_shape = _static_shape(graph, names[0])
        out_shape = _static_shape(graph, node.outputs[0])
        rank = len(in_shape)
        axes = [_axis(int(a), rank) for a in _attr(node, "axes", list(range(rank)))]
        given = _constant(graph, names[2])
        scales = [out_shape[i] / in_shape[i] if in_shape[i] else 1.0 for i in range(rank)]
        if given is not None:
            for axis, s in zip(axes, given.reshape(-1).tolist()):
                scales[axis] = float(s)
        attrs = {
            "coordinate_transformation_mode": _attr(node, "coordinate_transformation_mode", "half_pixel"),
            "nearest_mode": _attr(node, "nearest_mode", "round_prefer_floor"),
            "scales": [float(s) for s in scales],
            "sizes": list(out_shape),
        }
        return [names[0]], attrs

    def run(self, inputs, attrs, precision):
        """A gather with one static index table per axis."""
        x = inputs[0]
        index = [
            _nearest_index(n_in, n_out, s, attrs["coordinate_transformation_mode"], attrs["nearest_mode"])
            for n_in, n_out, s in zip(x.shape, attrs["sizes"], attrs["scales"])
        ]
        return [x[np.ix_(*index)]]

    def cost(self, in_shapes, out_shapes, attrs, itemsizes=None):
        """Pure data movement."""
        return 0, _bytes_moved(in_shapes, out_shapes, itemsizes)


def _nearest_index(n_in: int, n_out: int, scale: float, coord: str, nearest: str) -> np.ndarray:
    """Source index of every output position along one axis."""
    o = np.arange(n_out, dtype=np.float64)
    src = (o + 0.5) / scale - 0.5 if coord == "half_pixel" else o / scale
    if nearest == "round_prefer_floor":
        idx = np.ceil(src - 0.5)
    elif nearest == "round_prefer_ceil":
        idx = np.floor(src + 0.5)
    elif nearest == "floor":
        idx = np.floor(src)
    else:
        idx = np.ceil(src)
    return np.clip(idx, 0, n_in - 1).astype(np.int64)


# -- quantization (precision int8) ------------------------------------------------------
class _Quant(NpuOp):
    """Shared rules of QuantizeLinear and DequantizeLinear: int8 precision only,
    constant per-tensor or per-axis parameters, no blocked quantization."""

    min_opset = 10

    def check_op(self, node, graph, precision):
        """Claimed only with ``precision="int8"``."""
        reason = super().check_op(node, graph, precision)
        if reason[0]:
            return reason
        if precision != "int8":
            return (
                f"{self.op_type} runs on the NPU only with precision='int8' "
                f"(absorbed QDQ); precision is {precision!r}",
                "op",
            )
        return "", ""

    def check_attributes(self, node, graph, precision):
        """Per-tensor or per-axis parameters; block_size 0."""
        if int(_attr(node, "block_size", 0)):
            return f"{self.op_type} block_size is not supported (per-tensor or per-axis only)", "attribute"
        x = _static_shape(graph, node.inputs[0])
        axis = _axis(int(_attr(node, "axis", 1)), len(x))
        for name in node.inputs[1:3]:
            if not name:
                continue
            p = _static_shape(graph, name)
            if _size(p) == 1 and len(p) <= 1:
                continue
            if len(p) != 1 or not 0 <= axis < len(x) or p[0] != x[axis]:
                return (
                    f"{self.op_type} parameter {name!r} of shape {p} is neither per-tensor nor "
                    f"per-axis along axis {axis} of {x}",
                    "shape",
                )
        return "", ""

    @staticmethod
    def along(v: np.ndarray | None, axis: int, rank: int) -> np.ndarray | None:
        """A per-tensor or per-axis parameter shaped to broadcast against the data."""
        if v is None or v.size == 1:
            return None if v is None else v.reshape(())
        shape = [1] * rank
        shape[axis] = -1
        return v.reshape(shape)

    def lower(self, node, graph):
        """Attributes: ``axis`` (normalized) and ``dtype`` (the quantized type)."""
        rank = _rank(graph, node.inputs[0])
        quantized = node.outputs[0] if self.op_type == "QuantizeLinear" else node.inputs[0]
        vt = graph.value_type(quantized)
        assert vt is not None and vt.dtype is not None
        attrs = {"axis": _axis(int(_attr(node, "axis", 1)), rank), "dtype": vt.dtype.name}
        return list(node.inputs), attrs


class QuantizeLinear(_Quant):
    """y = saturate(round_half_even(x / scale) + zero_point) to int8 or uint8."""

    op_type = "QuantizeLinear"
    params = {1: Param("scale", FLOAT_DTYPES), 2: Param("zero point", QUANT_DTYPES)}

    def output_dtypes(self, index, node, graph):
        """int8 or uint8."""
        return QUANT_DTYPES

    def run(self, inputs, attrs, precision):
        """Quantize in float32, saturate to the integer range."""
        x = _math(inputs[0])
        scale = self.along(_math(inputs[1]), attrs["axis"], x.ndim)
        zp = inputs[2] if len(inputs) > 2 else None
        zp = self.along(None if zp is None else _math(zp), attrs["axis"], x.ndim)
        q = np.rint(x / scale)
        if zp is not None:
            q = q + zp
        info = np.iinfo(attrs["dtype"])
        return [np.clip(q, info.min, info.max).astype(attrs["dtype"])]


class DequantizeLinear(_Quant):
    """y = (x - zero_point) * scale, stored as a float tensor. int32 input is accepted
    for constants only (quantized biases)."""

    op_type = "DequantizeLinear"
    params = {1: Param("scale", FLOAT_DTYPES), 2: Param("zero point", QUANT_DTYPES + ("int32",))}

    def input_dtypes(self, index, node, graph):
        """int8/uint8 data; int32 for a constant (a quantized bias)."""
        if graph.is_constant(node.inputs[index]):
            return (*QUANT_DTYPES, "int32")
        return QUANT_DTYPES

    def run(self, inputs, attrs, precision):
        """Dequantize in float32, rounded to storage."""
        x = inputs[0]
        scale = self.along(_math(inputs[1]), attrs["axis"], x.ndim)
        zp = inputs[2] if len(inputs) > 2 else None
        y = _math(x)
        if zp is not None:
            y = y - self.along(_math(zp), attrs["axis"], x.ndim)
        return [_store(y * scale, precision)]


# -- the registry -----------------------------------------------------------------------
NPU_OPS: dict[str, NpuOp] = {
    op.op_type: op
    for op in (
        Conv(), Gemm(), MatMul(), Add(), Sub(), Mul(), Div(), Relu(), LeakyRelu(), Clip(),
        Sigmoid(), Tanh(), HardSwish(), Gelu(), Softmax(), LayerNormalization(),
        BatchNormalization(), MaxPool(), AveragePool(), GlobalAveragePool(), Concat(),
        Reshape(), Flatten(), Transpose(), Resize(), QuantizeLinear(), DequantizeLinear(),
    )
}
"""The NPU's op set, by ONNX op type (default domain)."""


def check_node(node: Node, graph: Graph, precision: str) -> tuple[str, str]:
    """:meth:`NpuOp.check` for any node, including ops outside the set (category ``op``)."""
    op = NPU_OPS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if op is None:
        check_precision(precision)
        return f"{node.qualified_op} is not in the NPU op set", "op"
    return op.check(node, graph, precision)
