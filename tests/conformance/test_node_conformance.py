"""The ONNX node conformance suite, through ``onyxrt.backend`` on the CPU provider.

Every case the installed onnx generates runs; the ones listed in ``exclusions.py`` are
expected to fail (strict: a listed case that starts passing fails the suite, so the list
stays honest) and each entry says why. The pass count is printed at the end of the run.
"""

from __future__ import annotations

import pytest
from exclusions import EXCLUDED, RANDOM_OUTPUT

from onyxrt.testing.conformance import check_case, node_cases

CASES = node_cases()


def _param(case):
    marks = [pytest.mark.conformance]
    if case.name in RANDOM_OUTPUT:
        # Random outputs match the recorded ones only by chance: not strict.
        marks.append(pytest.mark.xfail(reason=RANDOM_OUTPUT[case.name], strict=False))
    elif case.name in EXCLUDED:
        marks.append(pytest.mark.xfail(reason=EXCLUDED[case.name], strict=True))
    return pytest.param(case, id=case.name, marks=marks)


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_node_case(case) -> None:
    check_case(case)


def test_exclusions_name_existing_cases() -> None:
    names = {c.name for c in CASES}
    stale = sorted((set(EXCLUDED) | set(RANDOM_OUTPUT)) - names)
    assert not stale, f"exclusions name cases onnx no longer generates: {stale}"
