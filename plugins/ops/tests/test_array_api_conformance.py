"""The operator library against the ONNX node conformance suite over array_api_strict
(the proof that it is written against the array API standard, not numpy's extras) and over
numpy (the backend the CPU provider binds)."""

from __future__ import annotations

import onyxrt_ops  # noqa: F401  (fills the library)
from onyxrt_ops.backend import numpy_backend
from onyxrt_ops.conformance import host_erf, library_cases, run_cases, strict_backend

CASES = library_cases()


def _report(outcomes) -> str:
    return "\n".join(f"{o.outcome} {o.name}: {o.detail}" for o in outcomes if o.outcome != "passed")


def test_the_library_has_node_cases_to_run():
    assert len(CASES) >= 50, len(CASES)


def test_every_expressible_case_passes_over_array_api_strict():
    outcomes = run_cases(CASES, strict_backend())
    failed = [o for o in outcomes if o.outcome == "failed"]
    assert not failed, _report(failed)
    passed = sum(o.outcome == "passed" for o in outcomes)
    assert passed >= 0.8 * len(outcomes), _report(outcomes)  # only half-precision and string cases may not be expressible
    for o in outcomes:
        if o.outcome == "not_expressible":
            assert "float16" in o.detail or "bfloat16" in o.detail or "object" in o.detail, o


def test_every_case_passes_over_numpy():
    import numpy as np

    outcomes = run_cases(CASES, numpy_backend(extras={"erf": host_erf(np)}))
    assert all(o.outcome == "passed" for o in outcomes), _report(outcomes)
