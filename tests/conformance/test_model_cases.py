"""The real-model cases shipped inside the onnx wheel (pytorch-converted, pytorch-operator,
simple: 140 at onnx 1.23), through ``onyxrt.backend`` on the CPU provider."""

from __future__ import annotations

import pytest

from onyxrt.testing.conformance import check_model_dir, wheel_model_dirs

# Expected failures, each with its reason (none at onnx 1.23).
EXCLUDED: dict[str, str] = {}


def _param(folder):
    marks = [pytest.mark.conformance]
    if folder.name in EXCLUDED:
        marks.append(pytest.mark.xfail(reason=EXCLUDED[folder.name], strict=True))
    return pytest.param(folder, id=f"{folder.parent.name}/{folder.name}", marks=marks)


@pytest.mark.parametrize("folder", [_param(f) for f in wheel_model_dirs()])
def test_model_case(folder) -> None:
    check_model_dir(folder)
