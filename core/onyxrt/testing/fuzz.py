"""Fuzzing the loader and the executor: case generators, a classifying runner, campaigns.

A *case* is named by ``(kind, seed, index)`` and rebuilt from those three alone, so any
case a campaign reports can be reproduced in a Python prompt::

    >>> from onyxrt.testing.fuzz import FuzzCase, run_case      # doctest: +SKIP
    >>> run_case(FuzzCase("random_graph", seed=0, index=1234))  # doctest: +SKIP

Kinds (:data:`KINDS`):

``mutated_bytes``
    a small valid model (:func:`seed_models`: tiny_cnn, Add/Relu, Loop/If subgraphs,
    external data in a temporary folder, MatMul/LayerNorm/GELU fusion patterns) whose
    serialized bytes get 1-4 random mutations (bit flips, byte overwrites, truncation,
    insertion, duplicated slices), loaded and run with feeds matching its declared inputs;
``mutated_proto``
    the same models edited as protobuf messages (an attribute, a dim, an input name, an
    op type, an initializer's type or bytes, a node dropped or duplicated), which reaches
    past the parser far more often than byte mutations do;
``random_graph``
    a random chain of 1-5 operators from the supported op set (elementwise with
    broadcasting, MatMul, Gemm, Reshape, Transpose, Concat, Slice, Gather, Conv, pools,
    reductions, Softmax, Cast, Where, Expand, Pad, ...) with random shapes and
    attributes, some deliberately invalid;
``fusion_pattern``
    the patterns the optimizer fuses (Conv + BatchNormalization, Conv [+ Add] +
    activation, [Transpose →] MatMul [→ scale] [→ bias], layer normalization, GELU), with
    random perturbations that must stop a fusion (another reader of an inner value, a
    wrong constant, a wrong axis, a broadcasting bias);
``bad_feeds``
    valid models run with hostile feeds: wrong dtype, rank or fixed dim, missing or
    extra names, non-arrays, and bad output names.

Every graph case runs at ``ORT_ENABLE_ALL`` and at ``ORT_DISABLE_ALL``; both must agree,
and where onnxruntime also runs the model (the oracle) the outputs must match it too.
Outcomes (:data:`OUTCOMES`): ``ok`` (ran, and agreed), ``typed_error`` (an
:class:`~onyxrt.errors.OnyxError`), ``mismatch`` (results differ beyond tolerance, or one
optimization level ran what the other refused), ``foreign_exception`` (any other
exception: a bug), and, in a campaign's child processes, ``hang`` (past the time bound)
and ``crash`` (the process died). ``oracle_crash``/``oracle_hang`` are onnxruntime's,
and ``generator_crash`` onnx's (its shape inference, which builds random graphs, died
before onyxrt was called), not onyxrt's: they are reported separately.

:func:`run_campaign` runs cases in ``jobs`` worker processes, one case at a time each,
with a per-case timeout: a worker that hangs is killed and counted, one that dies is
counted, and both are replaced, so the campaign always finishes.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing
import os
import random
import shutil
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..records import record
from ..shape_inference import infer_shapes, may_abort

__all__ = [
    "KINDS",
    "OUTCOMES",
    "BUGS",
    "FuzzCase",
    "CaseResult",
    "CampaignReport",
    "PreparedCase",
    "seed_models",
    "prepare_case",
    "run_case",
    "run_campaign",
    "campaign_cases",
    "mutate_bytes",
]

KINDS = ("mutated_bytes", "mutated_proto", "random_graph", "fusion_pattern", "bad_feeds")
OUTCOMES = ("ok", "typed_error", "mismatch", "foreign_exception", "hang", "crash", "oracle_crash", "oracle_hang",
            "generator_crash")
#: Outcomes that are bugs in onyxrt.
BUGS = ("foreign_exception", "hang", "crash")

_OPSET = 17
_IR = 10
_RTOL = 1e-3
#: Seconds after which a case's run is asked to stop (``RunOptions.terminate``).
RUN_BOUND_S = 2.0
_ATOL = 1e-4


# ----------------------------------------------------------------------------- cases


@record(frozen=True)
class FuzzCase:
    """One case: everything about it follows from these three fields."""

    kind: str
    seed: int
    index: int

    def rng(self) -> random.Random:
        # A string seed is hashed with SHA-512: stable across runs and processes.
        return random.Random(f"{self.kind}:{self.seed}:{self.index}")

    def __str__(self) -> str:
        return f"FuzzCase({self.kind!r}, seed={self.seed}, index={self.index})"


@record
class CaseResult:
    """What happened to one case."""

    case: FuzzCase
    outcome: str
    #: the error's type name for typed errors, what differed for mismatches, the
    #: traceback for foreign exceptions, the timeout or exit code for hangs and crashes.
    detail: str = ""
    #: where it happened: "create", "run", "oracle"
    stage: str = ""
    #: for typed errors: whether onnxruntime ran the same model (a feature gap, not a bug).
    oracle_ran: bool = False
    seconds: float = 0.0

    @property
    def is_bug(self) -> bool:
        return self.outcome in BUGS


@record
class PreparedCase:
    """A case made concrete: the model (bytes, or a path inside ``folder``), feeds,
    requested outputs, and whether to compare with onnxruntime."""

    description: str
    model: bytes | str
    feeds: Any
    output_names: Any = None
    levels: tuple[str, ...] = ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL")
    oracle: bool = True
    folder: str | None = None

    def cleanup(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)


# ----------------------------------------------------------------------------- seed models


def _vi(name: str, elem: int, shape: Sequence[Any] | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
           outputs: Sequence[onnx.ValueInfoProto], inits: dict[str, np.ndarray] | None = None,
           opset: int = _OPSET, name: str = "fuzz") -> onnx.ModelProto:
    tensors = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), tensors)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=_IR)


def _add_relu() -> onnx.ModelProto:
    return _model(
        [helper.make_node("Add", ["x", "y"], ["s"], name="add"), helper.make_node("Relu", ["s"], ["z"], name="relu")],
        [_vi("x", TensorProto.FLOAT, ["n", 3]), _vi("y", TensorProto.FLOAT, [1, 3])],
        [_vi("z", TensorProto.FLOAT, ["n", 3])],
    )


def _control_flow() -> onnx.ModelProto:
    """If (on a bool input) choosing between two subgraphs, and a Loop accumulating."""
    then_g = helper.make_graph([helper.make_node("Add", ["x", "one"], ["t"], name="then_add")], "then", [],
                               [_vi("t", TensorProto.FLOAT, [2, 2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                               [_vi("e", TensorProto.FLOAT, [2, 2])])
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
         helper.make_node("Mul", ["acc_in", "two"], ["acc_out"], name="body_mul")],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []), _vi("acc_in", TensorProto.FLOAT, [2, 2])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", TensorProto.FLOAT, [2, 2])],
    )
    nodes = [
        helper.make_node("If", ["c"], ["chosen"], name="if", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "", "chosen"], ["looped"], name="loop", body=body),
    ]
    return _model(
        nodes,
        [_vi("x", TensorProto.FLOAT, [2, 2]), _vi("c", TensorProto.BOOL, [])],
        [_vi("looped", TensorProto.FLOAT, [2, 2])],
        {"one": np.ones((2, 2), np.float32), "two": np.full((2, 2), 2.0, np.float32),
         "trips": np.array(3, np.int64)},
    )


def _transformer_bits() -> onnx.ModelProto:
    """MatMul + bias, layer normalization and erf GELU as exporters write them."""
    rng = np.random.default_rng(0)
    h = 8
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
        helper.make_node("Add", ["mm", "b"], ["lin"], name="bias"),
        helper.make_node("ReduceMean", ["lin"], ["mean"], name="ln.mean", axes=[-1]),
        helper.make_node("Sub", ["lin", "mean"], ["d"], name="ln.sub"),
        helper.make_node("Pow", ["d", "pow2"], ["d2"], name="ln.pow"),
        helper.make_node("ReduceMean", ["d2"], ["var"], name="ln.var", axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["vare"], name="ln.eps"),
        helper.make_node("Sqrt", ["vare"], ["std"], name="ln.sqrt"),
        helper.make_node("Div", ["d", "std"], ["nrm"], name="ln.div"),
        helper.make_node("Mul", ["nrm", "gamma"], ["sc"], name="ln.gamma"),
        helper.make_node("Add", ["sc", "beta"], ["ln"], name="ln.beta"),
        helper.make_node("Div", ["ln", "sqrt2"], ["g1"], name="gelu.div"),
        helper.make_node("Erf", ["g1"], ["g2"], name="gelu.erf"),
        helper.make_node("Add", ["g2", "onef"], ["g3"], name="gelu.add"),
        helper.make_node("Mul", ["ln", "g3"], ["g4"], name="gelu.mul"),
        helper.make_node("Mul", ["g4", "half"], ["y"], name="gelu.half"),
    ]
    inits = {
        "w": rng.standard_normal((h, h)).astype(np.float32), "b": rng.standard_normal(h).astype(np.float32),
        "pow2": np.array(2.0, np.float32), "eps": np.array(1e-5, np.float32),
        "gamma": rng.standard_normal(h).astype(np.float32), "beta": rng.standard_normal(h).astype(np.float32),
        "sqrt2": np.array(math.sqrt(2), np.float32), "onef": np.array(1.0, np.float32),
        "half": np.array(0.5, np.float32),
    }
    return _model(nodes, [_vi("x", TensorProto.FLOAT, ["batch", 4, h])], [_vi("y", TensorProto.FLOAT, ["batch", 4, h])], inits)


def _external_data(folder: Path) -> Path:
    """A Conv + BatchNormalization + Relu model whose weights live in ``weights.bin``."""
    from onnx.external_data_helper import convert_model_to_external_data

    rng = np.random.default_rng(1)
    model = _model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["bn"], name="bn"),
         helper.make_node("Relu", ["bn"], ["y"], name="relu")],
        [_vi("x", TensorProto.FLOAT, ["n", 2, 5, 5])],
        [_vi("y", TensorProto.FLOAT, ["n", 4, 5, 5])],
        {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32),
         "g": rng.random(4).astype(np.float32) + 0.5, "be": rng.standard_normal(4).astype(np.float32),
         "m": rng.standard_normal(4).astype(np.float32), "v": rng.random(4).astype(np.float32) + 0.5},
    )
    convert_model_to_external_data(model, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    path = folder / "model.onnx"
    onnx.save_model(model, str(path))
    return path


_SEEDS: dict[str, bytes] | None = None
_EXTERNAL_DATA: bytes | None = None


def seed_models() -> dict[str, bytes]:
    """The small valid models mutations start from, serialized (built once per process).

    ``external_data`` is the .onnx file of a model whose weights sit in ``weights.bin``
    beside it; :func:`prepare_case` writes both into a temporary folder.
    """
    global _SEEDS, _EXTERNAL_DATA
    if _SEEDS is None:
        from .models import tiny_cnn

        seeds = {
            "tiny_cnn": tiny_cnn(num_classes=4, image=8).SerializeToString(),
            "add_relu": _add_relu().SerializeToString(),
            "control_flow": _control_flow().SerializeToString(),
            "transformer_bits": _transformer_bits().SerializeToString(),
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = _external_data(Path(tmp))
            seeds["external_data"] = path.read_bytes()
            _EXTERNAL_DATA = (Path(tmp) / "weights.bin").read_bytes()
        _SEEDS = seeds
    return _SEEDS


def _materialize(name: str, data: bytes, rng: random.Random | None = None) -> tuple[bytes | str, str | None]:
    """``data`` as the session's source: bytes, or for the external-data model a path in a
    fresh folder holding the (possibly also mutated) weights file."""
    if name != "external_data":
        return data, None
    seed_models()
    assert _EXTERNAL_DATA is not None
    folder = tempfile.mkdtemp(prefix="onyxrt-fuzz-")
    weights = _EXTERNAL_DATA
    if rng is not None and rng.random() < 0.25:
        weights = mutate_bytes(weights, rng, 1)
    Path(folder, "weights.bin").write_bytes(weights)
    path = Path(folder, "model.onnx")
    path.write_bytes(data)
    return str(path), folder


# ----------------------------------------------------------------------------- feeds

_NP_OF: dict[int, Any] = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
    TensorProto.INT64: np.int64, TensorProto.INT32: np.int32, TensorProto.INT8: np.int8,
    TensorProto.UINT8: np.uint8, TensorProto.BOOL: np.bool_, TensorProto.INT16: np.int16,
}


def _array(rng: random.Random, shape: Sequence[int], elem: int) -> np.ndarray:
    gen = np.random.default_rng(rng.getrandbits(32))
    dtype = _NP_OF.get(elem, np.float32)
    if dtype == np.bool_:
        return gen.random(tuple(shape)) < 0.5
    if np.issubdtype(dtype, np.integer):
        return gen.integers(-3 if np.issubdtype(dtype, np.signedinteger) else 0, 4, size=tuple(shape)).astype(dtype)
    return (gen.standard_normal(tuple(shape)) * 1.5).astype(dtype)


def _declared_feeds(model: onnx.ModelProto, rng: random.Random) -> dict[str, np.ndarray]:
    """Feeds matching the graph's declared inputs (symbolic dims → 1..3; unknown → skip)."""
    inits = {t.name for t in model.graph.initializer}
    feeds = {}
    dims: dict[str, int] = {}
    for vi in model.graph.input:
        if vi.name in inits or not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        shape = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                shape.append(d.dim_value if 0 <= d.dim_value <= 64 else 2)
            else:
                shape.append(dims.setdefault(d.dim_param, rng.randint(1, 3)))
        if math.prod(shape) > 1 << 16:
            shape = [min(s, 4) for s in shape]
        feeds[vi.name] = _array(rng, shape, tt.elem_type)
    return feeds


