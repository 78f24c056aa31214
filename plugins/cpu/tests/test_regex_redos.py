"""RegexFullMatch cannot be made to hang (issue 19, item 9: ReDoS).

The kernel matches with RE2 in linear time; Python's backtracking ``re`` took hours on
``(a+)+$`` against 41 characters, holding the GIL so ``RunOptions.terminate`` could not stop
it. The catastrophic cases run in a child process with a timeout, so a regression fails the
test instead of freezing the runner. Patterns only a backtracking engine can run
(backreferences, lookaround) are refused when the session is created, naming the node and
the pattern, as onnxruntime refuses them; so is a missing or impostor ``re2`` module.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import InvalidGraph, NotImplementedOp

NODE = "match_user_input"


def regex_model(pattern: str) -> bytes:
    """A one-node RegexFullMatch model (opset 20) whose node is named ``NODE``."""
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], name=NODE, pattern=pattern)
    graph = helper.make_graph(
        [node],
        "regex",
        [helper.make_tensor_value_info("x", TensorProto.STRING, None)],
        [helper.make_tensor_value_info("y", TensorProto.BOOL, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    return model.SerializeToString()


# ------------------------------------------------------- catastrophic patterns

# Classic catastrophic-backtracking patterns: on a run of a's ending in "!" a backtracking
# engine tries every way to split the run (2**n for (a+)+$, n**20 for (.*a){20}) before
# failing.
REDOS = [r"(a+)+$", r"(a|aa)+$", r"(.*a){20}", r"(a*)*b", r"(\w+\s?)+$"]

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    import numpy as np
    import onyxrt
    times, results = {}, {}
    for pattern, path in json.loads(sys.argv[1]).items():
        sess = onyxrt.InferenceSession(path, providers=["CPUExecutionProvider"])
        x = np.array(["a" * 41 + "!", "a" * 100_000 + "!", "a" * 41], dtype=object)
        start = time.perf_counter()
        results[pattern] = sess.run(None, {"x": x})[0].tolist()
        times[pattern] = time.perf_counter() - start
    print(json.dumps({"results": results, "times": times}))
    """
)


def test_redos_patterns_finish_quickly(tmp_path):
    models = {}
    for i, pattern in enumerate(REDOS):
        models[pattern] = str(tmp_path / f"redos{i}.onnx")
        Path(models[pattern]).write_bytes(regex_model(pattern))
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, json.dumps(models)],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"RegexFullMatch on {REDOS} did not finish in 20 s: catastrophic backtracking")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # No pattern matches a run of a's ending in "!"; all but (a*)*b match the a's alone.
    want = {p: [False, False, p != r"(a*)*b"] for p in REDOS}
    assert report["results"] == want
    # Linear time: 100,000 characters through each pattern in well under a second.
    slow = {p: t for p, t in report["times"].items() if t > 2.0}
    assert not slow, f"RegexFullMatch is not linear-time on {slow}"


# ------------------------------------------------------------ refused patterns

# Pattern -> words of RE2's reason that the error must carry.
REFUSED = {
    r"(a)\1": "escape",  # backreference
    r"(?=a)a": "perl operator",  # lookahead
    r"(?!a)b": "perl operator",  # negative lookahead
    r"(?<=a)b": "perl operator",  # lookbehind
    r"(?P<n>a)(?P=n)": "perl operator",  # named backreference
    r"a++": "repetition",  # possessive quantifier
    r"(unclosed": "missing )",
}


@pytest.mark.parametrize("pattern", list(REFUSED))
def test_backtracking_only_pattern_refused_at_session_creation(pattern):
    with pytest.raises(InvalidGraph) as caught:
        onyxrt.InferenceSession(regex_model(pattern), providers=["CPUExecutionProvider"])
    message = str(caught.value)
    assert repr(NODE) in message and repr(pattern) in message
    assert "RE2" in message and REFUSED[pattern] in message
    # onnxruntime refuses it too, at the same point.
    with pytest.raises(ort.capi.onnxruntime_pybind11_state.Fail, match="Invalid regex pattern"):
        ort.InferenceSession(regex_model(pattern), providers=["CPUExecutionProvider"])


# ------------------------------------------------------- google-re2 required


def test_missing_re2_is_a_typed_error_at_session_creation(monkeypatch):
    monkeypatch.setitem(sys.modules, "re2", None)  # import re2 -> ImportError
    with pytest.raises(NotImplementedOp, match="pip install google-re2") as caught:
        onyxrt.InferenceSession(regex_model("a+"), providers=["CPUExecutionProvider"])
    assert repr(NODE) in str(caught.value)


def test_impostor_re2_that_backtracks_is_refused(monkeypatch):
    import re

    # Shaped like google-re2's API but running Python's re, as name-alikes that fall back do.
    class Options:
        log_errors = True

    fake = types.ModuleType("re2")
    fake.Options = Options  # type: ignore[attr-defined]
    fake.error = re.error  # type: ignore[attr-defined]
    fake.compile = lambda pattern, options=None: re.compile(pattern)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "re2", fake)
    with pytest.raises(NotImplementedOp, match="not google-re2") as caught:
        onyxrt.InferenceSession(regex_model("a+"), providers=["CPUExecutionProvider"])
    assert repr(NODE) in str(caught.value)


def test_cpu_provider_imports_and_runs_without_re2():
    script = textwrap.dedent(
        """
        import sys
        sys.modules["re2"] = None
        import numpy as np, onnx, onyxrt
        import onyxrt_cpu.kernels.text  # the module RegexFullMatch lives in
        from onnx import helper, TensorProto
        node = helper.make_node("Neg", ["x"], ["y"])
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
        sess = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        print(sess.run(None, {"x": np.float32([1, 2])})[0].tolist())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[-1.0, -2.0]"
