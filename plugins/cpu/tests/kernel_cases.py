"""Run onnx's node conformance cases straight through the CPU kernel registry.

This checks a kernel in isolation (no session, no partitioner): the case's single node
is looked up in the registry at the model's opset, built with ``KernelInfo.from_node``
and computed on the case's inputs. The session-level conformance run lives in
``tests/conformance``; this one is for kernel authors.

    python plugins/cpu/tests/kernel_cases.py Relu Conv      # print pass/fail per case
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Iterator

import numpy as np
import onnx
from onnx.backend.test.case.node import collect_testcases
from onnx.backend.test.case.test_case import TestCase

from onyxrt.kernels import KernelInfo, ValueType
from onyxrt_cpu.kernels import registry


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
    for inputs, expected in case.data_sets:
        by_name = dict(zip([i.name for i in graph.input], inputs))
        args = [by_name.get(n) if n else None for n in node.input]
        outs = kernel.compute(*args)
        assert isinstance(outs, tuple), f"{node.op_type}.compute must return a tuple"
        assert len(outs) >= len(expected), f"{len(outs)} outputs, expected {len(expected)}"
        for got, want in zip(outs, expected):
            _assert_close(got, want, case.rtol, case.atol)


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