# ----------------------------------------------------------------------------- mutations


def mutate_bytes(data: bytes, rng: random.Random, count: int | None = None) -> bytes:
    """``data`` after 1-4 (or ``count``) random byte-level mutations."""
    buf = bytearray(data)
    for _ in range(count or rng.randint(1, 4)):
        if not buf:
            buf = bytearray(rng.randbytes(rng.randint(1, 8)))
            continue
        op = rng.choice(("flip", "overwrite", "truncate", "insert", "duplicate", "interesting"))
        pos = rng.randrange(len(buf))
        if op == "flip":
            buf[pos] ^= 1 << rng.randrange(8)
        elif op == "overwrite":
            n = rng.randint(1, 8)
            buf[pos:pos + n] = rng.randbytes(min(n, len(buf) - pos))
        elif op == "truncate":
            del buf[pos:]
        elif op == "insert":
            buf[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif op == "duplicate":
            end = min(len(buf), pos + rng.randint(1, 64))
            at = rng.randrange(len(buf) + 1)
            buf[at:at] = buf[pos:end]
        else:  # values that break bounds: 0, 0xff, 0x7f, 0x80
            buf[pos] = rng.choice((0x00, 0xFF, 0x7F, 0x80, 0x01))
    return bytes(buf)


def _mutate_proto(model: onnx.ModelProto, rng: random.Random) -> None:
    """1-3 random structural edits of ``model`` (in place)."""
    graph = model.graph
    for _ in range(rng.randint(1, 3)):
        nodes = _all_nodes(graph)
        op = rng.choice(("attr", "attr", "dim", "input", "output", "op_type", "init_type", "init_bytes",
                         "init_dims", "drop_node", "dup_node", "opset", "graph_io", "domain"))
        if op == "attr" and nodes:
            node = rng.choice(nodes)
            attrs = [a for a in node.attribute if a.type != onnx.AttributeProto.GRAPH]
            if attrs and rng.random() < 0.8:
                a = rng.choice(attrs)
                if a.ints:
                    i = rng.randrange(len(a.ints))
                    a.ints[i] = rng.choice((0, -1, -2, 1, 2, 3, 7, 1 << 31, -(1 << 40)))
                    if rng.random() < 0.3:
                        a.ints.append(rng.randint(-3, 3))
                elif a.type == onnx.AttributeProto.INT:
                    a.i = rng.choice((0, -1, 1, 2, 5, -7, 1 << 33))
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = rng.choice((0.0, -1.0, float("nan"), float("inf"), 1e30))
                elif a.type == onnx.AttributeProto.STRING:
                    a.s = rng.choice((b"", b"SAME_UPPER", b"VALID", b"bogus", b"\xff"))
                else:
                    a.type = rng.choice((1, 2, 3, 6, 7))
            else:
                node.attribute.append(helper.make_attribute(
                    rng.choice(("axis", "axes", "perm", "kernel_shape", "pads", "strides", "group", "bogus")),
                    rng.choice((0, -1, 3, [1, 1], [0, 1, 2], [2, 2, 2, 2], 1.5))))
        elif op == "dim":
            vis = [*graph.input, *graph.output, *graph.value_info]
            if vis:
                vi = rng.choice(vis)
                dims = vi.type.tensor_type.shape.dim
                if dims and rng.random() < 0.7:
                    d = rng.choice(dims)
                    d.dim_value = rng.choice((0, 1, 7, 1 << 20))
                else:
                    dims.add().dim_value = rng.choice((1, 2))
        elif op == "input" and nodes:
            node = rng.choice(nodes)
            names = [n for nd in nodes for n in nd.output] + [i.name for i in graph.input] + ["", "nowhere"]
            if node.input and rng.random() < 0.7:
                node.input[rng.randrange(len(node.input))] = rng.choice(names)
            elif node.input and rng.random() < 0.5:
                del node.input[-1]
            else:
                node.input.append(rng.choice(names))
        elif op == "output" and nodes:
            node = rng.choice(nodes)
            names = [n for nd in nodes for n in nd.output] + [i.name for i in graph.input] + ["", "extra"]
            if node.output:
                node.output[rng.randrange(len(node.output))] = rng.choice(names)
        elif op == "op_type" and nodes:
            rng.choice(nodes).op_type = rng.choice(("Relu", "Add", "MatMul", "Conv", "Softmax", "Identity",
                                                    "Gemm", "Loop", "If", "Reshape", "NoSuchOp", "Transpose"))
        elif op == "init_type" and graph.initializer:
            rng.choice(graph.initializer).data_type = rng.choice((0, 1, 2, 6, 7, 9, 10, 11, 16, 8, 99))
        elif op == "init_bytes" and graph.initializer:
            t = rng.choice(graph.initializer)
            if t.raw_data:
                t.raw_data = mutate_bytes(t.raw_data, rng, 1)
            else:
                del t.float_data[:]
        elif op == "init_dims" and graph.initializer:
            t = rng.choice(graph.initializer)
            if t.dims and rng.random() < 0.7:
                t.dims[rng.randrange(len(t.dims))] = rng.choice((0, 1, 3, -1, 1 << 40))
            else:
                t.dims.append(rng.choice((1, 2)))
        elif op == "drop_node" and graph.node:
            del graph.node[rng.randrange(len(graph.node))]
        elif op == "dup_node" and graph.node:
            graph.node.append(graph.node[rng.randrange(len(graph.node))])
        elif op == "opset":
            model.opset_import[0].version = rng.choice((1, 6, 9, 11, 13, 18, 21, 1000))
        elif op == "graph_io":
            if graph.output and rng.random() < 0.5:
                del graph.output[rng.randrange(len(graph.output))]
            elif graph.input:
                graph.output.append(rng.choice(graph.input))
        elif op == "domain" and nodes:
            rng.choice(nodes).domain = rng.choice(("ai.onnx", "com.microsoft", "ai.onyxrt", "bogus"))


def _all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    nodes = []
    for node in graph.node:
        nodes.append(node)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                nodes.extend(_all_nodes(a.g))
    return nodes


# ----------------------------------------------------------------------------- random graphs


class _Builder:
    """Grows a random graph one operator at a time, asking onnx's shape inference for the
    type and shape of each new value (values with unknown shapes are not reused)."""

    def __init__(self, rng: random.Random, opset: int) -> None:
        self.rng = rng
        self.opset = opset
        self.nodes: list[onnx.NodeProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.inits: dict[str, np.ndarray] = {}
        self.values: list[tuple[str, tuple[int, ...], int]] = []  # usable values
        self.feeds: dict[str, np.ndarray] = {}
        self.last: list[str] = []
        self._n = 0

    def name(self, base: str) -> str:
        self._n += 1
        return f"{base}{self._n}"

    def add_input(self, shape: Sequence[int], elem: int = TensorProto.FLOAT) -> str:
        name = self.name("in")
        self.inputs.append(_vi(name, elem, list(shape)))
        self.feeds[name] = _array(self.rng, shape, elem)
        self.values.append((name, tuple(shape), elem))
        return name

    def const(self, value: Any, dtype: Any = None) -> str:
        name = self.name("c")
        self.inits[name] = np.asarray(value, dtype=dtype)
        return name

    def const_or_input(self, value: np.ndarray) -> str:
        """A second operand: a constant most of the time, sometimes a graph input."""
        if self.rng.random() < 0.7:
            return self.const(value)
        name = self.name("in")
        self.inputs.append(_vi(name, helper.np_dtype_to_tensor_dtype(value.dtype), list(value.shape)))
        self.feeds[name] = value
        return name

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, domain: str = "", **attrs: Any) -> list[str]:
        outs = [self.name(op.lower() + "_") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=self.name(op), domain=domain, **attrs))
        self.last = outs
        return outs

    def pick(self, elem: int | None = None, min_rank: int = 0, max_rank: int = 8) -> tuple[str, tuple[int, ...], int]:
        candidates = [v for v in self.values if (elem is None or v[2] == elem) and min_rank <= len(v[1]) <= max_rank]
        if not candidates:
            shape = tuple(self.rng.randint(1, 4) for _ in range(max(min_rank, min(max_rank, self.rng.randint(1, 4)))))
            name = self.add_input(shape, elem or TensorProto.FLOAT)
            return name, shape, elem or TensorProto.FLOAT
        return self.rng.choice(candidates[-3:] if self.rng.random() < 0.7 else candidates)

    def model(self) -> onnx.ModelProto:
        # Every value nothing reads is an output: no node is dead, so no optimization
        # level can drop an invalid node that another level would have to run.
        read = {i for n in self.nodes for i in n.input}
        leaves = [o for n in self.nodes for o in n.output if o not in read]
        outputs = [_vi(n, TensorProto.UNDEFINED, None) for n in dict.fromkeys([*leaves, *self.last])]
        m = _model(self.nodes, self.inputs, outputs, self.inits, opset=self.opset, name="random")
        return _typed_outputs(m)

    def learn(self) -> bool:
        """Record the new node's outputs; False when inference failed or gave no shape."""
        try:
            m = _model(self.nodes, self.inputs, [], self.inits, opset=self.opset)
            inferred = infer_shapes(m, strict_mode=True, data_prop=True)
        except Exception:
            return False
        found = {vi.name: vi for vi in inferred.graph.value_info}
        ok = True
        for name in self.last:
            vi = found.get(name)
            if vi is None or not vi.type.HasField("tensor_type"):
                ok = False
                continue
            tt = vi.type.tensor_type
            if not tt.HasField("shape") or any(not d.HasField("dim_value") for d in tt.shape.dim):
                ok = False
                continue
            shape = tuple(d.dim_value for d in tt.shape.dim)
            if math.prod(shape) > 1 << 14:
                return False
            self.values.append((name, shape, tt.elem_type))
        return ok


