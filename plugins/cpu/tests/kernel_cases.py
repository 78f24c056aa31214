"""Run onnx's node conformance cases straight through the CPU kernel registry.

This checks a kernel in isolation (no session, no partitioner): the case's single node
is looked up in the registry at the model's opset, built with ``KernelInfo.from_node``
and computed on the case's inputs. The session-level conformance run lives in
``tests/conformance``; this one is for kernel authors.

    python plugins/cpu/tests/kernel_cases.py Relu Conv      # print pass/fail per case

It also holds the plumbing the ``test_kernels_*`` modules share: the conformance
parametrization, one-node models, running a node through our kernel or through
onnxruntime (the oracle), and seeded random inputs.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.backend.test.case.node import collect_testcases
from onnx.backend.test.case.test_case import TestCase

from onyxrt.dtypes import np_dtype, onnx_elem_type
from onyxrt.kernels import KernelInfo, ValueType
from onyxrt.testing.conformance import as_value
from onyxrt_cpu.kernels import registry

#: numpy's bfloat16 (ml_dtypes), for tests of half-precision types.
BF16 = np_dtype(onnx.TensorProto.BFLOAT16)


def iter_cases(op_types: Iterable[str]) -> Iterator[TestCase]:
    """Single-node conformance cases whose node is one of ``op_types``."""
    wanted = set(op_types)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1 and nodes[0].op_type in wanted:
            yield case


def _opset(model: onnx.ModelProto, domain: str) -> int:
    for imp in model.opset_import:
        if imp.domain in (domain, "ai.onnx" if domain == "" else domain):
            return int(imp.version)
    return onnx.defs.onnx_opset_version()


def run_case(case: TestCase) -> None:
    """Raise AssertionError (or the kernel's error) if the case does not pass."""
    node = case.model.graph.node[0]
    opset = _opset(case.model, node.domain)
    kdef, reason = registry.lookup(node.domain, node.op_type, opset)
    assert kdef is not None, reason
    graph = case.model.graph
    types = {vi.name: ValueType.from_proto(vi.type) for vi in [*graph.input, *graph.output]}
    info = KernelInfo.from_node(
        node,
        opset,
        since_version=kdef.since_version,
        input_types=[types.get(n) for n in node.input],
        output_types=[types.get(n) for n in node.output],
    )
    kernel = kdef.factory(info)
    for raw_inputs, raw_expected in case.data_sets:
        # Types numpy lacks (float8, int4, ...) are stored as TensorProto in data sets.
        inputs = [as_value(v) for v in raw_inputs]
        expected = [as_value(v) for v in raw_expected]
        by_name = dict(zip([i.name for i in graph.input], inputs))
        args = [by_name.get(n) if n else None for n in node.input]
        outs = kernel.compute(*args)
        assert isinstance(outs, tuple), f"{node.op_type}.compute must return a tuple"
        assert len(outs) >= len(expected), f"{len(outs)} outputs, expected {len(expected)}"
        # Match by name: a node may leave optional outputs unnamed (RNN's Y), so position
        # k of the kernel's outputs is the node's k-th output, not the graph's k-th.
        produced = {name: value for name, value in zip(node.output, outs) if name}
        for out, want in zip(graph.output, expected):
            _assert_close(produced[out.name], want, case.rtol, case.atol)


def _assert_close(got: object, want: object, rtol: float, atol: float) -> None:
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_close(g, w, rtol, atol)
        return
    if want is None:
        assert got is None
        return
    want_a = np.asarray(want)
    got_a = np.asarray(got)
    assert got_a.dtype == want_a.dtype, f"dtype {got_a.dtype}, expected {want_a.dtype}"
    assert got_a.shape == want_a.shape, f"shape {got_a.shape}, expected {want_a.shape}"
    if want_a.dtype.kind in "OSU":
        assert got_a.tolist() == want_a.tolist()
    elif want_a.dtype.kind in "fc" or want_a.dtype.itemsize < 2 or want_a.dtype.kind == "V":
        np.testing.assert_allclose(
            got_a.astype(np.float64) if want_a.dtype.kind != "c" else got_a,
            want_a.astype(np.float64) if want_a.dtype.kind != "c" else want_a,
            rtol=rtol, atol=atol,
        )
    else:
        np.testing.assert_array_equal(got_a, want_a)


# ------------------------------------------------------------ conformance tests


def conformance_params(
    ops: Iterable[str],
    expected_failures: Mapping[str, str] | None = None,
    skipped: Mapping[str, str] | None = None,
) -> list[Any]:
    """One ``pytest.param`` per conformance case of ``ops``, for ``test_conformance(case)``.

    Cases named in ``expected_failures`` are marked ``xfail(strict=True)`` and those in
    ``skipped`` are skipped, each with the reason given.
    """
    expected_failures = expected_failures or {}
    skipped = skipped or {}
    params = []
    for case in iter_cases(ops):
        marks = []
        if case.name in expected_failures:
            marks.append(pytest.mark.xfail(reason=expected_failures[case.name], strict=True))
        if case.name in skipped:
            marks.append(pytest.mark.skip(reason=skipped[case.name]))
        params.append(pytest.param(case, id=case.name, marks=marks))
    return params


def assert_every_op_has_cases(ops: Iterable[str]) -> None:
    """Each of ``ops`` has at least one conformance case."""
    wanted = set(ops)
    assert {c.model.graph.node[0].op_type for c in iter_cases(wanted)} == wanted


def assert_all_versions_registered(ops: Iterable[str], domain: str = "") -> None:
    """Every version of each of ``ops`` that onnx defines has a registered kernel."""
    schemas = onnx.defs.get_all_schemas_with_history()
    for op in ops:
        versions = {s.since_version for s in schemas if s.name == op and s.domain == domain}
        for v in versions:
            assert (domain, op, v) in registry, f"{op}-{v} is not registered"


# ------------------------------------------------------------- one-node runs


def input_names(values: Sequence[Any]) -> list[str]:
    """Node input names for ``values``: ``in{i}``, ``""`` for a ``None`` (absent) value;
    trailing absent inputs are left off."""
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(values)]
    while names and names[-1] == "":
        names.pop()
    return names


