"""The ONNX node conformance suite over any backend, straight through the library.

Each node case of the installed onnx whose operators the library defines is run with the
library's kernels bound to a backend (no session, no provider: the node's kernel is built
from its ``KernelInfo`` and called on the case's inputs converted to the backend's
arrays). Over ``array_api_strict`` — a strict, minimal implementation of the array API
standard — a pass proves an operator is written against the standard and not against
numpy's extras. A case is *not expressible* on a backend when an input or output has a
dtype the backend cannot hold (float16 and bfloat16 are not in the standard), and is
reported as such, not counted as a pass.

    python -m onyxrt_ops.conformance                     # over array_api_strict: counts and failures
    python -m onyxrt_ops.conformance --backend torch-cuda  # over torch on a GPU
    python -m onyxrt_ops.conformance --backend onyxrt_gpu.kernels._common:BACKEND  # the GPU providers'
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from onyxrt.kernels import KernelInfo, ValueType, schema_since_version
from onyxrt.records import record

from .backend import Backend, namespace_backend, numpy_backend, to_host
from .library import OpLibrary, library

__all__ = ["NOT_COMPARABLE", "CaseOutcome", "library_cases", "run_case", "run_cases", "strict_backend", "host_erf", "torch_backend", "backend_named", "main"]


#: Operators whose node cases hold outputs no conforming kernel must reproduce, and why.
NOT_COMPARABLE = {
    "Bernoulli": "the expected outputs are draws from numpy's legacy global random stream "
                 "(onnxruntime's backend tests exclude these cases too); the operator's tests "
                 "check its distribution",
}


@record(frozen=True)
class CaseOutcome:
    """One node case on one backend: ``passed``, ``failed``, ``not_expressible`` (a dtype
    the backend cannot hold, or a function beyond the standard it lacks), ``not_offered``
    (a dtype the operator does not take: the node is refused at capability time and a
    provider's own kernel runs it) or ``not_comparable`` (see :data:`NOT_COMPARABLE`)."""

    name: str
    op_type: str
    outcome: str
    detail: str = ""


def host_erf(xp: Any) -> Any:
    """erf over ``xp``'s arrays, computed on the host (``math.erf`` per element)."""
    import math

    def erf(x: Any) -> Any:
        host = np.from_dlpack(x)
        values = np.vectorize(math.erf, otypes=[host.dtype])(host) if host.size else host
        return xp.asarray(values)

    return erf


def strict_backend() -> Backend:
    """A backend over ``array_api_strict``, with ``erf`` (not in the standard) computed on
    the host as a backend extra — the one function the library's operators need beyond it."""
    import array_api_strict as xp

    return namespace_backend(xp, "array_api_strict", extras={"erf": host_erf(xp)})


def library_cases(lib: OpLibrary = library) -> list[Any]:
    """The onnx node cases whose every node is a default-domain operator of ``lib``."""
    from onnx.backend.test.case.node import collect_testcases

    ops = {(d.domain, d.op_type) for d in lib.definitions}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = list(collect_testcases())
    return [
        c for c in cases
        if len(c.model.graph.node) == 1 and (_domain(c.model.graph.node[0].domain), c.model.graph.node[0].op_type) in ops
    ]


def _domain(name: str) -> str:
    """The library's name of an operator domain (``""`` for ai.onnx)."""
    return "" if name == "ai.onnx" else name


def run_case(case: Any, backend: Backend, lib: OpLibrary = library) -> CaseOutcome:
    """Run one single-node case over ``backend`` (see the module docstring)."""
    from onnx import numpy_helper
    from onnx.backend.test.runner import Runner

    node = case.model.graph.node[0]
    domain = _domain(node.domain)
    opset = next(i.version for i in case.model.opset_import if _domain(i.domain) == domain)
    since = schema_since_version(domain, node.op_type, opset)
    try:
        definition = lib.definition(node.op_type, since or opset, domain)
    except KeyError as exc:
        return CaseOutcome(case.name, node.op_type, "failed", str(exc.args[0]))
    cls = lib.kernel(node.op_type, since or opset, backend, domain)
    lacks = backend.lacks(definition.needs)
    if lacks:  # bind does not offer the operator on this backend
        return CaseOutcome(case.name, node.op_type, "not_expressible", f"{backend.name} lacks {', '.join(lacks)}")
    if node.op_type in NOT_COMPARABLE:
        return CaseOutcome(case.name, node.op_type, "not_comparable", NOT_COMPARABLE[node.op_type])
    # A node whose element types the operator does not take (a provider keeps those, such as
    # the CPU's float8 quantization) is refused at capability time: not offered, not run.
    declared = {vi.name: ValueType.from_proto(vi.type) for vi in [*case.model.graph.input, *case.model.graph.output]}
    refused = lib.refusal(node.op_type, since or opset, backend,
                          [declared.get(n) for n in node.input], [declared.get(n) for n in node.output], domain)
    if refused:
        held = {str(np.dtype(d)) for d in backend.dtypes}
        unheld = sorted({str(vt.dtype) for vt in declared.values() if vt.dtype is not None} - held)
        if unheld:  # the backend cannot hold it at all: bind narrowed it away
            return CaseOutcome(case.name, node.op_type, "not_expressible", f"{backend.name} holds no {', '.join(unheld)}")
        return CaseOutcome(case.name, node.op_type, "not_offered", refused)
    for inputs, expected in case.data_sets or ():
        values = [numpy_helper.to_array(v) if hasattr(v, "dims") else np.asarray(v) for v in inputs]
        wanted = [numpy_helper.to_array(v) if hasattr(v, "dims") else np.asarray(v) for v in expected]
        odd = sorted({str(v.dtype) for v in [*values, *wanted] if not backend.holds(v.dtype)})
        if odd:
            return CaseOutcome(case.name, node.op_type, "not_expressible", f"{backend.name} holds no {', '.join(odd)}")
        try:
            kernel = cls(KernelInfo.from_node(node, opset, since_version=since))
            arrays = [backend.xp.asarray(v) for v in values]
            # The data set holds the present inputs only; an absent optional input (name
            # "") is None, as the executor passes it.
            given = iter(arrays)
            args = [next(given) if name else None for name in node.input]
            outputs = kernel.compute(*args)
            # The data set holds the named outputs only (an omitted optional output is "").
            got = [to_host(o) for o, name in zip(outputs, node.output) if name][: len(wanted)]
            Runner.assert_similar_outputs(wanted, got, rtol=case.rtol, atol=case.atol)
        except AssertionError as exc:
            return CaseOutcome(case.name, node.op_type, "failed", f"mismatch: {str(exc).splitlines()[0][:200]}")
        except Exception as exc:
            return CaseOutcome(case.name, node.op_type, "failed", f"{type(exc).__name__}: {exc}"[:300])
    return CaseOutcome(case.name, node.op_type, "passed")


def run_cases(cases: Iterable[Any], backend: Backend, lib: OpLibrary = library) -> list[CaseOutcome]:
    """:func:`run_case` for each case."""
    return [run_case(c, backend, lib) for c in cases]


def torch_backend() -> Backend:
    """A backend over torch (through ``array_api_compat.torch``) on its default device —
    the GPU when ``torch.set_default_device("cuda")`` was called — with ``torch.special.erf``.
    torch's unsigned types beyond uint8 have few kernels, so they are not offered. The
    library passes Python scalars where the 2024.12 standard allows them (``maximum(x, 0)``),
    which ``array_api_compat.torch`` accepts from version 1.16."""
    import array_api_compat
    import array_api_compat.torch as xp
    import torch

    if tuple(int(p) for p in array_api_compat.__version__.split(".")[:2]) < (1, 16):
        raise RuntimeError(f"the torch backend needs array-api-compat >= 1.16 (Python scalars in "
                           f"maximum/minimum); {array_api_compat.__version__} is installed")

    dtypes = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.float16, np.float32, np.float64]
    return namespace_backend(xp, "torch", dtypes=dtypes, extras={"erf": torch.special.erf})