def _typed_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Give graph outputs the element types inference finds (FLOAT when it finds none)."""
    try:
        inferred = infer_shapes(model, strict_mode=False)
        types = {vi.name: vi.type for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    except Exception:
        types = {}
    for out in model.graph.output:
        t = types.get(out.name)
        if t is not None and t.HasField("tensor_type") and t.tensor_type.elem_type:
            out.type.CopyFrom(t)
        else:
            out.type.tensor_type.elem_type = TensorProto.FLOAT
    return model


_UNARY = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Neg", "Floor", "Ceil", "Reciprocal", "Erf",
          "Sin", "Cos", "Softplus", "Sign", "Round", "Softsign", "Identity", "HardSwish", "Mish")
_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "Greater", "Mod", "PRelu")


def _broadcast_partner(rng: random.Random, shape: tuple[int, ...], valid: bool) -> tuple[int, ...]:
    if not valid:
        return tuple(d + rng.randint(1, 2) for d in shape) or (2,)
    drop = rng.randint(0, len(shape))
    return tuple(1 if rng.random() < 0.4 else d for d in shape[drop:])


def _g_unary(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick()
    op = b.rng.choice(_UNARY + ("LeakyRelu", "Elu", "HardSigmoid", "Clip", "Selu", "Celu", "IsNaN", "Not"))
    attrs: dict[str, Any] = {}
    inputs = [x]
    if op in ("LeakyRelu", "Elu", "Celu"):
        attrs["alpha"] = b.rng.choice((0.1, 1.0, -2.0, 0.0)) if not bad else float("nan")
    if op == "HardSigmoid":
        attrs.update(alpha=b.rng.uniform(-1, 1), beta=b.rng.uniform(-1, 1))
    if op == "Clip":
        lo, hi = sorted((b.rng.uniform(-2, 2), b.rng.uniform(-2, 2)))
        if bad:
            lo, hi = hi, lo
        inputs += [b.const(np.float32(lo)), b.const(np.float32(hi))] if b.rng.random() < 0.8 else ["", b.const(np.float32(hi))]
    if op == "Not":
        x = b.node("Cast", [x], to=TensorProto.BOOL)[0]
        inputs = [x]
    b.node(op, inputs, **attrs)


def _g_binary(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick()
    op = b.rng.choice(_BINARY + ("And", "Or", "Xor", "BitShift"))
    other_shape = _broadcast_partner(b.rng, shape, not bad)
    dtype = _NP_OF.get(elem, np.float32)
    other = _array(b.rng, other_shape, elem).astype(dtype)
    attrs: dict[str, Any] = {}
    if op == "Mod":
        attrs["fmod"] = 1 if np.issubdtype(dtype, np.floating) else b.rng.randint(0, 1)
    if op == "PRelu":
        other = np.abs(other) if other.dtype != np.bool_ else other
    if op in ("And", "Or", "Xor"):
        x = b.node("Cast", [x], to=TensorProto.BOOL)[0]
        other = other.astype(bool)
    if op == "BitShift":
        x = b.node("Cast", [x], to=TensorProto.UINT8)[0]
        other = np.abs(other).astype(np.uint8) % 8
        attrs["direction"] = b.rng.choice(("LEFT", "RIGHT") if not bad else ("UP",))
    y = b.const_or_input(other)
    ins = [x, y] if b.rng.random() < 0.7 or op == "PRelu" else [y, x]
    b.node(op, ins, **attrs)


def _g_matmul(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick(TensorProto.FLOAT, 1, 4)
    k = shape[-1]
    n = b.rng.randint(1, 5)
    wshape: tuple[int, ...] = (k + (1 if bad else 0), n)
    if b.rng.random() < 0.2 and len(shape) >= 3:
        wshape = (*shape[:-2], k, n)
    if b.rng.random() < 0.1:
        wshape = (k,)
    w = b.const_or_input(_array(b.rng, wshape, TensorProto.FLOAT))
    b.node("MatMul", [x, w])


def _g_gemm(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick(TensorProto.FLOAT, 2, 2 if not bad else 3)
    m, k = shape[0], shape[-1]
    ta, tb = b.rng.randint(0, 1), b.rng.randint(0, 1)
    if ta:
        m, k = k, m
    n = b.rng.randint(1, 5)
    w = _array(b.rng, (n, k) if tb else (k, n), TensorProto.FLOAT)
    ins = [x, b.const_or_input(w)]
    if b.rng.random() < 0.7:
        cshape = b.rng.choice(((n,), (1, n), (m, n), (m, 1), (), (n + 1,) if bad else (1,)))
        ins.append(b.const(_array(b.rng, cshape, TensorProto.FLOAT)))
    b.node("Gemm", ins, alpha=b.rng.choice((1.0, 0.5, -2.0)), beta=b.rng.choice((1.0, 0.0, 3.0)), transA=ta, transB=tb)


def _g_reshape(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick()
    size = math.prod(shape)
    target: list[int] = []
    rest = size
    for _ in range(b.rng.randint(0, 3)):
        divisors = [d for d in range(1, rest + 1) if rest % d == 0]
        d = b.rng.choice(divisors)
        target.append(d)
        rest //= d
    target.append(rest)
    b.rng.shuffle(target)
    if target and b.rng.random() < 0.3:
        target[b.rng.randrange(len(target))] = -1
    if len(target) <= len(shape) and b.rng.random() < 0.2:
        i = b.rng.randrange(len(target))
        if i < len(shape) and target[i] == shape[i]:
            target[i] = 0
    if bad:
        target = b.rng.choice(([size + 1], [-1, -1], [0] * (len(shape) + 2), [-2], [size, 0]))
    attrs: dict[str, Any] = {"allowzero": b.rng.randint(0, 1)} if b.rng.random() < 0.2 else {}
    b.node("Reshape", [x, b.const(np.array(target, np.int64))], **attrs)


def _g_transpose(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick()
    perm = list(range(len(shape)))
    b.rng.shuffle(perm)
    if bad:
        perm = b.rng.choice((perm + [0], perm[:-1] + [perm[0]] if perm else [1], [len(shape)]))
    attrs: dict[str, Any] = {"perm": perm} if b.rng.random() < 0.85 or bad else {}
    b.node("Transpose", [x], **attrs)


def _g_concat(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick(min_rank=1)
    axis = b.rng.randrange(-len(shape), len(shape))
    parts = [x]
    for _ in range(b.rng.randint(1, 2)):
        s = list(shape)
        s[axis] = b.rng.randint(0, 3)
        if bad:
            s[(axis + 1) % len(s)] += 1
            if len(s) == 1:
                s.append(2)
        parts.append(b.const_or_input(_array(b.rng, s, elem)))
    b.node("Concat", parts, axis=axis if not (bad and b.rng.random() < 0.3) else len(shape))


def _g_slice(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick(min_rank=1)
    axes = b.rng.sample(range(len(shape)), b.rng.randint(1, len(shape)))
    starts, ends, steps = [], [], []
    for a in axes:
        d = shape[a]
        step = b.rng.choice((1, 1, 2, -1, -2, 3))
        starts.append(b.rng.choice((0, 1, -1, d, -d - 5, 1 << 40, d - 1)))
        ends.append(b.rng.choice((d, -1, 0, 1 << 62, -(1 << 62), 2, -d - 1)))
        steps.append(step if not bad else 0)
    ins = [x, b.const(np.array(starts, np.int64)), b.const(np.array(ends, np.int64))]
    if b.rng.random() < 0.8:
        ins.append(b.const(np.array([a - len(shape) if b.rng.random() < 0.3 else a for a in axes], np.int64)))
        if b.rng.random() < 0.7:
            ins.append(b.const(np.array(steps, np.int64)))
    if bad and b.rng.random() < 0.5:
        ins[1] = b.const(np.array(starts + [0], np.int64))
    b.node("Slice", ins)


def _g_gather(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick(min_rank=1)
    axis = b.rng.randrange(-len(shape), len(shape))
    d = shape[axis]
    ishape = tuple(b.rng.randint(1, 3) for _ in range(b.rng.randint(0, 2)))
    gen = np.random.default_rng(b.rng.getrandbits(32))
    idx = gen.integers(-d, d, size=ishape)
    if bad:
        idx = idx + d * 3
    dtype = b.rng.choice((np.int64, np.int32))
    op = b.rng.choice(("Gather", "Gather", "GatherElements")) if not bad else "Gather"
    if op == "GatherElements":
        idx = gen.integers(-d, d, size=shape)
    b.node(op, [x, b.const(idx.astype(dtype))], axis=axis)


def _g_conv(b: _Builder, bad: bool) -> None:
    rank = b.rng.choice((3, 4, 4))
    spatial = tuple(b.rng.randint(1, 6) for _ in range(rank - 2))
    group = b.rng.choice((1, 1, 2))
    c_in = group * b.rng.randint(1, 2)
    c_out = group * b.rng.randint(1, 2)
    x = b.add_input((b.rng.randint(1, 2), c_in, *spatial))
    kernel = tuple(b.rng.randint(1, 3) for _ in spatial)
    w = _array(b.rng, (c_out, c_in // group + (1 if bad else 0), *kernel), TensorProto.FLOAT)
    attrs: dict[str, Any] = {"group": group}
    if b.rng.random() < 0.5:
        attrs["pads"] = [b.rng.randint(0, 2) for _ in range(2 * len(spatial))]
    elif b.rng.random() < 0.5:
        attrs["auto_pad"] = b.rng.choice(("SAME_UPPER", "SAME_LOWER", "VALID"))
    if b.rng.random() < 0.5:
        attrs["strides"] = [b.rng.randint(1, 3) for _ in spatial]
    if b.rng.random() < 0.3:
        attrs["dilations"] = [b.rng.randint(1, 2) for _ in spatial]
    if b.rng.random() < 0.3:
        attrs["kernel_shape"] = list(kernel) if not bad else [k + 1 for k in kernel]
    ins = [x, b.const_or_input(w)]
    if b.rng.random() < 0.6:
        ins.append(b.const(_array(b.rng, (c_out,), TensorProto.FLOAT)))
    b.node(b.rng.choice(("Conv", "Conv", "Conv", "ConvTranspose")) if not bad else "Conv", ins, **attrs)


def _g_pool(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick(TensorProto.FLOAT, 3, 4)
    spatial = shape[2:]
    op = b.rng.choice(("MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool"))
    if op.startswith("Global"):
        b.node(op, [x])
        return
    kernel = [b.rng.randint(1, max(1, d)) for d in spatial]
    if bad:
        kernel = b.rng.choice(([k + 5 for k in kernel], kernel + [1], [0] * len(kernel)))
    attrs: dict[str, Any] = {"kernel_shape": kernel}
    if b.rng.random() < 0.5:
        attrs["strides"] = [b.rng.randint(1, 2) for _ in spatial]
    if b.rng.random() < 0.5:
        attrs["pads"] = [b.rng.randint(0, k - 1) for k in kernel] * 2
    if op != "LpPool" and b.rng.random() < 0.3:
        attrs["ceil_mode"] = 1
    if op == "AveragePool" and b.rng.random() < 0.5:
        attrs["count_include_pad"] = 1
    if op == "MaxPool" and b.rng.random() < 0.3:
        attrs["dilations"] = [b.rng.randint(1, 2) for _ in spatial]
    n_out = 2 if op == "MaxPool" and b.rng.random() < 0.2 else 1
    b.node(op, [x], n_out=n_out, **attrs)


def _g_reduce(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick()
    op = b.rng.choice(("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2",
                       "ReduceLogSumExp", "ArgMax", "ArgMin"))
    rank = len(shape)
    axes = b.rng.sample(range(-rank, rank), b.rng.randint(0, rank)) if rank else []
    axes = list(dict.fromkeys(a % rank for a in axes)) if rank else []
    if bad:
        axes = [rank + 2]
    attrs: dict[str, Any] = {"keepdims": b.rng.randint(0, 1)}
    if op.startswith("Arg"):
        b.node(op, [x], axis=(axes[0] if axes else 0), select_last_index=b.rng.randint(0, 1), **attrs)
        return
    if op == "ReduceSum" or b.opset >= 18:
        ins = [x]
        if axes or b.rng.random() < 0.3:
            ins.append(b.const(np.array(axes, np.int64)))
        if b.rng.random() < 0.2:
            attrs["noop_with_empty_axes"] = 1
        b.node(op, ins, **attrs)
    else:
        if axes:
            attrs["axes"] = axes
        b.node(op, [x], **attrs)


def _g_softmax(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick(TensorProto.FLOAT)
    rank = max(len(shape), 1)
    axis = b.rng.randrange(-rank, rank) if not bad else rank + 1
    b.node(b.rng.choice(("Softmax", "LogSoftmax", "Hardmax")), [x], axis=axis)


def _g_cast(b: _Builder, bad: bool) -> None:
    x, _, _ = b.pick()
    to = b.rng.choice((TensorProto.FLOAT, TensorProto.INT64, TensorProto.INT32, TensorProto.BOOL,
                       TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.UINT8, TensorProto.INT8))
    b.node("Cast", [x], to=to if not bad else b.rng.choice((0, 8, 99)))


def _g_where(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick()
    cond = _array(b.rng, _broadcast_partner(b.rng, shape, not bad), TensorProto.BOOL)
    other = _array(b.rng, _broadcast_partner(b.rng, shape, True), elem)
    b.node("Where", [b.const_or_input(cond), x, b.const(other)])


def _g_expand(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick()
    target = [d if d != 1 or b.rng.random() < 0.5 else b.rng.randint(1, 3) for d in shape]
    target = [b.rng.randint(1, 2) for _ in range(b.rng.randint(0, 1))] + target
    if bad:
        target = [d + 1 for d in shape] or [-1]
    b.node("Expand", [x, b.const(np.array(target, np.int64))])


def _g_pad(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick(min_rank=1)
    mode = b.rng.choice(("constant", "constant", "reflect", "edge", "wrap"))
    rank = len(shape)
    pads = [b.rng.randint(-1 if mode == "constant" else 0, 2) for _ in range(2 * rank)]
    if mode == "reflect":
        pads = [min(p, shape[i % rank] - 1) for i, p in enumerate(pads)]
    if bad:
        pads = pads[:-1] if b.rng.random() < 0.5 else [-(d + 2) for d in shape] * 2
    ins = [x, b.const(np.array(pads, np.int64))]
    if mode == "constant" and b.rng.random() < 0.5:
        ins.append(b.const(_array(b.rng, (), elem)))
    b.node("Pad", ins, mode=mode)


def _g_shape_ops(b: _Builder, bad: bool) -> None:
    x, shape, elem = b.pick()
    rank = len(shape)
    op = b.rng.choice(("Flatten", "Squeeze", "Unsqueeze", "Tile", "Split", "TopK", "CumSum", "Shape", "Size",
                       "DepthToSpace", "Trilu", "ReverseSequence" if False else "Range"))
    if op == "Flatten":
        b.node(op, [x], axis=b.rng.randint(-rank, rank) if not bad else rank + 1)
    elif op == "Squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        axes = ones[: b.rng.randint(0, len(ones))] if not bad else [0 if shape and shape[0] != 1 else rank]
        b.node(op, [x, b.const(np.array(axes, np.int64))] if axes or b.rng.random() < 0.5 else [x])
    elif op == "Unsqueeze":
        axes = sorted(b.rng.sample(range(rank + 2), b.rng.randint(1, 2))) if not bad else [0, 0]
        b.node(op, [x, b.const(np.array(axes, np.int64))])
    elif op == "Tile":
        reps = [b.rng.randint(1, 2) for _ in shape] if not bad else [-1] * rank + [1]
        b.node(op, [x, b.const(np.array(reps, np.int64))])
    elif op == "Split" and rank:
        axis = b.rng.randrange(rank)
        d = shape[axis]
        if b.rng.random() < 0.5 or d < 2:
            b.node(op, [x], n_out=1 if not bad else 3, axis=axis)
        else:
            cut = b.rng.randint(1, d - 1)
            sizes = [cut, d - cut] if not bad else [cut, d]
            b.node(op, [x, b.const(np.array(sizes, np.int64))], n_out=2, axis=axis)
    elif op == "TopK" and rank:
        axis = b.rng.randrange(rank)
        k = b.rng.randint(0, shape[axis]) if not bad else shape[axis] + 1
        # sorted=1: with sorted=0 the order of the k results is unspecified
        b.node(op, [x, b.const(np.array([k], np.int64))], n_out=2, axis=axis, largest=b.rng.randint(0, 1))
    elif op == "CumSum" and rank:
        b.node(op, [x, b.const(np.array(b.rng.randrange(-rank, rank) if not bad else rank, np.int64))],
               exclusive=b.rng.randint(0, 1), reverse=b.rng.randint(0, 1))
    elif op == "DepthToSpace" and rank == 4:
        b.node(op, [x], blocksize=b.rng.choice((1, 2)) if not bad else 0, mode=b.rng.choice(("DCR", "CRD")))
    elif op == "Trilu" and rank >= 2:
        b.node(op, [x, b.const(np.array(b.rng.randint(-2, 2), np.int64))], upper=b.rng.randint(0, 1))
    elif op == "Range":
        start, limit, delta = (b.rng.choice((0, 2, -1)), b.rng.choice((4, -3, 5)), b.rng.choice((1, -1, 2)) if not bad else 0)
        b.node(op, [b.const(np.float32(start)), b.const(np.float32(limit)), b.const(np.float32(delta))])
    else:
        b.node(op if op in ("Shape", "Size") else "Shape", [x])


def _g_norm(b: _Builder, bad: bool) -> None:
    x, shape, _ = b.pick(TensorProto.FLOAT, 2, 4)
    op = b.rng.choice(("BatchNormalization", "LayerNormalization", "InstanceNormalization"))
    c = shape[1]
    if op == "LayerNormalization":
        axis = b.rng.randrange(-len(shape), len(shape)) if not bad else len(shape)
        norm_shape = shape[axis:]
        ins = [x, b.const(_array(b.rng, norm_shape, TensorProto.FLOAT))]
        if b.rng.random() < 0.5:
            ins.append(b.const(_array(b.rng, norm_shape, TensorProto.FLOAT)))
        b.node(op, ins, axis=axis, epsilon=b.rng.choice((1e-5, 1e-3)))
        return
    cc = c + (1 if bad else 0)
    params = [b.const(_array(b.rng, (cc,), TensorProto.FLOAT)) for _ in range(2)]
    if op == "BatchNormalization":
        params += [b.const(_array(b.rng, (cc,), TensorProto.FLOAT)),
                   b.const(np.abs(_array(b.rng, (cc,), TensorProto.FLOAT)) + 0.1)]
    b.node(op, [x, *params], epsilon=b.rng.choice((1e-5, 0.1)))


_GENERATORS: tuple[Callable[[_Builder, bool], None], ...] = (
    _g_unary, _g_binary, _g_matmul, _g_gemm, _g_reshape, _g_transpose, _g_concat, _g_slice, _g_gather,
    _g_conv, _g_pool, _g_reduce, _g_softmax, _g_cast, _g_where, _g_expand, _g_pad, _g_shape_ops, _g_norm,
)


def random_graph(rng: random.Random) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A random chain of 1-5 operators and feeds for its inputs (~15% of the operators get
    a deliberately invalid attribute or operand)."""
    b = _Builder(rng, rng.choice((_OPSET, _OPSET, 13, 18, 20)))
    dtype = rng.choice((TensorProto.FLOAT,) * 6 + (TensorProto.INT64, TensorProto.INT32, TensorProto.DOUBLE,
                                                    TensorProto.FLOAT16, TensorProto.BOOL))
    b.add_input(tuple(rng.randint(1, 4) for _ in range(rng.randint(0, 4))), dtype)
    for _ in range(rng.randint(1, 5)):
        bad = rng.random() < 0.15
        try:
            rng.choice(_GENERATORS)(b, bad)
        except (ValueError, IndexError, ZeroDivisionError):
            break  # the generator could not fit this value (e.g. empty range): stop here
        if bad or not b.learn():
            break
    if not b.nodes:
        b.node("Identity", [b.values[0][0]])
    return b.model(), b.feeds