def one_node(
    op: str,
    inputs: int | Sequence[str] = 0,
    outputs: int | Sequence[str] = 1,
    *,
    name: str | None = None,
    **attrs: Any,
) -> onnx.NodeProto:
    """A node of ``op`` with ``attrs``, named ``test_{op}`` unless ``name`` is given.

    ``inputs`` and ``outputs`` are the names, or counts: ``in0, in1, ...`` and
    ``out0, out1, ...`` (see :func:`input_names` to name inputs after their values).
    """
    ins = [f"in{i}" for i in range(inputs)] if isinstance(inputs, int) else list(inputs)
    outs = [f"out{i}" for i in range(outputs)] if isinstance(outputs, int) else list(outputs)
    return helper.make_node(op, ins, outs, name=f"test_{op}" if name is None else name, **attrs)


def run_ours(
    node: onnx.NodeProto, opset: int, *inputs: Any, constants: Collection[int] = ()
) -> tuple[Any, ...]:
    """Our kernel for ``node`` at ``opset`` (from the registry) computed on ``inputs``.

    ``None`` is an absent input; inputs whose index is in ``constants`` are also given to
    the kernel as constant (initializer) inputs. Checks that the kernel returns a tuple
    with an output for each of the node's, and leaves its array inputs unchanged.
    """
    kdef, reason = registry.lookup(node.domain, node.op_type, opset)
    assert kdef is not None, reason
    consts = {i: inputs[i] for i in constants}
    info = KernelInfo.from_node(node, opset, since_version=kdef.since_version, constants=consts)
    kernel = kdef.factory(info)
    copies = [x.copy() if isinstance(x, np.ndarray) else None for x in inputs]
    outs = kernel.compute(*inputs)
    assert isinstance(outs, tuple), f"{node.op_type}.compute must return a tuple"
    assert len(outs) >= len(node.output), f"{len(outs)} outputs for {len(node.output)}"
    for i, (x, c) in enumerate(zip(inputs, copies, strict=True)):  # inputs must not change
        if c is not None:
            assert x.dtype == c.dtype, f"input {i} changed dtype"
            if c.dtype.kind == "O":
                assert x.tolist() == c.tolist(), f"input {i} was modified"
            else:
                assert x.tobytes() == c.tobytes(), f"input {i} was modified"
    return outs


