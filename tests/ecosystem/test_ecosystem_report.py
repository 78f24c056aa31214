"""The harness's own tests: a comparison that cannot fail, or a run that is onnxruntime
against itself, would make every green ``nox -s ecosystem`` meaningless.

A fake library (a tiny model run through ``onnxruntime.InferenceSession``) is driven by the
real ``Driver`` in two processes, as the session does it: plainly, on onnxruntime, and under
``python -m onyxrt.compat``. On onyxrt its driver changes some cases' outputs on purpose,
and ``report.py`` must tell each change for what it is.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))

import known_failures  # noqa: E402
import report  # noqa: E402

pytest.importorskip("onnxruntime")

FAKE_LIBRARY = """
import numpy as np
import onnx
import onnxruntime
from onnx import TensorProto, helper


class Scaler:
    '''y = 2x + 1, through the library's own InferenceSession.'''

    def __init__(self):
        node_mul = helper.make_node("Mul", ["x", "two"], ["t"])
        node_add = helper.make_node("Add", ["t", "one"], ["y"])
        graph = helper.make_graph(
            [node_mul, node_add], "scale",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4])],
            [helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
             helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        self.session = onnxruntime.InferenceSession(model.SerializeToString(),
                                                    providers=["CPUExecutionProvider"])

    def __call__(self, x):
        return self.session.run(None, {"x": x})[0]
"""

FAKE_DRIVER = """
import warnings

import numpy as np
import onnxruntime
from fakelib import Scaler
from harness import Close, Driver, Exact, Prepared

driver = Driver("fake", distribution="numpy")
ON_ONYXRT = getattr(onnxruntime, "__onyxrt_shim__", False)
X = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)


def case(name, change=None):
    @driver.case(name, models=[f"fake/{name}.onnx"], compared="test")
    def setup():
        scaler = Scaler()

        def call():
            y = scaler(X)
            outputs = {"labels": Exact(["cat" if v > 2 else "dog" for v in y[:, 0]]),
                       "values": Close(y, rtol=1e-5, atol=1e-6)}
            return change(outputs) if change and ON_ONYXRT else outputs

        return Prepared("inputs", call)


def drift(outputs):
    return {**outputs, "values": Close(np.asarray(outputs["values"].value) + 3e-3, rtol=1e-5, atol=1e-6)}


def nudge(outputs):
    value = np.asarray(outputs["values"].value, np.float64).copy()
    value[0, 0] += 5e-7
    return {**outputs, "values": Close(value, rtol=1e-5, atol=1e-6)}


def relabel(outputs):
    return {**outputs, "labels": Exact(["dog", "fox", "cat"])}


def fail(outputs):
    raise RuntimeError("the library wraps it") from NotImplementedError("no kernel for com.microsoft::Foo")


def warn(outputs):
    warnings.warn("only on onyxrt")
    return outputs


CALLS = []


def unstable(outputs):
    CALLS.append(1)
    value = np.asarray(outputs["values"].value, np.float64) + (1e-9 if len(CALLS) > 1 else 0.0)
    return {**outputs, "values": Close(value, rtol=1e-5, atol=1e-6)}


case("same")
case("unstable", unstable)
case("warns", warn)
case("drift", drift)
case("nudge", nudge)
case("relabel", relabel)
case("error", fail)