# ----------------------------------------------------------------------------- fusion patterns


def fusion_pattern(rng: random.Random) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """One pattern the optimizer fuses, perturbed at random so that some must not fuse."""
    b = _Builder(rng, rng.choice((_OPSET, _OPSET, 13, 18, 20)))
    choice = rng.choice(("conv_bn", "conv_act", "matmul", "matmul", "layer_norm", "gelu", "gelu_tanh"))
    perturb = rng.random() < 0.5
    extra_outputs: list[str] = []

    def maybe_leak(name: str) -> None:  # another reader of an inner value: must not fuse away
        if perturb and rng.random() < 0.3:
            extra_outputs.append(name)

    def c(value: Any) -> str:
        return b.const(np.asarray(value, np.float32))

    if choice in ("conv_bn", "conv_act"):
        c_in, c_out = rng.randint(1, 3), rng.randint(1, 4)
        x = b.add_input((rng.randint(1, 2), c_in, rng.randint(2, 5), rng.randint(2, 5)))
        w = b.const(_array(rng, (c_out, c_in, 3, 3), TensorProto.FLOAT))
        ins = [x, w] + ([b.const(_array(rng, (c_out,), TensorProto.FLOAT))] if rng.random() < 0.6 else [])
        h = b.node("Conv", ins, pads=[1, 1, 1, 1])[0]
        maybe_leak(h)
        if choice == "conv_bn":
            cc = c_out if not (perturb and rng.random() < 0.2) else c_out + 1
            mean = b.const(_array(rng, (cc,), TensorProto.FLOAT)) if not (perturb and rng.random() < 0.3) else \
                b.const_or_input(_array(rng, (cc,), TensorProto.FLOAT))
            var = np.abs(_array(rng, (cc,), TensorProto.FLOAT)) + (0.1 if not perturb else rng.choice((0.0, 0.1)))
            h = b.node("BatchNormalization", [h, c(_array(rng, (cc,), 1)), c(_array(rng, (cc,), 1)), mean, c(var)],
                       epsilon=rng.choice((1e-5, 0.0, 1e-3)))[0]
            maybe_leak(h)
        if rng.random() < 0.5:
            res = b.add_input((1, c_out, 1, 1)) if perturb and rng.random() < 0.3 else \
                b.const_or_input(_array(rng, (1, c_out, 1, 1) if rng.random() < 0.5 else (c_out, 1, 1), 1))
            h = b.node("Add", [h, res] if rng.random() < 0.5 else [res, h])[0]
            maybe_leak(h)
        act = rng.choice(("Relu", "Sigmoid", "Tanh", "LeakyRelu", "Clip", "HardSigmoid", "Elu", "Softplus"))
        attrs: dict[str, Any] = {}
        ins = [h]
        if act == "LeakyRelu":
            attrs["alpha"] = rng.choice((0.01, 0.2))
        if act == "HardSigmoid":
            attrs.update(alpha=0.2, beta=0.5)
        if act == "Clip":
            ins += [c(-1.0), c(rng.choice((1.0, 6.0)))] if not perturb else [c(0.0), b.add_input(())]
        b.node(act, ins, **attrs)
    elif choice == "matmul":
        rank = rng.choice((2, 2, 3, 4))
        m, k, n = rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4)
        batch = tuple(rng.randint(1, 3) for _ in range(rank - 2))
        a = b.add_input((*batch, m, k))
        bshape = (k, n) if rng.random() < 0.5 else (*batch, k, n)
        if rng.random() < 0.4:  # B arrives transposed
            perm = list(range(len(bshape)))
            perm[-2:] = perm[-1], perm[-2]
            if perturb and rng.random() < 0.3:
                rng.shuffle(perm)
            src_shape = tuple(bshape[p] for p in np.argsort(perm))
            bt = b.add_input(src_shape)
            bb = b.node("Transpose", [bt], perm=perm)[0] if rng.random() < 0.8 or len(perm) != 2 else \
                b.node("Transpose", [bt])[0]
            maybe_leak(bb)
        else:
            bb = b.const_or_input(_array(rng, bshape, TensorProto.FLOAT))
        if rng.random() < 0.3:  # A arrives transposed
            at = b.add_input((*batch, k, m))
            perm = list(range(rank))
            perm[-2:] = perm[-1], perm[-2]
            a = b.node("Transpose", [at], perm=perm)[0]
        h = b.node("MatMul", [a, bb])[0]
        maybe_leak(h)
        if rng.random() < 0.6:
            op = rng.choice(("Mul", "Div"))
            scale = rng.choice((0.125, 2.0, 0.0, -1.0)) if not perturb else rng.choice((0.0, [1.0, 2.0][:n], 3.0))
            sc = np.asarray(scale, np.float32)
            if perturb and rng.random() < 0.3:
                sc = sc.reshape((1,) * rng.randint(0, rank + 1)) if sc.size == 1 else sc
            sname = b.const(sc) if not (perturb and rng.random() < 0.2) else b.add_input(())
            h = b.node(op, [h, sname] if rng.random() < 0.7 else [sname, h])[0]
            maybe_leak(h)
        if rng.random() < 0.7:
            bias_shape = rng.choice(((n,), (1, n), (m, n) if perturb else (n,), (1,) if perturb else (n,),
                                     (2, 1, n) if perturb else (1, 1, n)))
            bias = _array(rng, bias_shape, TensorProto.FLOAT)
            if perturb and rng.random() < 0.2:
                bias = bias.astype(np.float64)
            bn = b.const(bias) if not (perturb and rng.random() < 0.2) else b.add_input(bias_shape)
            b.node("Add", [h, bn] if rng.random() < 0.5 else [bn, h])
    elif choice == "layer_norm":
        rank = rng.randint(2, 4)
        shape = tuple(rng.randint(1, 5) for _ in range(rank))
        x = b.add_input(shape)
        axis = -1 if not (perturb and rng.random() < 0.4) else rng.choice((0, -2, 1))
        red_attrs: dict[str, Any] = {}
        red_ins: list[str] = []
        if b.opset >= 18:
            red_ins = [b.const(np.array([axis], np.int64))]
        else:
            red_attrs = {"axes": [axis]}
        mean = b.node("ReduceMean", [x, *red_ins], **red_attrs)[0]
        d = b.node("Sub", [x, mean])[0]
        maybe_leak(d)
        p = rng.choice((2.0, 2.0, 3.0)) if perturb else 2.0
        d2 = b.node("Pow", [d, c(p)])[0]
        var = b.node("ReduceMean", [d2, *red_ins], **red_attrs)[0]
        maybe_leak(var)
        eps = b.node("Add", [var, c(rng.choice((1e-5, 1e-12, 0.5)))])[0]
        std = b.node("Sqrt", [eps])[0]
        h = b.node("Div", [d, std])[0]
        if rng.random() < 0.7:
            gshape = (shape[-1],) if not (perturb and rng.random() < 0.4) else shape
            h = b.node("Mul", [h, c(_array(rng, gshape, 1))])[0]
            if rng.random() < 0.7:
                b.node("Add", [h, c(_array(rng, (shape[-1],), 1))])
    else:
        shape = tuple(rng.randint(1, 4) for _ in range(rng.randint(1, 3)))
        x = b.add_input(shape)
        if choice == "gelu":
            div = math.sqrt(2) if not (perturb and rng.random() < 0.4) else 1.5
            h = b.node("Div", [x, c(div)])[0]
            h = b.node("Erf", [h])[0]
            maybe_leak(h)
            h = b.node("Add", [h, c(1.0)])[0]
            if rng.random() < 0.5:
                h = b.node("Mul", [x, h])[0]
                b.node("Mul", [h, c(0.5 if not perturb else 0.25)])
            else:
                h2 = b.node("Mul", [x, c(0.5)])[0]
                b.node("Mul", [h2, h])
        else:
            cube = b.node("Pow", [x, c(3.0)])[0]
            h = b.node("Mul", [cube, c(0.044715 if not perturb else 0.05)])[0]
            h = b.node("Add", [x, h])[0]
            h = b.node("Mul", [h, c(math.sqrt(2 / math.pi))])[0]
            h = b.node("Tanh", [h])[0]
            maybe_leak(h)
            h = b.node("Add", [h, c(1.0)])[0]
            h = b.node("Mul", [x, h])[0]
            b.node("Mul", [h, c(0.5)])
    b.last = [*b.last, *extra_outputs]
    return b.model(), b.feeds


