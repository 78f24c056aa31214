"""The operator library against the ONNX node conformance suite over array_api_strict
(the proof that it is written against the array API standard, not numpy's extras) and over
numpy (the backend the CPU provider binds)."""

from __future__ import annotations

import onyxrt_ops  # noqa: F401  (fills the library)
from onyxrt_ops.backend import numpy_backend
from onyxrt_ops.conformance import host_erf, library_cases, run_cases, strict_backend

CASES = library_cases()


#: Element types outside the array API standard (and outside CuPy, except float16): the
#: only reason a case may be not expressible.
_NON_STANDARD = ("float16", "bfloat16", "float8", "float4", "int4", "uint4", "int2", "uint2", "object")


#: Functions beyond the standard that operators need (backend extras), with the operators:
#: the table of what the standard cannot express besides dtypes (docs/architecture.md).
_NUMPY_ONLY = {"einsum": "Einsum", "bitcast": "BitCast"}


def _only_non_standard_dtypes(detail: str, allowed: tuple[str, ...] = _NON_STANDARD) -> bool:
    held_not = detail.split("holds no ", 1)[-1].split(", ")
    return "holds no " in detail and all(any(t.startswith(a) for a in allowed) for t in held_not)


def _not_expressible_for_a_known_reason(o) -> bool:
    """A dtype outside the standard, or a function of :data:`_NUMPY_ONLY` for its operator."""
    lacks = o.detail.split(" lacks ", 1)[-1]
    return _only_non_standard_dtypes(o.detail) or _NUMPY_ONLY.get(lacks) == o.op_type


def _report(outcomes) -> str:
    return "\n".join(f"{o.outcome} {o.name}: {o.detail}" for o in outcomes if o.outcome != "passed")


def test_the_library_has_node_cases_to_run():
    assert len(CASES) >= 50, len(CASES)


def test_every_expressible_case_passes_over_array_api_strict():
    outcomes = run_cases(CASES, strict_backend())
    failed = [o for o in outcomes if o.outcome == "failed"]
    assert not failed, _report(failed)
    passed = sum(o.outcome == "passed" for o in outcomes)
    assert passed >= 0.8 * len(outcomes), _report(outcomes)
    for o in outcomes:
        if o.outcome == "not_expressible":
            assert _not_expressible_for_a_known_reason(o), o
        if o.outcome == "not_comparable":
            assert o.op_type == "Bernoulli", o


def test_every_case_passes_over_numpy():
    import numpy as np

    outcomes = run_cases(CASES, numpy_backend(extras={"erf": host_erf(np)}))
    assert all(o.outcome in ("passed", "not_offered", "not_comparable") for o in outcomes), _report(outcomes)
    assert {o.op_type for o in outcomes if o.outcome == "not_comparable"} == {"Bernoulli"}
    # Not offered: only element types the library's operator does not declare (float8 and
    # sub-byte quantization, which the CPU provider keeps as its own kernels).
    for o in outcomes:
        if o.outcome == "not_offered":
            assert "dtype" in o.detail and "is not supported" in o.detail, o


def test_every_case_passes_over_the_gpu_providers_backend_under_the_simulated_cupy():
    """The backend the GPU providers bind (CuPy's namespace, resolved when a kernel is
    built) over the simulated CuPy: dtypes CuPy lacks are not expressible, the rest pass.
    On a real GPU the same run is ``python -m onyxrt_ops.conformance --backend
    onyxrt_gpu.kernels._common:BACKEND`` (benchmarks/gpu_check.py runs it)."""
    import pytest

    simulated_cupy = pytest.importorskip("onyxrt_gpu.testing.simulated_cupy")
    from onyxrt_ops.conformance import backend_named

    with simulated_cupy.install():
        outcomes = run_cases(CASES, backend_named("onyxrt_gpu.kernels._common:BACKEND"))
    assert not [o for o in outcomes if o.outcome == "failed"], _report(outcomes)
    for o in outcomes:
        if o.outcome == "not_expressible":  # CuPy holds float16
            assert _only_non_standard_dtypes(o.detail, tuple(t for t in _NON_STANDARD if t != "float16")), o
        assert o.outcome != "not_comparable" or o.op_type == "Bernoulli", o


def test_the_command_names_its_backend_and_refuses_an_unknown_one(capsys):
    import pytest

    from onyxrt_ops.conformance import main

    assert main(["--backend", "numpy"]) == 0
    assert "library node cases over numpy:" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="unknown backend 'tensorflow'"):
        main(["--backend", "tensorflow"])
    with pytest.raises(SystemExit, match="not an onyxrt_ops.Backend"):
        main(["--backend", "numpy:float32"])