if __name__ == "__main__":
    driver.main()
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake library's result files from both runs, as the session makes them."""
    folder = tmp_path_factory.mktemp("ecosystem")
    (folder / "fakelib.py").write_text(textwrap.dedent(FAKE_LIBRARY))
    (folder / "drive_fake.py").write_text(textwrap.dedent(FAKE_DRIVER))
    out = folder / "results"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    for runner in ([sys.executable], [sys.executable, "-m", "onyxrt.compat"]):
        done = subprocess.run([*runner, str(folder / "drive_fake.py"), "--output", str(out), "--repeats", "2"],
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr
    (out / "install.json").write_text(json.dumps({"fake": {"requirements": ["fake"], "installed": True}}))
    return out


def _rows(folder: Path) -> dict[str, report.Outcome]:
    return {row.case: row for row in report.judge(folder)}


def test_each_run_records_the_sessions_of_its_own_runtime(results):
    reference = json.loads((results / "fake.onnxruntime.json").read_text())
    onyxrt = json.loads((results / "fake.onyxrt.json").read_text())
    assert not reference["shim"] and onyxrt["shim"]
    assert reference["cases"]["same"]["sessions"] == ["onnxruntime.capi.onnxruntime_inference_collection.InferenceSession"]
    assert onyxrt["cases"]["same"]["sessions"] == ["onyxrt.session.InferenceSession"]


def test_identical_outputs_match_and_both_runs_are_timed(results):
    row = _rows(results)["same"]
    assert not row.failed and row.result.startswith("match")
    assert row.reference_ms is not None and row.onyxrt_ms is not None


def test_a_warning_only_onyxrt_gives_is_shown_without_failing(results):
    row = _rows(results)["warns"]
    assert not row.failed and row.result.endswith("onyxrt warned: UserWarning: only on onyxrt")


def test_outputs_that_change_between_calls_on_onyxrt_fail(results):
    row = _rows(results)["unstable"]
    assert row.failed and "onyxrt's outputs changed between repeated calls" in row.result


def test_a_numeric_difference_beyond_the_tolerance_is_a_mismatch_with_its_size(results):
    row = _rows(results)["drift"]
    assert row.failed and "values: max |d| 0.003" in row.result


def test_a_difference_inside_the_tolerance_matches_and_says_how_close(results):
    row = _rows(results)["nudge"]
    assert not row.failed and row.result.startswith("match (max |d| 5")


def test_a_different_label_is_a_mismatch_that_names_it(results):
    row = _rows(results)["relabel"]
    assert row.failed and "labels: [1] 'fox' on onyxrt, 'dog' on onnxruntime" in row.result


def test_an_error_on_onyxrt_fails_unless_listed_with_its_message(results, monkeypatch):
    row = _rows(results)["error"]
    assert row.failed and row.result == "fails on onyxrt: NotImplementedError: no kernel for com.microsoft::Foo"

    listed = known_failures.KnownFailure("fake", "error", "com.microsoft::Foo", "Foo is not implemented")
    monkeypatch.setattr(known_failures, "KNOWN_FAILURES", (listed,))
    row = _rows(results)["error"]
    assert not row.failed and row.result == "known failure: Foo is not implemented"

    elsewhere = known_failures.KnownFailure("fake", "error", "com.microsoft::Bar", "Bar is not implemented")
    monkeypatch.setattr(known_failures, "KNOWN_FAILURES", (elsewhere,))
    assert _rows(results)["error"].failed


def test_a_listed_failure_that_passes_fails_until_it_is_removed(results, monkeypatch):
    listed = known_failures.KnownFailure("fake", "same", "anything", "was broken")
    monkeypatch.setattr(known_failures, "KNOWN_FAILURES", (listed,))
    row = _rows(results)["same"]
    assert row.failed and "remove the entry" in row.result


def test_an_onyxrt_run_on_onnxruntime_sessions_does_not_count(results, tmp_path):
    # As if the shim had been bypassed: the library's sessions were onnxruntime's.
    for name in ("fake.onnxruntime.json", "fake.onnxruntime.npz", "fake.onyxrt.npz", "install.json"):
        (tmp_path / name).write_bytes((results / name).read_bytes())
    onyxrt = json.loads((results / "fake.onyxrt.json").read_text())
    onyxrt["cases"]["same"]["sessions"] = ["onnxruntime.capi.onnxruntime_inference_collection.InferenceSession"]
    (tmp_path / "fake.onyxrt.json").write_text(json.dumps(onyxrt))
    row = _rows(tmp_path)["same"]
    assert row.failed and "the onyxrt run used onnxruntime.capi" in row.result


def test_a_driver_without_results_fails_and_an_uninstallable_library_is_reported(results, tmp_path):
    for name in ("fake.onnxruntime.json", "fake.onnxruntime.npz"):  # the onyxrt run left nothing
        (tmp_path / name).write_bytes((results / name).read_bytes())
    installs = {"fake": {"requirements": ["fake"], "installed": True},
                "absent": {"requirements": ["absent==1"], "installed": False, "error": "pip failed"}}
    (tmp_path / "install.json").write_text(json.dumps(installs))
    rows = {row.library: row for row in report.judge(tmp_path)}
    assert rows["fake"].failed and "wrote no results on onyxrt" in rows["fake"].result
    assert not rows["absent"].failed and rows["absent"].result == "install failed: pip failed"
    assert report.main([str(tmp_path)]) == 1