# ----------------------------------------------------------------------------- bad feeds


def _bad_feeds(rng: random.Random, model: onnx.ModelProto) -> tuple[Any, Any]:
    feeds: Any = _declared_feeds(model, rng)
    names = list(feeds)
    output_names: Any = None
    what = rng.choice(("dtype", "rank", "dim", "missing", "extra", "type", "none", "outputs", "non_contiguous",
                       "object", "scalar", "empty", "not_dict", "nan", "list"))
    target = rng.choice(names) if names else None
    if what == "dtype" and target:
        feeds[target] = feeds[target].astype(rng.choice((np.float64, np.int32, np.int64, np.float16, np.bool_,
                                                         np.uint8, np.complex64)))
    elif what == "rank" and target:
        feeds[target] = feeds[target].reshape((*feeds[target].shape, 1)) if rng.random() < 0.5 else \
            feeds[target].reshape(-1)[:1].reshape(())
    elif what == "dim" and target:
        shape = list(feeds[target].shape)
        if shape:
            shape[rng.randrange(len(shape))] += rng.randint(1, 3)
        feeds[target] = _array(rng, shape, helper.np_dtype_to_tensor_dtype(feeds[target].dtype))
    elif what == "missing" and target:
        del feeds[target]
    elif what == "extra":
        feeds[rng.choice(("bogus", names[0] + "_" if names else "x", "", "0"))] = np.zeros(2, np.float32)
        if rng.random() < 0.2:
            feeds[3] = np.zeros(1, np.float32)
    elif what == "type" and target:
        feeds[target] = rng.choice(("a string", b"bytes", {"a": 1}, object(), 3 + 4j, [[1, 2], [3]], set()))
    elif what == "none" and target:
        feeds[target] = None
    elif what == "outputs":
        output_names = rng.choice((["nope"], [3], [None], "z", [b"z"], [""], [[]]))
    elif what == "non_contiguous" and target and feeds[target].ndim:
        arr = feeds[target]
        feeds[target] = np.repeat(arr, 2, axis=-1)[..., ::2]
    elif what == "object" and target:
        feeds[target] = feeds[target].astype(object)
    elif what == "scalar" and target:
        feeds[target] = rng.choice((1, 1.5, True, np.float32(2)))
    elif what == "empty" and target:
        shape = list(feeds[target].shape)
        if shape:
            shape[0] = 0
        feeds[target] = np.zeros(shape, feeds[target].dtype)
    elif what == "not_dict":
        feeds = rng.choice((list(feeds.values()), None, "x", [("x", 1)]))
    elif what == "nan" and target and feeds[target].dtype.kind == "f":
        feeds[target] = np.full(feeds[target].shape, rng.choice((np.nan, np.inf, -np.inf)), feeds[target].dtype)
    elif what == "list" and target:
        feeds[target] = feeds[target].tolist()
    return feeds, output_names


