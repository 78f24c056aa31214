"""Fuzzing in CI (bounded): hostile model bytes, mutated graphs, random graphs, optimizer
patterns and hostile feeds must end in a result or a typed error — never another
exception, a hang or a crash. Plus one regression test per bug the fuzzer found.

The longer campaign is ``benchmarks/fuzz_campaign.py``; both use
:mod:`onyxrt.testing.fuzz`. Together these tests take about 15 s on two cores.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt
from onyxrt.errors import InvalidArgument, InvalidGraph, InvalidModel
from onyxrt.testing.fuzz import (
    BUGS,
    KINDS,
    CampaignReport,
    FuzzCase,
    campaign_cases,
    run_campaign,
    run_case,
)

LEVELS = ("ORT_ENABLE_ALL", "ORT_DISABLE_ALL")


def _session(model: onnx.ModelProto | bytes, level: str = "ORT_ENABLE_ALL") -> onyxrt.InferenceSession:
    opts = onyxrt.SessionOptions()
    opts.graph_optimization_level = getattr(onyxrt.GraphOptimizationLevel, level)
    data = model if isinstance(model, bytes) else model.SerializeToString()
    return onyxrt.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


# ----------------------------------------------------------------------------- campaigns


def _describe(report: CampaignReport) -> str:
    lines = [report.table()]
    lines += [f"{r.outcome} in {r.case}: {r.detail}" for r in report.findings]
    return "\n".join(lines)


def test_fixed_batch_in_process_has_no_bugs_and_reaches_every_outcome_that_matters():
    """300 cases (60 per kind), in this process: zero foreign exceptions; some cases of
    every kind run correctly and some end in typed errors."""
    report = CampaignReport(seed=0)
    for kind in KINDS:
        for index in range(60):
            report.add(run_case(FuzzCase(kind, seed=0, index=index)))
    print("\nfuzz, in-process batch (seed 0, 60 cases per kind):\n" + _describe(report))
    assert report.results == 300
    assert report.total("foreign_exception") == 0, _describe(report)
    for kind in KINDS:
        assert report.counts[(kind, "typed_error")] > 0, kind
        assert report.counts[(kind, "ok")] > 0, kind
    # The optimizer's patterns and random graphs agree across optimization levels and
    # with onnxruntime (whose own optimizer is off: see fuzz._run_oracle).
    assert report.counts[("fusion_pattern", "mismatch")] == 0, _describe(report)
    assert report.counts[("random_graph", "mismatch")] == 0, _describe(report)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(KINDS), index=st.integers(0, 2**31 - 1))
def test_any_case_ends_in_a_result_or_a_typed_error(kind: str, index: int):
    result = run_case(FuzzCase(kind, seed=1, index=index))
    assert result.outcome not in BUGS, f"{result.case}: {result.detail}"


def test_campaign_in_worker_processes_counts_no_hang_and_no_crash():
    """A small campaign in two worker processes with a per-case bound: no hang, no crash
    (this is the only place a crash of the interpreter would show)."""
    report = run_campaign(campaign_cases(80, seed=2), jobs=2, timeout_s=30)
    print("\nfuzz, worker-process batch (seed 2, 80 cases):\n" + _describe(report))
    assert report.results == 80
    assert [r for r in report.findings if r.is_bug] == [], _describe(report)
    assert report.total("ok") > 0 and report.total("typed_error") > 0


def test_campaign_counts_a_hang_and_a_crash_and_carries_on():
    """The runner's own check: a case that never returns is a hang, one that kills its
    process is a crash; the cases after them still run."""
    cases = [FuzzCase("selftest_hang", 0, 0), FuzzCase("selftest_crash", 0, 1), FuzzCase("random_graph", 0, 2)]
    report = run_campaign(cases, jobs=1, timeout_s=3)
    outcomes = {r.case.kind: r.outcome for r in report.findings}
    assert outcomes == {"selftest_hang": "hang", "selftest_crash": "crash"}
    assert report.results == 3
    assert report.counts[("random_graph", "ok")] + report.counts[("random_graph", "typed_error")] == 1


def test_a_reported_case_reproduces():
    first = run_case(FuzzCase("mutated_proto", seed=3, index=17))
    again = run_case(FuzzCase("mutated_proto", seed=3, index=17))
    assert (first.outcome, first.detail) == (again.outcome, again.detail)


# ----------------------------------------------------------------------------- regressions


@pytest.mark.parametrize("output_names", [3, "y", [None], [3], [["y"]], [b"y"]])
def test_output_names_of_the_wrong_type_are_invalid_argument(output_names):
    # Was TypeError from difflib (or 'unhashable type: list').
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
    sess = _session(model)
    with pytest.raises(InvalidArgument, match="output_names"):
        sess.run(output_names, {"x": np.ones(2, np.float32)})
    assert sess.run(None, {"x": np.ones(2, np.float32)})[0].tolist() == [1.0, 1.0]


@pytest.mark.parametrize("level", LEVELS)
def test_node_with_too_few_inputs_is_invalid_graph_naming_it(level):
    # Was IndexError inside the MatMul fusion pass.
    model = make_model(
        [helper.make_node("MatMul", ["x"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["y"])],
        [tensor("x", [2, 2])], [tensor("y", [2, 2])], {"b": np.ones(2, np.float32)},
    )
    with pytest.raises(InvalidGraph, match=r"'mm' \(MatMul\) has 1 inputs, but MatMul-13 takes 2"):
        _session(model, level)


def test_node_with_too_many_outputs_is_invalid_graph():
    model = make_model([helper.make_node("Relu", ["x"], ["y", "z"], name="r")], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(InvalidGraph, match=r"'r' \(Relu\) has 2 outputs"):
        _session(model)


@pytest.mark.parametrize("level", LEVELS)
def test_attribute_of_another_opset_is_invalid_graph(level):
    # ReduceMean-18 takes axes as an input: the layer-norm fusion honoured the stale
    # attribute and the kernel ignored it, so the two levels computed different values.
    model = make_model(
        [helper.make_node("ReduceMean", ["x"], ["y"], name="mean", axes=[-1])],
        [tensor("x", [2, 3])], [tensor("y", None)], opset=18,
    )
    with pytest.raises(InvalidGraph, match=r"'mean' \(ReduceMean\) has attribute 'axes'.*opset 18"):
        _session(model, level)


def test_missing_required_attribute_is_invalid_graph():
    model = make_model([helper.make_node("Cast", ["x"], ["y"], name="c")], [tensor("x", [2])], [tensor("y", None)])
    with pytest.raises(InvalidGraph, match="lacks the required attribute 'to'"):
        _session(model)


@pytest.mark.parametrize("level", LEVELS)
def test_initializer_of_undefined_type_is_invalid_graph_at_every_level(level):
    # Was TypeError from numpy_helper.to_array inside the MatMul fusion (bias lookup).
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"])],
        [tensor("x", [2, 2])], [tensor("y", [2, 2])],
        {"w": np.ones((2, 2), np.float32), "b": np.ones(2, np.float32)},
    )
    model.graph.initializer[1].data_type = TensorProto.UNDEFINED
    with pytest.raises(InvalidGraph, match="initializer 'b' cannot be read"):
        _session(model, level)


@pytest.mark.parametrize("level", LEVELS)
def test_initializer_bytes_not_matching_its_shape_is_invalid_graph_at_every_level(level):
    # Was ValueError ('cannot reshape array') inside the optimizer's constant lookup.
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Mul", ["m", "s"], ["y"])],
        [tensor("x", [2, 2])], [tensor("y", [2, 2])],
        {"w": np.ones((2, 2), np.float32), "s": np.float32(2)},
    )
    model.graph.initializer[1].dims.append(2)
    with pytest.raises(InvalidGraph, match="initializer 's' cannot be read"):
        _session(model, level)


def test_name_that_is_not_utf8_is_invalid_model():
    # upb hands a corrupt proto2 string back as bytes; onnx's C++ helpers then raised
    # TypeError and the optimizer UnicodeDecodeError.
    model = make_model([helper.make_node("Relu", ["x"], ["y"], name="abc")], [tensor("x", [2])], [tensor("y", [2])])
    data = model.SerializeToString().replace(b"abc", b"a\xf9c")
    with pytest.raises(InvalidModel, match=r"model\.graph\.node\[0\]\.name is not valid UTF-8"):
        _session(data)


@pytest.mark.parametrize(("marker", "where"), [
    (b"inpq", r"model\.graph\.node\[0\]\.input"),
    (b"alph", r"model\.graph\.node\[0\]\.attribute\[0\]\.name"),
    (b"dimq", r"model\.graph\.value_info\[0\]\.type\.tensor_type\.shape\.dim\[0\]\.dim_param"),
    (b"denq", r"model\.graph\.value_info\[0\]\.type\.denotation"),
    (b"subq", r"model\.graph\.node\[1\]\.attribute\[0\]\.g\.node\[0\]\.name"),
])
def test_text_that_is_not_utf8_is_named_wherever_it_sits(marker, where):
    # Nodes and value_infos are checked by a shortcut (a call per message cost BERT's load
    # ~40 ms); a corrupt string anywhere in them still gets the walk's path.
    then = helper.make_graph([helper.make_node("Identity", ["inpq"], ["t"], name="subq")], "then", [],
                             [tensor("t", [2])])
    model = make_model(
        [helper.make_node("LeakyRelu", ["inpq"], ["midq"], alph=0.1),
         helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)],
        [tensor("inpq", [2]), helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, [])],
        [tensor("y", [2])],
    )
    model.graph.value_info.append(helper.make_tensor_value_info("midq", onnx.TensorProto.FLOAT, ["dimq"]))
    model.graph.value_info[0].type.denotation = "denq"
    data = model.SerializeToString()
    assert data.count(marker) >= 1
    with pytest.raises(InvalidModel, match=where + r".* is not valid UTF-8"):
        _session(data.replace(marker, marker[:1] + b"\xf9" + marker[2:]))


@pytest.mark.parametrize("level", LEVELS)
def test_value_produced_twice_is_refused_at_every_level(level):
    # The optimizer used to drop the duplicate (dead) node first, so ORT_ENABLE_ALL ran a
    # graph ORT_DISABLE_ALL refused.
    relu = helper.make_node("Relu", ["x"], ["y"], name="relu")
    model = make_model([relu, relu], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(InvalidGraph, match="'y' is produced twice"):
        _session(model, level)


@pytest.mark.parametrize("level", LEVELS)
def test_dead_node_reading_an_undefined_value_is_refused_at_every_level(level):
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu"), helper.make_node("Neg", ["nowhere"], ["dead"], name="neg")],
        [tensor("x", [2])], [tensor("y", [2])],
    )
    with pytest.raises(InvalidGraph, match="'neg' \\(Neg\\): input 'nowhere'"):
        _session(model, level)


def test_an_output_indexed_down_to_one_element_is_an_ndarray():
    # Gather with a scalar index returned a numpy scalar (np.float32), not an ndarray.
    model = make_model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
        [tensor("x", [3])], [tensor("y", [])], {"i": np.array(1, np.int64)},
    )
    (y,) = _session(model, "ORT_DISABLE_ALL").run(None, {"x": np.arange(3, dtype=np.float32)})
    assert isinstance(y, np.ndarray) and y.shape == () and y == 1.0


def test_attribute_of_the_wrong_type_is_invalid_graph():
    # ReduceMean 'axes' given as INT instead of INTS: was TypeError in the layer-norm fusion.
    node = helper.make_node("ReduceMean", ["x"], ["y"], name="mean")
    node.attribute.append(helper.make_attribute("axes", -1))
    model = make_model([node], [tensor("x", [2, 3])], [tensor("y", None)])
    with pytest.raises(InvalidGraph, match="attribute 'axes' is of type INT, but ReduceMean-13 takes INTS"):
        _session(model)


def test_external_data_location_with_a_nul_character_is_unsafe(tmp_path):
    # Was ValueError ('embedded null byte') from pathlib.
    from onyxrt.errors import UnsafeExternalData

    model = make_model([helper.make_node("Add", ["x", "w"], ["y"])], [tensor("x", [2])], [tensor("y", [2])],
                       {"w": np.ones(2, np.float32)})
    w = model.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    w.external_data.add(key="location", value="weights\0bin")
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(UnsafeExternalData, match="NUL character"):
        onyxrt.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def test_batch_norm_folding_leaves_a_conv_with_a_2d_bias_alone():
    # A Conv bias of shape [M, 1] (the kernel reads it as [M]) broadcast into an [M, M]
    # bias when BatchNormalization was folded in: ORT_ENABLE_ALL then failed to run a
    # model ORT_DISABLE_ALL ran.
    rng = np.random.default_rng(0)
    params = {n: rng.random(4).astype(np.float32) + 0.5 for n in ("g", "be", "m", "v")}
    model = make_model(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["y"])],
        [tensor("x", [1, 2, 5, 5])], [tensor("y", [1, 4, 5, 5])],
        {"w": rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "b": rng.random((4, 1)).astype(np.float32),
         **params},
    )
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    (plain,) = _session(model, "ORT_DISABLE_ALL").run(None, {"x": x})
    (optimized,) = _session(model, "ORT_ENABLE_ALL").run(None, {"x": x})
    np.testing.assert_allclose(optimized, plain, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("level", LEVELS)
def test_input_of_an_unknown_element_type_is_a_typed_error(level):
    # Element type 90 (a corrupt byte): was TypeError from the layer-norm fusion's dtype lookup.
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
    model.graph.input[0].type.tensor_type.elem_type = 90
    with pytest.raises(InvalidModel, match="value 'x' declares element type 90"):
        _session(model, level)


def test_negative_declared_dim_is_unknown_not_a_process_abort():
    # onnx 1.23's shape inference aborts the process (a C++ assertion in Slice's
    # inference) on a negative dim; the loader reads a declared -1 as unknown first, as
    # onnxruntime does (Paddle2ONNX writes them). In a child process, so a regression
    # shows as a failed test rather than a dead test run.
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper as nh
        import onyxrt
        ints = lambda v, n: nh.from_array(np.array(v, np.int64), n)
        g = helper.make_graph(
            [helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, -1])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
            [ints([1], "s"), ints([5], "e"), ints([1], "a")])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
        sess = onyxrt.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
        x = np.arange(12, dtype=np.float32).reshape(2, 6)
        (y,) = sess.run(None, {"x": x})
        print("shape:", sess.get_inputs()[0].shape, "ok:", np.array_equal(y, x[:, 1:5]))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "shape: [2, None] ok: True" in done.stdout


def test_matmul_of_a_1d_operand_gives_the_same_at_every_level():
    # FuzzCase('random_graph', 11, 7961): x[4] @ c[4, 1] + bias was fused into a
    # FusedMatMul (rank >= 2 only), so ORT_ENABLE_ALL refused what ORT_DISABLE_ALL ran.
    # (The optimizer side is tests/test_optimizer.py::test_matmul_with_a_1d_operand_stays_matmul.)
    result = run_case(FuzzCase("random_graph", seed=11, index=7961))
    assert result.outcome == "ok", (result.outcome, result.detail)
