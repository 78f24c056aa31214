"""The ONNX node conformance suite, run through :mod:`onyxrt.backend`.

Cases come from the installed onnx package (``collect_testcases``) and are checked with
onnx's own comparison (``Runner.assert_similar_outputs``, the suite's tolerances) applied
output by output, so a pass here is a pass in ``onnx.backend.test.BackendTest`` (except
that sequences of 0-d tensors, which onnx's recursion cannot compare, are compared too).

    python -m onyxrt.testing.conformance            # count, and failures by reason
    python -m onyxrt.testing.conformance Conv Relu  # only cases whose name contains these
"""

from __future__ import annotations

import collections
import sys
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from onnx.backend.test.case.test_case import TestCase

from ..records import record

__all__ = [
    "node_cases", "model_cases", "wheel_model_dirs", "check_model_dir", "check_case",
    "CaseResult", "run_cases", "main",
]

#: The real-model cases shipped inside the onnx wheel (140 at onnx 1.23).
WHEEL_MODEL_KINDS = ("pytorch-converted", "pytorch-operator", "simple")


def node_cases() -> list[TestCase]:
    """Every node case the installed onnx generates (1884 at onnx 1.23)."""
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def model_cases() -> list[TestCase]:
    """The real-model cases onnx ships (``collect_testcases`` of the model package)."""
    from onnx.backend.test.case.model import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(collect_testcases())


def wheel_model_dirs() -> list[Any]:
    """Folders of the model cases shipped in the onnx wheel (model.onnx + data sets)."""
    from pathlib import Path

    import onnx

    root = Path(onnx.__file__).parent / "backend" / "test" / "data"
    return sorted(
        d for kind in WHEEL_MODEL_KINDS for d in (root / kind).iterdir() if (d / "model.onnx").is_file()
    )


def _read_pb(path: Any) -> Any:
    import onnx
    from onnx import numpy_helper

    data = path.read_bytes()
    tensor = onnx.TensorProto()
    tensor.ParseFromString(data)
    return numpy_helper.to_array(tensor)


def check_model_dir(folder: Any, device: str = "CPU", rtol: float = 1e-3, atol: float = 1e-7) -> None:
    """Run one wheel model case: every ``test_data_set_*`` through ``onyxrt.backend``."""
    from .. import backend

    rep = backend.prepare(str(folder / "model.onnx"), device)
    for data_set in sorted(folder.glob("test_data_set_*")):
        inputs = [_read_pb(p) for p in sorted(data_set.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        expected = [_read_pb(p) for p in sorted(data_set.glob("output_*.pb"), key=lambda p: int(p.stem.split("_")[1]))]
        outputs = list(rep.run(inputs))
        _assert_similar(expected, outputs, rtol, atol)


def check_case(case: TestCase, device: str = "CPU") -> None:
    """Prepare the case's model with onyxrt and compare every data set's outputs.

    Raises AssertionError (mismatch) or the onyxrt error that stopped it.
    """
    from .. import backend

    rep = backend.prepare(case.model, device)
    for inputs, expected in case.data_sets or ():
        outputs = list(rep.run([as_value(v) for v in inputs]))
        _assert_similar([as_value(v) for v in expected], outputs, case.rtol, case.atol)


def _assert_similar(expected: list[Any], outputs: list[Any], rtol: float, atol: float) -> None:
    """onnx's ``Runner.assert_similar_outputs``, except that sequence elements are
    compared one by one: onnx's own recursion calls ``len()`` on the elements and so
    raises TypeError for any sequence of 0-d tensors, whatever the runtime returns."""
    from onnx.backend.test.runner import Runner

    assert len(outputs) == len(expected), f"{len(outputs)} outputs, expected {len(expected)}"
    for want, got in zip(expected, outputs):
        if isinstance(want, list):
            assert isinstance(got, list), f"expected a sequence, got {type(got).__name__}"
            assert len(got) == len(want), f"sequence of {len(got)}, expected {len(want)}"
            for w, g in zip(want, got):
                Runner.assert_similar_outputs([w], [g], rtol=rtol, atol=atol)
        elif want is None:
            assert got is None, f"expected an empty optional, got {type(got).__name__}"
        else:
            Runner.assert_similar_outputs([want], [got], rtol=rtol, atol=atol)


def as_value(value: Any) -> Any:
    """Data sets hold some tensors as ``TensorProto`` (types numpy lacks); onnx's runner
    reads those with ``numpy_helper.to_array`` when it loads them from disk."""
    import onnx
    from onnx import numpy_helper

    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return [as_value(v) for v in value]
    return value


@record(frozen=True)
class CaseResult:
    """The outcome of one case."""

    name: str
    passed: bool
    error: str = ""


def run_cases(cases: Iterable[TestCase], device: str = "CPU") -> list[CaseResult]:
    """Run cases, catching every failure (the result says what went wrong)."""
    results = []
    for case in cases:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check_case(case, device)
        except Exception as exc:  # report, never stop the suite
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            results.append(CaseResult(case.name, False, f"{type(exc).__name__}: {first[:300]}"))
        else:
            results.append(CaseResult(case.name, True))
    return results


def main(argv: Sequence[str] | None = None) -> int:
    """Print the pass count and the failures grouped by error."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--models"]:
        return _main_models()
    cases: list[Any] = node_cases()
    if args:
        cases = [c for c in cases if any(a.lower() in c.name.lower() for a in args)]
    results = run_cases(cases)
    failed = [r for r in results if not r.passed]
    by_error: dict[str, list[str]] = collections.defaultdict(list)
    for r in failed:
        by_error[r.error[:120]].append(r.name)
    for error, names in sorted(by_error.items(), key=lambda kv: -len(kv[1])):
        print(f"{len(names):4d}  {error}\n      {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
    print(f"node conformance: {len(results) - len(failed)} passed, {len(failed)} failed of {len(results)}")
    return 0


def _main_models() -> int:
    failed = []
    dirs = wheel_model_dirs()
    for folder in dirs:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                check_model_dir(folder)
        except Exception as exc:  # report, never stop
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            failed.append(f"{folder.parent.name}/{folder.name}: {type(exc).__name__}: {first[:200]}")
    for line in failed:
        print(line)
    print(f"wheel model cases: {len(dirs) - len(failed)} passed, {len(failed)} failed of {len(dirs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