# ----------------------------------------------------------------------------- preparing cases


def prepare_case(case: FuzzCase) -> PreparedCase:
    """Build the model, feeds and options of ``case`` (deterministically)."""
    rng = case.rng()
    seeds = seed_models()
    if case.kind == "random_graph":
        model, feeds = random_graph(rng)
        return PreparedCase(_describe(model), model.SerializeToString(), feeds)
    if case.kind == "fusion_pattern":
        model, feeds = fusion_pattern(rng)
        return PreparedCase(_describe(model), model.SerializeToString(), feeds)
    name = rng.choice(sorted(seeds))
    data = seeds[name]
    if case.kind == "bad_feeds":
        model = onnx.load_from_string(data)
        feeds, outputs = _bad_feeds(rng, model)
        source, folder = _materialize(name, data)
        return PreparedCase(f"{name} with hostile feeds", source, feeds, outputs, ("ORT_ENABLE_ALL",), False, folder)
    if case.kind == "mutated_bytes":
        mutated = mutate_bytes(data, rng)
        how = "byte-mutated"
    elif case.kind == "mutated_proto":
        proto = onnx.load_from_string(data)
        _mutate_proto(proto, rng)
        mutated = proto.SerializeToString()
        how = "proto-mutated"
    else:
        raise ValueError(f"unknown fuzz case kind {case.kind!r}; expected one of {KINDS}")
    try:
        feeds = _declared_feeds(onnx.load_from_string(mutated), rng)
    except Exception:
        feeds = {}
    source, folder = _materialize(name, mutated, rng)
    # The oracle is not asked about mutated models: onnxruntime itself may crash on some.
    return PreparedCase(f"{how} {name}", source, feeds, None, oracle=False, folder=folder)


