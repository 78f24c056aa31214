"""onnx's shape inference must never take the process down (onyxrt.shape_inference).

onnx 1.23's C++ inference aborts (a failed assertion) on a Pad whose negative pads crop
more than a dimension followed by a Slice on that axis. Models with a negative constant
pad are inferred in a child process; the checks that could crash run in a subprocess of
the test too, so a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from onyxrt.shape_inference import InferenceAborted, infer_shapes, may_abort


def _pad_then_slice(pads: list[int], pads_as_constant_node: bool = False) -> onnx.ModelProto:
    """x [1, 4, 1] → Pad(pads) → Slice on axis 2."""
    nodes = []
    inits = [
        numpy_helper.from_array(np.array([0], np.int64), "starts"),
        numpy_helper.from_array(np.array([1], np.int64), "ends"),
        numpy_helper.from_array(np.array([2], np.int64), "axes"),
    ]
    pads_tensor = numpy_helper.from_array(np.array(pads, np.int64), "pads")
    if pads_as_constant_node:
        nodes.append(helper.make_node("Constant", [], ["pads"], value=pads_tensor))
    else:
        inits.append(pads_tensor)
    nodes += [
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        helper.make_node("Slice", ["padded", "starts", "ends", "axes"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "crop", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_may_abort_finds_cropping_pads():
    assert may_abort(_pad_then_slice([0, 0, -1, 0, 0, -1]))
    assert may_abort(_pad_then_slice([0, 0, -1, 0, 0, -1], pads_as_constant_node=True))
    assert not may_abort(_pad_then_slice([0, 0, 1, 0, 0, 1]))


def test_ordinary_models_are_inferred_in_process_as_onnx_does():
    model = _pad_then_slice([0, 0, 1, 0, 0, 1])
    ours = infer_shapes(model, strict_mode=True)
    theirs = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert ours.SerializeToString() == theirs.SerializeToString()


def test_a_legal_crop_is_inferred_in_a_child_exactly_as_onnx_does():
    legal = _pad_then_slice([0, -1, 0, 0, 0, 0])  # crops 1 of 4 on axis 1: fine
    assert may_abort(legal)
    inferred = infer_shapes(legal, strict_mode=False)
    assert inferred.SerializeToString() == onnx.shape_inference.infer_shapes(
        legal, strict_mode=False).SerializeToString()


def _run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, check=False)


def test_the_aborting_model_neither_crashes_inference_nor_a_session():
    model = _pad_then_slice([0, 0, -1, 0, 0, -1])  # crops 2 of 1 on axis 2
    proc = _run_isolated(f"""
        import onnx, numpy as np, onyxrt
        from onyxrt.errors import OnyxError
        from onyxrt.shape_inference import InferenceAborted, infer_shapes
        model = onnx.ModelProto.FromString({model.SerializeToString()!r})
        try:
            infer_shapes(model, strict_mode=False, data_prop=True)
            print("inferred")
        except InferenceAborted as exc:
            print("aborted in the child:", exc)
        session = onyxrt.InferenceSession(model.SerializeToString())
        try:
            session.run(None, {{"x": np.ones((1, 4, 1), np.float32)}})
        except OnyxError as exc:
            print("typed:", type(exc).__name__, exc)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "aborted in the child" in proc.stdout, proc.stdout
    assert "typed: KernelError" in proc.stdout and "negative pads" in proc.stdout, proc.stdout


def test_fuzz_case_that_aborted_the_process_now_gives_a_typed_error():
    proc = _run_isolated("""
        from onyxrt.testing.fuzz import FuzzCase, run_case
        result = run_case(FuzzCase("random_graph", 2, 16728))
        print(result.outcome, result.detail)
    """)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("typed_error"), proc.stdout


def test_inference_aborted_is_a_runtime_error():
    # the session treats any exception from inference as "continue without it"
    assert issubclass(InferenceAborted, RuntimeError)