def backend_named(name: str) -> Backend:
    """The backend ``--backend`` names: ``array_api_strict`` (default), ``numpy``, ``torch``,
    ``torch-cuda`` (torch with CUDA as its default device), or ``module:attribute`` naming a
    :class:`Backend` object (``onyxrt_gpu.kernels._common:BACKEND`` is the GPU providers')."""
    if name == "array_api_strict":
        return strict_backend()
    if name == "numpy":
        return numpy_backend(extras={"erf": host_erf(np)})
    if name in ("torch", "torch-cuda"):
        if name == "torch-cuda":
            import torch

            torch.set_default_device("cuda")
        return torch_backend()
    module, sep, attribute = name.partition(":")
    if not sep:
        raise SystemExit(f"unknown backend {name!r}: use array_api_strict, numpy, torch, torch-cuda or module:attribute")
    import importlib

    backend = getattr(importlib.import_module(module), attribute)
    if not isinstance(backend, Backend):
        raise SystemExit(f"{name} is a {type(backend).__name__}, not an onyxrt_ops.Backend")
    return backend


def main(argv: Sequence[str] | None = None) -> int:
    """Print the library's conformance over a backend (``--backend``, default
    array_api_strict); 1 if a case fails."""
    import argparse

    import onyxrt_ops  # noqa: F401  (fills the library)

    parser = argparse.ArgumentParser(prog="python -m onyxrt_ops.conformance", description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="array_api_strict", help=backend_named.__doc__)
    args = parser.parse_args(argv)
    backend = backend_named(args.backend)
    outcomes = run_cases(library_cases(), backend)
    kinds = ("passed", "failed", "not_expressible", "not_offered", "not_comparable")
    counts = {k: sum(o.outcome == k for o in outcomes) for k in kinds}
    print(f"library node cases over {backend.name}: {counts['passed']} passed, {counts['failed']} failed, "
          f"{counts['not_expressible']} not expressible (dtypes the backend cannot hold, functions it lacks), "
          f"{counts['not_offered']} not offered (dtypes the operator does not take), "
          f"{counts['not_comparable']} not comparable (random draws)")
    for o in outcomes:
        if o.outcome != "passed":
            print(f"  {o.outcome:16} {o.name}: {o.detail}")
    return 1 if counts["failed"] else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