def _describe(model: onnx.ModelProto) -> str:
    return " -> ".join(n.op_type for n in model.graph.node) or "(no nodes)"


# ----------------------------------------------------------------------------- running


class _Foreign(Exception):
    def __init__(self, stage: str, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.stage = stage
        self.tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _run_onyx(prepared: PreparedCase, level: str) -> list[Any]:
    import onyxrt
    from onyxrt.errors import OnyxError

    opts = onyxrt.SessionOptions()
    opts.graph_optimization_level = getattr(onyxrt.GraphOptimizationLevel, level)
    opts.intra_op_num_threads = 1
    try:
        sess = onyxrt.InferenceSession(prepared.model, opts, providers=["CPUExecutionProvider"])
    except OnyxError:
        raise
    except Exception as exc:
        raise _Foreign("create", exc) from exc
    # A model may legitimately run for ever (a Loop of 2**60 iterations, in onnxruntime
    # too); what must hold is that RunOptions.terminate stops it. A watchdog sets it after
    # RUN_BOUND_S: the run then ends with RunTerminated (a typed error), and a run that
    # ignores it is a hang the campaign's timeout catches.
    run_options = onyxrt.RunOptions()
    timer = threading.Timer(RUN_BOUND_S, lambda: setattr(run_options, "terminate", True))
    timer.daemon = True
    timer.start()
    try:
        return list(sess.run(prepared.output_names, prepared.feeds, run_options))
    except OnyxError:
        raise
    except Exception as exc:
        raise _Foreign("run", exc) from exc
    finally:
        timer.cancel()


def _run_oracle(prepared: PreparedCase) -> list[Any] | None:
    """onnxruntime's outputs, or None where it refuses the model or the feeds."""
    try:
        import onnxruntime
    except ImportError:
        return None
    model = prepared.model
    proto = (onnx.load_from_string(model) if isinstance(model, bytes)
             else onnx.load(model, load_external_data=False))
    if may_abort(proto):
        # onnxruntime runs the same onnx shape inference and aborts the whole process on
        # these models (a C++ assertion); onyxrt runs it in a child process.
        return None
    opts = onnxruntime.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 4
    # Unoptimized: onnxruntime 1.31's layer-normalization fusion ignores the Pow exponent
    # (x - mean) ** 3 fuses as if it were ** 2; its plain kernels are the reference.
    opts.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        sess = onnxruntime.InferenceSession(prepared.model, opts, providers=["CPUExecutionProvider"])
        return list(sess.run(prepared.output_names, prepared.feeds))
    except Exception:
        return None


def _differs(a: list[Any], b: list[Any]) -> str:
    """Why two output lists differ ('' when they agree within tolerance)."""
    if len(a) != len(b):
        return f"{len(a)} outputs vs {len(b)}"
    for i, (x, y) in enumerate(zip(a, b)):
        if not isinstance(x, np.ndarray) or not isinstance(y, np.ndarray):
            if type(x) is not type(y):
                return f"output {i}: {type(x).__name__} vs {type(y).__name__}"
            continue
        if x.shape != y.shape:
            return f"output {i}: shape {x.shape} vs {y.shape}"
        if x.dtype != y.dtype:
            return f"output {i}: dtype {x.dtype} vs {y.dtype}"
        if x.dtype.kind in "fc":
            xf, yf = x.astype(np.float64), y.astype(np.float64)
            tol = _RTOL * (10 if x.dtype == np.float16 else 1)
            if not np.allclose(xf, yf, rtol=tol, atol=_ATOL * max(1.0, float(np.nanmax(np.abs(xf[np.isfinite(xf)]), initial=0.0)) * tol), equal_nan=True):
                with np.errstate(invalid="ignore"):
                    worst = float(np.nanmax(np.abs(xf - yf), initial=0.0))
                return f"output {i}: values differ (max abs diff {worst:.3g})"
        elif not np.array_equal(x, y):
            return f"output {i}: values differ"
    return ""


def run_case(case: FuzzCase, oracle: bool = True, on_oracle: Callable[[], None] | None = None,
             on_prepared: Callable[[], None] | None = None) -> CaseResult:
    """Build and run ``case`` in this process; classify what happened.

    ``on_prepared`` is called once the case is built and ``on_oracle`` just before
    onnxruntime is asked: a campaign's worker uses them to tell a crash of onyxrt from one
    of the generator (onnx's shape inference builds random graphs) or of onnxruntime.
    """
    if case.kind in _SELF_TESTS:
        if on_prepared is not None:
            on_prepared()
        _SELF_TESTS[case.kind]()
    t0 = time.perf_counter()
    prepared = prepare_case(case)
    if on_prepared is not None:
        on_prepared()
    try:
        outcome = _classify(case, prepared, oracle, on_oracle)
    finally:
        prepared.cleanup()
    outcome.seconds = time.perf_counter() - t0
    return outcome


def _hang() -> None:
    while True:
        time.sleep(1)


#: Kinds that test the campaign runner itself: it must count these as a hang and a crash.
_SELF_TESTS: dict[str, Callable[[], None]] = {"selftest_hang": _hang, "selftest_crash": lambda: os._exit(3)}


def _classify(case: FuzzCase, prepared: PreparedCase, oracle: bool,
              on_oracle: Callable[[], None] | None) -> CaseResult:
    from onyxrt.errors import OnyxError

    results: dict[str, list[Any] | OnyxError] = {}
    for level in prepared.levels:
        try:
            with np.errstate(all="ignore"):
                results[level] = _run_onyx(prepared, level)
        except _Foreign as exc:
            return CaseResult(case, "foreign_exception", exc.tb, exc.stage)
        except OnyxError as exc:
            results[level] = exc
        except Exception:  # raised by the fuzz harness itself: still reported
            return CaseResult(case, "foreign_exception", traceback.format_exc(), "harness")
    first = results[prepared.levels[0]]
    for level in prepared.levels[1:]:
        other = results[level]
        if isinstance(first, OnyxError) != isinstance(other, OnyxError):
            ran = prepared.levels[0] if not isinstance(first, OnyxError) else level
            failed = level if ran == prepared.levels[0] else prepared.levels[0]
            err = results[failed]
            return CaseResult(case, "mismatch", f"{ran} ran but {failed} raised {type(err).__name__}: {err}", "run")
        if not isinstance(first, OnyxError) and not isinstance(other, OnyxError):
            why = _differs(first, other)
            if why:
                return CaseResult(case, "mismatch", f"{prepared.levels[0]} vs {level}: {why}", "run")
    want_oracle = oracle and prepared.oracle
    if want_oracle and on_oracle is not None:
        on_oracle()
    if isinstance(first, OnyxError):
        oracle_ran = want_oracle and _run_oracle(prepared) is not None
        return CaseResult(case, "typed_error", f"{type(first).__name__}: {first}", "", oracle_ran=oracle_ran)
    if want_oracle:
        expected = _run_oracle(prepared)
        if expected is not None:
            why = _differs(first, expected)
            if why:
                return CaseResult(case, "mismatch", f"onyxrt vs onnxruntime: {why}", "oracle")
    return CaseResult(case, "ok")


# ----------------------------------------------------------------------------- campaigns


def campaign_cases(n: int, seed: int, kinds: Sequence[str] = KINDS,
                   weights: Sequence[float] | None = None) -> Iterator[FuzzCase]:
    """``n`` cases: kinds drawn with ``weights`` by a generator seeded with ``seed``."""
    rng = random.Random(seed)
    for i in range(n):
        yield FuzzCase(rng.choices(list(kinds), weights=weights)[0], seed, i)


@record
class CampaignReport:
    """Counts per kind and outcome, and every result that is a bug or a mismatch."""

    seed: int
    results: int = 0
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    oracle_ran_on_typed_errors: int = 0
    findings: list[CaseResult] = field(default_factory=list)
    seconds: float = 0.0

    def add(self, result: CaseResult) -> None:
        self.results += 1
        self.counts[(result.case.kind, result.outcome)] += 1
        if result.outcome == "typed_error":
            self.errors[result.detail.split(":", 1)[0]] += 1
            self.oracle_ran_on_typed_errors += result.oracle_ran
        if result.outcome not in ("ok", "typed_error"):
            self.findings.append(result)

    def total(self, outcome: str) -> int:
        return sum(v for (_, o), v in self.counts.items() if o == outcome)

    @property
    def bugs(self) -> list[CaseResult]:
        return [r for r in self.findings if r.is_bug]

    def table(self) -> str:
        kinds = sorted({k for k, _ in self.counts})
        outcomes = [o for o in OUTCOMES if self.total(o) or o in ("ok", "typed_error", *BUGS)]
        width = max([len(k) for k in kinds] + [5])
        lines = [" ".join([f"{'kind':<{width}}"] + [f"{o:>17}" for o in outcomes] + [f"{'total':>8}"])]
        for k in [*kinds, "TOTAL"]:
            row = [self.total(o) if k == "TOTAL" else self.counts[(k, o)] for o in outcomes]
            lines.append(" ".join([f"{k:<{width}}"] + [f"{v:>17}" for v in row] + [f"{sum(row):>8}"]))
        return "\n".join(lines)


def _worker(conn: Any, oracle: bool, memory_limit_mb: int) -> None:  # pragma: no cover - child process
    with contextlib.suppress(Exception):
        import resource

        limit = memory_limit_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    import warnings

    warnings.simplefilter("ignore")
    seed_models()
    conn.send(("ready",))
    while True:
        msg = conn.recv()
        if msg is None:
            return
        kind, seed, index = msg
        case = FuzzCase(kind, seed, index)
        try:
            result = run_case(case, oracle, on_oracle=lambda: conn.send(("oracle",)),
                              on_prepared=lambda: conn.send(("prepared",)))
        except BaseException:
            result = CaseResult(case, "foreign_exception", traceback.format_exc(), "harness")
        conn.send(("result", result))


class _Slot:
    """One worker process and the case it is running."""

    def __init__(self, ctx: Any, oracle: bool, memory_limit_mb: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, oracle, memory_limit_mb), daemon=True)
        self.proc.start()
        child.close()
        self.case: FuzzCase | None = None
        self.started = 0.0
        self.in_oracle = False
        self.prepared = False
        self.ready = False

    def give(self, case: FuzzCase) -> None:
        self.case, self.started, self.in_oracle, self.prepared = case, time.monotonic(), False, False
        self.conn.send((case.kind, case.seed, case.index))

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(None)
        self.proc.join(1)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def run_campaign(cases: Iterable[FuzzCase], jobs: int = 2, timeout_s: float = 10.0, oracle: bool = True,
                 memory_limit_mb: int = 4096, progress: Callable[[CampaignReport], None] | None = None,
                 seed: int = 0) -> CampaignReport:
    """Run ``cases`` in ``jobs`` worker processes, each case bounded by ``timeout_s``.

    A worker that runs past the bound is killed (``hang``); one that dies (``crash``) is
    replaced; neither stops the campaign. Workers get ``memory_limit_mb`` of address
    space, so a model asking for huge tensors meets ``MemoryError`` instead of the machine.
    """
    from multiprocessing.connection import wait

    ctx = multiprocessing.get_context("spawn")  # no fork: the parent may hold threads
    # BLAS threads: the workers already use every core between them.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")
    report = CampaignReport(seed)
    t0 = time.perf_counter()
    todo = iter(cases)
    slots = [_Slot(ctx, oracle, memory_limit_mb) for _ in range(jobs)]
    pending = True

    def feed(slot: _Slot) -> None:
        nonlocal pending
        nxt = next(todo, None)
        if nxt is None:
            pending = False
            slot.case = None
        else:
            slot.give(nxt)

    try:
        while True:
            busy = [s for s in slots if s.case is not None or not s.ready]
            if not busy and not pending:
                break
            if not busy:
                for s in slots:
                    feed(s)
                continue
            ready = wait([s.conn for s in busy] + [s.proc.sentinel for s in busy], timeout=0.25)
            now = time.monotonic()
            for i, s in enumerate(slots):
                if s.case is None and s.ready:
                    continue
                if s.conn in ready:
                    try:
                        msg = s.conn.recv()
                    except (EOFError, OSError):
                        msg = None
                    if msg is not None:
                        if msg[0] == "ready":
                            s.ready = True
                            feed(s)
                        elif msg[0] == "oracle":
                            s.in_oracle = True
                        elif msg[0] == "prepared":
                            s.prepared = True
                        else:
                            report.add(msg[1])
                            feed(s)
                            if progress is not None:
                                progress(report)
                        continue
                dead = not s.proc.is_alive()
                late = s.case is not None and now - s.started > timeout_s
                if not dead and not late:
                    continue
                if s.case is not None:
                    if dead:
                        outcome = "oracle_crash" if s.in_oracle else "crash" if s.prepared else "generator_crash"
                        detail = f"worker exited with code {s.proc.exitcode}"
                    else:
                        outcome = "oracle_hang" if s.in_oracle else "hang"
                        detail = f"no result after {timeout_s:g} s"
                    report.add(CaseResult(s.case, outcome, detail, "oracle" if s.in_oracle else ""))
                elif dead:
                    raise RuntimeError(f"fuzz worker failed to start (exit code {s.proc.exitcode})")
                if not dead:
                    s.proc.kill()
                s.proc.join()
                slots[i] = _Slot(ctx, oracle, memory_limit_mb)
                if progress is not None:
                    progress(report)
    finally:
        for s in slots:
            s.stop()
    report.seconds = time.perf_counter() - t0
    return report