def one_node_model(
    node: onnx.NodeProto,
    opset: int,
    inputs: Sequence[Any],
    output_types: Sequence[Any] | None = None,
    constants: Collection[int] = (),
) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A model (ir_version 10) of ``node`` alone, and its feeds for ``inputs``.

    Absent inputs (empty name or ``None`` value) are left out; those whose index is in
    ``constants`` become initializers instead of graph inputs. ``output_types`` (ONNX
    element types or numpy dtypes, one per node output) declares the outputs' types;
    without it they are left to shape inference.
    """
    graph_inputs, inits, feeds = [], [], {}
    for i, (name, value) in enumerate(zip(node.input, inputs)):
        if not name or value is None:
            continue
        arr = np.asarray(value)
        if i in constants:
            inits.append(onnx.numpy_helper.from_array(arr, name))
            continue
        et = onnx_elem_type(arr.dtype)
        graph_inputs.append(helper.make_tensor_value_info(name, et, list(arr.shape)))
        feeds[name] = arr
    if output_types is None:
        graph_outputs = [helper.make_empty_tensor_value_info(o) for o in node.output]
    else:
        graph_outputs = [
            helper.make_tensor_value_info(o, t if isinstance(t, int) else onnx_elem_type(t), None)
            for o, t in zip(node.output, output_types, strict=True)
        ]
    graph = helper.make_graph([node], "g", graph_inputs, graph_outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    if output_types is None:
        model = onnx.shape_inference.infer_shapes(model)
    return model, feeds


def run_onnxruntime(
    node: onnx.NodeProto,
    opset: int,
    inputs: Sequence[Any],
    output_types: Sequence[Any] | None = None,
    constants: Collection[int] = (),
) -> list[Any]:
    """``node`` at ``opset`` run alone in onnxruntime (the oracle); see :func:`one_node_model`."""
    model, feeds = one_node_model(node, opset, inputs, output_types, constants)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def run_op(
    op: str,
    inputs: Sequence[Any],
    opset: int,
    n_out: int = 1,
    constants: Collection[int] = (),
    **attrs: Any,
) -> tuple[Any, ...]:
    """:func:`run_ours` on a node of ``op`` whose inputs are named after ``inputs``
    (see :func:`input_names`), with ``n_out`` outputs; also checks every output is an array."""
    node = one_node(op, input_names(inputs), n_out, **attrs)
    outs = run_ours(node, opset, *inputs, constants=constants)
    for o in outs:
        assert isinstance(o, np.ndarray), f"{op} returned a {type(o).__name__}, not an array"
    return outs


def run_op_onnxruntime(
    op: str, inputs: Sequence[Any], opset: int, output_types: Sequence[Any], **attrs: Any
) -> list[Any]:
    """:func:`run_onnxruntime` on the node :func:`run_op` builds, one output per type."""
    node = one_node(op, input_names(inputs), len(output_types), **attrs)
    return run_onnxruntime(node, opset, inputs, output_types)


def op_output(
    op: str, inputs: Sequence[Any], opset: int, constants: Collection[int] = (), **attrs: Any
) -> np.ndarray:
    """The (first) output of :func:`run_op` for a one-output node of ``op``."""
    return run_op(op, inputs, opset, constants=constants, **attrs)[0]


def op_output_onnxruntime(
    op: str, inputs: Sequence[Any], opset: int, out_type: Any = None, **attrs: Any
) -> np.ndarray:
    """onnxruntime's output for the node :func:`op_output` runs, declared as ``out_type``
    (an ONNX element type or numpy dtype; by default the first input's)."""
    out_type = inputs[0].dtype if out_type is None else out_type
    return run_op_onnxruntime(op, inputs, opset, [out_type], **attrs)[0]


def assert_same_as_onnxruntime(node: onnx.NodeProto, opset: int, *inputs: Any) -> None:
    """Our outputs equal onnxruntime's exactly: dtype, shape and values."""
    got = run_ours(node, opset, *inputs)
    want = run_onnxruntime(node, opset, inputs)
    assert len(got) >= len(want)
    for g, w in zip(got, want):
        g = np.asarray(g)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_array_equal(g, w)


def randn(
    shape: int | Sequence[int], seed: int = 0, *, scale: float = 1.0, dtype: Any = np.float32
) -> np.ndarray:
    """Seeded standard-normal values times ``scale``, as ``dtype``."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


# ---------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    passed = failed = 0
    for case in iter_cases(argv):
        try:
            run_case(case)
        except Exception as exc:  # report every failure, keep going
            failed += 1
            print(f"FAIL {case.name}: {type(exc).__name__}: {str(exc)[:300]}")
        else:
            passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
