"""``InferenceSession`` driven the way onnxruntime users drive it.

Model sources, run/output selection, provider lists and fallback, introspection, provider
options, ``set_providers``, logging, the placement report, session and run options,
cancellation, concurrency, ``run_with_ort_values`` and ``onyxrt.backend``. Where
onnxruntime can run the same model, outputs and metadata are compared with it.
"""

from __future__ import annotations

import importlib.metadata
import json
import threading
import time
import warnings

import numpy as np
import onnx
import onnx.backend.base
import onnxruntime
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt as ort
import onyxrt.backend
from onyxrt.errors import (
    InvalidArgument,
    InvalidInput,
    InvalidProviderOption,
    PartitionError,
    ProviderUnavailable,
    RunTerminated,
)

CPU = "CPUExecutionProvider"
TOY = "ToyDeviceExecutionProvider"


W = np.array([1.0, -2.0, 3.0], np.float32)


def _x(n: int = 4, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3)).astype(np.float32)


def _ort_session(model: onnx.ModelProto, so=None) -> onnxruntime.InferenceSession:
    return onnxruntime.InferenceSession(model.SerializeToString(), so, providers=[CPU])


def _ort_run(model: onnx.ModelProto, feed, names=None) -> list[np.ndarray]:
    return _ort_session(model).run(names, feed)


@pytest.fixture
def multi_output_model() -> onnx.ModelProto:
    """Three outputs, declared in the order relu_out, sum_out, mul_out."""
    return make_model(
        [
            helper.make_node("Add", ["x", "w"], ["sum_out"], name="add"),
            helper.make_node("Relu", ["sum_out"], ["relu_out"], name="relu"),
            helper.make_node("Mul", ["x", "w"], ["mul_out"], name="mul"),
        ],
        [tensor("x", ["N", 3])],
        [tensor("relu_out", ["N", 3]), tensor("sum_out", ["N", 3]), tensor("mul_out", ["N", 3])],
        {"w": W},
    )


def _add_chain(n_nodes: int, width: int) -> onnx.ModelProto:
    """y = x + n_nodes (one Add node per step), x float32 [N, width]."""
    names = ["x"] + [f"t{i}" for i in range(1, n_nodes)] + ["y"]
    nodes = [
        helper.make_node("Add", [names[i], "one"], [names[i + 1]], name=f"add{i}")
        for i in range(n_nodes)
    ]
    return make_model(
        nodes,
        [tensor("x", ["N", width])],
        [tensor("y", ["N", width])],
        {"one": np.ones(width, np.float32)},
    )


# -- sources and runs -------------------------------------------------------------------


def test_default_session_runs_everything_on_cpu(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    assert sess.get_providers() == [CPU]
    assert sess.placement.nodes_by_provider() == {CPU: ["add", "relu"]}
    assert sess.fallbacks == []
    x = _x()
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, _ort_run(add_relu_model, {"x": x})[0])
    np.testing.assert_array_equal(y, np.maximum(x + W, 0))


@pytest.mark.parametrize("kind", ["str", "pathlib", "bytes", "modelproto"])
def test_model_sources_give_the_same_session(kind, add_relu_model, tmp_path):
    path = tmp_path / "model.onnx"
    onnx.save_model(add_relu_model, path)
    source = {
        "str": str(path),
        "pathlib": path,
        "bytes": add_relu_model.SerializeToString(),
        "modelproto": add_relu_model,
    }[kind]
    sess = ort.InferenceSession(source)
    assert [(i.name, i.shape, i.type) for i in sess.get_inputs()] == [
        ("x", ["N", 3], "tensor(float)")
    ]
    x = _x(5)
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, _ort_run(add_relu_model, {"x": x})[0])


def test_session_leaves_the_callers_modelproto_untouched(tmp_path):
    model = make_model(
        [
            helper.make_node("Identity", ["x"], ["i"], name="ident"),
            helper.make_node("Constant", [], ["c"], name="const", value_float=2.0),
            helper.make_node("Mul", ["i", "c"], ["y"], name="mul"),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
    )
    before = model.SerializeToString()
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("N", 2)
    sess = ort.InferenceSession(model, so)
    assert model.SerializeToString() == before
    np.testing.assert_array_equal(sess.run(None, {"x": np.ones((2, 3), np.float32)})[0], 2.0)


@pytest.mark.parametrize("names", [None, []])
def test_run_with_none_or_empty_names_returns_all_outputs_in_graph_order(names, multi_output_model):
    sess = ort.InferenceSession(multi_output_model)
    x = _x()
    got = sess.run(names, {"x": x})
    expected = _ort_run(multi_output_model, {"x": x})
    assert len(got) == 3
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)
    np.testing.assert_array_equal(got[0], np.maximum(x + W, 0))
    np.testing.assert_array_equal(got[1], x + W)
    np.testing.assert_array_equal(got[2], x * W)


@pytest.mark.parametrize(
    "names", [["mul_out", "relu_out"], ["sum_out"], ["mul_out", "sum_out", "relu_out"]]
)
def test_run_returns_requested_outputs_in_requested_order(names, multi_output_model):
    sess = ort.InferenceSession(multi_output_model)
    x = _x()
    got = sess.run(names, {"x": x})
    expected = _ort_run(multi_output_model, {"x": x}, names)
    assert len(got) == len(names)
    for g, e in zip(got, expected):
        np.testing.assert_array_equal(g, e)


def test_unknown_output_name_is_a_value_error_with_a_suggestion(multi_output_model):
    sess = ort.InferenceSession(multi_output_model)
    with pytest.raises(ValueError, match="relu_ot") as err:
        sess.run(["relu_ot"], {"x": _x()})
    assert isinstance(err.value, InvalidArgument)
    assert "Did you mean 'relu_out'?" in str(err.value)


def test_missing_input_is_a_value_error_naming_it(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    with pytest.raises(ValueError, match="'x'") as err:
        sess.run(None, {})
    assert isinstance(err.value, InvalidInput)
    assert "missing" in str(err.value)


# -- providers --------------------------------------------------------------------------


def test_providers_as_names_tuples_or_parallel_options(toy_provider, add_relu_model):
    x = _x()
    expected = np.maximum(x + W, 0)
    by_name = ort.InferenceSession(add_relu_model, providers=[TOY, CPU])
    as_tuple = ort.InferenceSession(
        add_relu_model, providers=[(TOY, {"arena_extend_strategy": "kSameAsRequested"}), CPU]
    )
    parallel = ort.InferenceSession(
        add_relu_model, providers=[TOY, CPU], provider_options=[{"memory_limit": "1MiB"}, {}]
    )
    for sess in (by_name, as_tuple, parallel):
        assert sess.get_providers() == [TOY, CPU]
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], expected)
    assert by_name.get_provider_options()[TOY]["arena_extend_strategy"] == "kNextPowerOfTwo"
    assert as_tuple.get_provider_options()[TOY]["arena_extend_strategy"] == "kSameAsRequested"
    assert parallel.get_provider_options()[TOY]["memory_limit"] == str(1 << 20)


def test_provider_options_must_be_parallel_to_providers(add_relu_model):
    with pytest.raises(InvalidArgument, match="one options dict per provider"):
        ort.InferenceSession(add_relu_model, providers=[CPU], provider_options=[{}, {}])


def test_uninstalled_providers_warn_with_the_fix_and_run_on_cpu(add_relu_model, without_gpu_plugins):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = ort.InferenceSession(
            add_relu_model,
            providers=["CUDAExecutionProvider", "TensorrtExecutionProvider", CPU],
        )
    fallback = [w for w in caught if issubclass(w.category, ort.ProviderFallbackWarning)]
    assert len(fallback) == 2
    cuda, trt = (str(w.message) for w in fallback)
    assert "CUDAExecutionProvider" in cuda and "not installed" in cuda
    assert "pip install 'onyxrt-cuda[cuda12]'" in cuda and "[cuda13]" in cuda
    assert "TensorrtExecutionProvider" in trt and "not installed" in trt
    assert "onyxrt has no TensorrtExecutionProvider" in trt and "Fix:" not in trt
    # The warning points at the line that created the session, not into onyxrt.
    assert all(w.filename == __file__ for w in fallback)

    assert sess.get_providers() == [CPU]
    assert [f.provider for f in sess.fallbacks] == [
        "CUDAExecutionProvider",
        "TensorrtExecutionProvider",
    ]
    assert sess.fallbacks[0].fix == ("pip install 'onyxrt-cuda[cuda12]' (CUDA 12) or "
                                     "pip install 'onyxrt-cuda[cuda13]' (CUDA 13)")
    assert sess.fallbacks[1].fix == ""  # onyxrt has no package for it: no fix to offer
    assert "not installed" in sess.fallbacks[0].reason
    assert sess.placement.providers_requested == (
        "CUDAExecutionProvider",
        "TensorrtExecutionProvider",
        CPU,
    )
    assert sess.placement.providers_used == (CPU,)
    assert "fallback: CUDAExecutionProvider" in str(sess.placement)
    x = _x()
    np.testing.assert_array_equal(
        sess.run(None, {"x": x})[0], _ort_run(add_relu_model, {"x": x})[0]
    )


def test_fallback_without_cpu_in_the_list_still_runs_on_cpu(add_relu_model):
    with pytest.warns(ort.ProviderFallbackWarning, match="CUDAExecutionProvider"):
        sess = ort.InferenceSession(add_relu_model, providers=["CUDAExecutionProvider"])
    assert sess.get_providers() == [CPU]
    x = _x()
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x + W, 0))


def test_strict_providers_turns_fallback_into_an_error(add_relu_model, without_gpu_plugins):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.strict_providers", "1")
    assert so.get_session_config_entry("session.strict_providers") == "1"
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort.ProviderFallbackWarning)
        with pytest.raises(ProviderUnavailable, match="CUDAExecutionProvider") as err:
            ort.InferenceSession(add_relu_model, so, providers=["CUDAExecutionProvider", CPU])
    assert "pip install 'onyxrt-cuda[cuda12]'" in str(err.value)
    assert isinstance(err.value, RuntimeError)
    # CPU alone is fine in strict mode.
    assert ort.InferenceSession(add_relu_model, so, providers=[CPU]).get_providers() == [CPU]


def test_disable_cpu_ep_fallback_fails_when_nodes_land_on_cpu(add_relu_model):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    with pytest.raises(PartitionError, match="session.disable_cpu_ep_fallback") as err:
        ort.InferenceSession(add_relu_model, so)
    assert "'add'" in str(err.value) and "'relu'" in str(err.value)


def test_disable_cpu_ep_fallback_accepts_a_graph_fully_on_another_provider(
    toy_provider, add_relu_model
):
    so = ort.SessionOptions()
    so.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    sess = ort.InferenceSession(add_relu_model, so, providers=[TOY, CPU])
    assert sess.placement.nodes_by_provider() == {TOY: ["add", "relu"]}
    x = _x()
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x + W, 0))

    softmax = make_model(
        [
            helper.make_node("Relu", ["x"], ["r"], name="relu"),
            helper.make_node("Softmax", ["r"], ["y"], name="softmax"),
        ],
        [tensor("x", [2, 3])],
        [tensor("y", [2, 3])],
    )
    with pytest.raises(PartitionError, match="softmax"):
        ort.InferenceSession(softmax, so, providers=[TOY, CPU])


def test_provider_listings_versions_and_device():
    available = ort.get_available_providers()
    everything = ort.get_all_providers()
    assert available[-1] == CPU and everything[-1] == CPU
    assert set(available) <= set(everything)
    if available == [CPU]:
        assert ort.get_device() == "CPU"
    assert ort.get_version_string() == ort.__version__
    assert ort.__version__ == importlib.metadata.version("onyxrt")


def test_provider_listings_keep_cpu_last_with_a_plugin(toy_provider):
    from model_helpers import assert_priority_order

    available = ort.get_available_providers()
    assert TOY in available
    assert_priority_order(available)
    assert ort.get_all_providers()[-1] == CPU


# -- introspection ----------------------------------------------------------------------


def test_get_inputs_and_outputs_describe_names_shapes_and_types():
    model = make_model(
        [
            helper.make_node("Cast", ["ids"], ["f"], name="cast", to=TensorProto.FLOAT),
            helper.make_node("Add", ["f", "x"], ["sum"], name="add"),
            helper.make_node("Shape", ["sum"], ["shape"], name="shape"),
        ],
        [tensor("x", ["batch", 3]), tensor("ids", ["batch", 3], TensorProto.INT64)],
        [tensor("sum", ["batch", 3]), tensor("shape", [2], TensorProto.INT64)],
    )
    sess = ort.InferenceSession(model)
    ref = _ort_session(model)
    ours = [(a.name, a.shape, a.type) for a in sess.get_inputs() + sess.get_outputs()]
    theirs = [(a.name, a.shape, a.type) for a in ref.get_inputs() + ref.get_outputs()]
    assert (
        ours
        == theirs
        == [
            ("x", ["batch", 3], "tensor(float)"),
            ("ids", ["batch", 3], "tensor(int64)"),
            ("sum", ["batch", 3], "tensor(float)"),
            ("shape", [2], "tensor(int64)"),
        ]
    )


def test_unknown_dims_are_reported_as_none_like_onnxruntime():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", [None, 3])],
        [tensor("y", [None, 3])],
    )
    sess = ort.InferenceSession(model)
    ref = _ort_session(model)
    assert sess.get_inputs()[0].shape == ref.get_inputs()[0].shape == [None, 3]
    assert sess.get_outputs()[0].shape == ref.get_outputs()[0].shape == [None, 3]


def test_overridable_initializer_is_listed_and_can_be_fed(add_relu_model):
    model = onnx.ModelProto()
    model.CopyFrom(add_relu_model)
    model.graph.input.append(tensor("w", [3]))  # w is both an initializer and an input
    sess = ort.InferenceSession(model)
    ref = _ort_session(model)
    assert [i.name for i in sess.get_inputs()] == [i.name for i in ref.get_inputs()] == ["x"]
    over = sess.get_overridable_initializers()
    assert [(o.name, o.shape, o.type) for o in over] == [("w", [3], "tensor(float)")]
    assert [o.name for o in ref.get_overridable_initializers()] == ["w"]

    x = _x()
    default = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(default, np.maximum(x + W, 0))
    w2 = np.array([10.0, 10.0, 10.0], np.float32)
    overridden = sess.run(None, {"x": x, "w": w2})[0]
    np.testing.assert_array_equal(overridden, np.maximum(x + w2, 0))
    np.testing.assert_array_equal(overridden, ref.run(None, {"x": x, "w": w2})[0])
    # The override lasts one run only.
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], default)


def test_an_initializer_that_is_not_an_input_cannot_be_fed(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    assert sess.get_overridable_initializers() == []
    with pytest.raises(InvalidInput, match="'w'"):
        sess.run(None, {"x": _x(), "w": W})


def test_get_modelmeta_matches_onnxruntime(add_relu_model):
    model = add_relu_model
    model.producer_name = "onyxrt-tests"
    model.domain = "ai.onyxrt.test"
    model.doc_string = "adds w, then relu"
    model.model_version = 7
    helper.set_model_props(model, {"author": "tester", "license": "MIT"})
    meta = ort.InferenceSession(model).get_modelmeta()
    ref = _ort_session(model).get_modelmeta()
    assert meta.producer_name == ref.producer_name == "onyxrt-tests"
    assert meta.graph_name == ref.graph_name == "test_graph"
    assert meta.domain == ref.domain == "ai.onyxrt.test"
    assert meta.description == ref.description == "adds w, then relu"
    assert meta.version == ref.version == 7
    assert meta.custom_metadata_map == ref.custom_metadata_map
    assert meta.custom_metadata_map == {"author": "tester", "license": "MIT"}


# -- provider options -------------------------------------------------------------------


def test_get_provider_options_reports_effective_options_as_strings(toy_provider, add_relu_model):
    sess = ort.InferenceSession(
        add_relu_model, providers=[(TOY, {"device_id": 0, "memory_limit": 4096}), CPU]
    )
    options = sess.get_provider_options()
    assert list(options) == [TOY, CPU]
    assert options[TOY] == {
        "device_id": "0",
        "arena_extend_strategy": "kNextPowerOfTwo",
        "memory_limit": "4096",
    }
    assert options[CPU] == {}  # the CPU provider has no options
    assert all(isinstance(v, str) for v in options[TOY].values())


def test_string_option_values_are_parsed(toy_provider, add_relu_model):
    sess = ort.InferenceSession(
        add_relu_model, providers=[(TOY, {"device_id": " 0 ", "memory_limit": "2KiB"}), CPU]
    )
    assert sess.get_provider_options()[TOY]["device_id"] == "0"
    assert sess.get_provider_options()[TOY]["memory_limit"] == "2048"
    assert sess.memory_stats()[TOY]["limit"] == 2048  # the parsed value reached the arena


def test_unknown_option_key_suggests_the_right_one(toy_provider, add_relu_model):
    with pytest.raises(InvalidProviderOption, match="arena_extend_strateg") as err:
        ort.InferenceSession(add_relu_model, providers=[(TOY, {"arena_extend_strateg": "x"}), CPU])
    message = str(err.value)
    assert "Did you mean 'arena_extend_strategy'?" in message
    assert TOY in message
    assert isinstance(err.value, ValueError)


def test_bad_option_value_lists_the_allowed_values(toy_provider, add_relu_model):
    with pytest.raises(InvalidProviderOption, match="allowed values") as err:
        ort.InferenceSession(
            add_relu_model, providers=[(TOY, {"arena_extend_strategy": "kSameAsRequestd"}), CPU]
        )
    message = str(err.value)
    assert "'kNextPowerOfTwo'" in message and "'kSameAsRequested'" in message
    assert "Did you mean 'kSameAsRequested'?" in message
    with pytest.raises(InvalidProviderOption, match="device_id"):
        ort.InferenceSession(add_relu_model, providers=[(TOY, {"device_id": "first"}), CPU])
    with pytest.raises(InvalidProviderOption, match="'device_id' got '1'; it must be <= 0"):
        ort.InferenceSession(add_relu_model, providers=[(TOY, {"device_id": "1"}), CPU])


# -- set_providers ----------------------------------------------------------------------


def test_set_providers_rebuilds_from_a_fallback_list_to_cpu(add_relu_model):
    with pytest.warns(ort.ProviderFallbackWarning):
        sess = ort.InferenceSession(add_relu_model, providers=["CUDAExecutionProvider", CPU])
    assert [f.provider for f in sess.fallbacks] == ["CUDAExecutionProvider"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ort.ProviderFallbackWarning)
        sess.set_providers([CPU])
    assert sess.get_providers() == [CPU]
    assert sess.fallbacks == []
    assert sess.placement.providers_requested == (CPU,)
    x = _x()
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x + W, 0))


def test_set_providers_warns_at_the_callers_line(add_relu_model, without_gpu_plugins):
    sess = ort.InferenceSession(add_relu_model)
    with pytest.warns(ort.ProviderFallbackWarning, match="onyxrt-cuda") as record:
        sess.set_providers(["CUDAExecutionProvider", CPU])
    assert record[0].filename == __file__
    assert [f.provider for f in sess.fallbacks] == ["CUDAExecutionProvider"]


def test_set_providers_option_change_is_reflected(toy_provider, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, providers=[TOY, CPU])
    assert sess.get_provider_options()[TOY]["arena_extend_strategy"] == "kNextPowerOfTwo"
    sess.set_providers([TOY, CPU], [{"arena_extend_strategy": "kSameAsRequested"}, {}])
    assert sess.get_provider_options()[TOY]["arena_extend_strategy"] == "kSameAsRequested"
    x = _x()
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x + W, 0))


def test_failed_set_providers_keeps_the_previous_configuration(toy_provider, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, providers=[(TOY, {"memory_limit": 4096}), CPU])
    with pytest.raises(InvalidProviderOption, match="bogus"):
        sess.set_providers([(TOY, {"bogus": 1}), CPU])
    assert sess.get_providers() == [TOY, CPU]
    assert sess.get_provider_options()[TOY]["memory_limit"] == "4096"
    assert sess.memory_stats()[TOY]["limit"] == 4096
    x = _x()
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x + W, 0))


# -- logging and the placement report ---------------------------------------------------


def test_verbose_severity_prints_each_nodes_placement(capsys, multi_output_model):
    so = ort.SessionOptions()
    so.log_severity_level = 0
    so.logid = "verbose-test"
    ort.InferenceSession(multi_output_model, so)
    err = capsys.readouterr().err
    lines = err.splitlines()
    for node, op in [("add", "Add"), ("relu", "Relu"), ("mul", "Mul")]:
        assert any(f"node {node} ({op})" in line and CPU in line for line in lines), err
    assert "verbose-test" in err


def test_default_severity_prints_nothing_for_a_clean_cpu_session(capsys, add_relu_model):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sess = ort.InferenceSession(add_relu_model)
        sess.run(None, {"x": _x()})
    captured = capsys.readouterr()
    assert captured.err == ""
    assert captured.out == ""


def test_placement_report_maps_nodes_and_round_trips_through_json(multi_output_model):
    sess = ort.InferenceSession(multi_output_model)
    report = sess.placement
    assert [(n.node, n.op_type, n.provider) for n in report.nodes] == [
        ("add", "Add", CPU),
        ("relu", "Relu", CPU),
        ("mul", "Mul", CPU),
    ]
    assert report.provider_of("relu") == CPU
    with pytest.raises(KeyError):
        report.provider_of("nope")
    data = report.to_dict()
    assert data["providers_used"] == [CPU]
    assert data["copy_bytes_per_run"] == 0
    decoded = json.loads(report.to_json())
    assert decoded == json.loads(json.dumps(data))
    assert {n["node"]: n["provider"] for n in decoded["nodes"]} == {
        "add": CPU,
        "relu": CPU,
        "mul": CPU,
    }
    assert decoded["providers_session"] == [CPU]
    assert json.loads(report.to_json(indent=None)) == decoded


def test_placement_str_mentions_counts(multi_output_model, add_relu_model):
    text = str(ort.InferenceSession(multi_output_model).placement)
    assert f"nodes: 3 ({CPU}: 3)" in text
    assert f"providers used: {CPU}" in text
    # One connected run of CPU nodes is one partition.
    chain = str(ort.InferenceSession(add_relu_model).placement)
    assert f"nodes: 2 ({CPU}: 2), partitions: 1" in chain


# -- session options --------------------------------------------------------------------


def test_free_dimension_override_fixes_the_input_shape(add_relu_model):
    so = ort.SessionOptions()
    so.add_free_dimension_override_by_name("N", 4)
    sess = ort.InferenceSession(add_relu_model, so)
    rso = onnxruntime.SessionOptions()
    rso.add_free_dimension_override_by_name("N", 4)
    ref = _ort_session(add_relu_model, rso)
    assert sess.get_inputs()[0].shape == ref.get_inputs()[0].shape == [4, 3]
    assert sess.get_outputs()[0].shape == [4, 3]
    x = _x(4)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], ref.run(None, {"x": x})[0])
    with pytest.raises(InvalidInput, match="dimension 0 is 2") as err:
        sess.run(None, {"x": _x(2)})
    assert isinstance(err.value, ValueError)


@pytest.mark.parametrize(
    ("level", "ops"),
    [
        (ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ["Identity", "Relu"]),
        (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ["Relu"]),
    ],
)
def test_optimized_model_filepath_writes_a_loadable_equivalent_model(level, ops, tmp_path):
    model = make_model(
        [
            helper.make_node("Identity", ["x"], ["i"], name="ident"),
            helper.make_node("Relu", ["i"], ["y"], name="relu"),
        ],
        [tensor("x", ["N", 3])],
        [tensor("y", ["N", 3])],
    )
    target = tmp_path / "optimized.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    so.optimized_model_filepath = str(target)
    sess = ort.InferenceSession(model, so)
    assert target.is_file()
    saved = onnx.load_model(target)
    onnx.checker.check_model(saved)
    assert [n.op_type for n in saved.graph.node] == ops
    assert [n.op_type for n in sess.placement.nodes] == ops
    x = _x()
    expected = sess.run(None, {"x": x})[0]
    np.testing.assert_array_equal(expected, np.maximum(x, 0))
    np.testing.assert_array_equal(ort.InferenceSession(target).run(None, {"x": x})[0], expected)
    reloaded = onnxruntime.InferenceSession(str(target), providers=[CPU])
    np.testing.assert_array_equal(reloaded.run(None, {"x": x})[0], expected)


def test_session_options_reject_misspelt_attributes():
    so = ort.SessionOptions()
    with pytest.raises(AttributeError, match="Did you mean 'intra_op_num_threads'"):
        so.intra_op_num_thread = 2
    with pytest.raises(AttributeError, match="enable_profiling"):
        so.enable_profilling = True
    so.intra_op_num_threads = 2
    assert so.intra_op_num_threads == 2


def test_graph_optimization_level_accepts_enum_values():
    so = ort.SessionOptions()
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    for level in ort.GraphOptimizationLevel:
        so.graph_optimization_level = level
        assert so.graph_optimization_level is level
    so.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.graph_optimization_level = 2
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    with pytest.raises(ValueError):
        so.graph_optimization_level = 7


# -- run options, cancellation and concurrency ------------------------------------------


def test_terminate_set_before_run_raises_and_can_be_cleared(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    ro = ort.RunOptions()
    ro.terminate = True
    with pytest.raises(RunTerminated, match="terminate"):
        sess.run(None, {"x": _x()}, ro)
    ro.terminate = False
    x = _x()
    np.testing.assert_array_equal(sess.run(None, {"x": x}, ro)[0], np.maximum(x + W, 0))
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x + W, 0))


def test_terminate_from_another_thread_stops_a_long_run_promptly():
    sess = ort.InferenceSession(_add_chain(2000, 1024))
    big = np.zeros((1024, 1024), np.float32)
    ro = ort.RunOptions()

    def stop() -> None:
        time.sleep(0.05)
        ro.terminate = True

    stopper = threading.Thread(target=stop)
    start = time.perf_counter()
    stopper.start()
    with pytest.raises(RunTerminated):
        sess.run(None, {"x": big}, ro)
    elapsed = time.perf_counter() - start
    stopper.join()
    assert elapsed < 5.0
    # Other runs (and this session) are unaffected.
    small = np.zeros((2, 1024), np.float32)
    (y,) = sess.run(None, {"x": small})
    np.testing.assert_array_equal(y, np.full((2, 1024), 2000.0, np.float32))
    ro.terminate = False
    np.testing.assert_array_equal(sess.run(None, {"x": small}, ro)[0], y)


def test_one_session_from_eight_threads_matches_single_thread():
    model = _add_chain(100, 64)
    model.graph.node.append(helper.make_node("Tanh", ["y"], ["z"], name="tanh"))
    model.graph.output[0].name = "z"
    sess = ort.InferenceSession(model)
    inputs = [
        np.random.default_rng(i).standard_normal((16, 64)).astype(np.float32) for i in range(8)
    ]
    expected = [sess.run(None, {"x": a})[0] for a in inputs]
    barrier = threading.Barrier(8)
    results: dict[int, list[np.ndarray]] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            barrier.wait()
            results[i] = [sess.run(None, {"x": inputs[i]})[0] for _ in range(10)]
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    for i in range(8):
        assert len(results[i]) == 10
        for out in results[i]:
            np.testing.assert_array_equal(out, expected[i])
    np.testing.assert_allclose(expected[3], np.tanh(inputs[3] + 100), rtol=1e-5, atol=1e-5)


def test_run_with_ort_values_returns_ort_values(multi_output_model):
    sess = ort.InferenceSession(multi_output_model)
    x = _x()
    value = ort.OrtValue.ortvalue_from_numpy(x)
    outs = sess.run_with_ort_values(["mul_out", "relu_out"], {"x": value})
    assert all(isinstance(o, ort.OrtValue) for o in outs)
    assert [o.device_name() for o in outs] == ["cpu", "cpu"]
    assert [o.shape() for o in outs] == [[4, 3], [4, 3]]
    assert [o.data_type() for o in outs] == ["tensor(float)", "tensor(float)"]
    expected = _ort_run(multi_output_model, {"x": x}, ["mul_out", "relu_out"])
    for o, e in zip(outs, expected):
        np.testing.assert_array_equal(o.numpy(), e)
    assert len(sess.run_with_ort_values(None, {"x": value})) == 3


# -- onyxrt.backend ---------------------------------------------------------------------


def test_backend_is_an_onnx_backend_and_prepares_models(add_relu_model):
    assert issubclass(onyxrt.backend.OnyxBackend, onnx.backend.base.Backend)
    assert onyxrt.backend.supports_device("CPU")
    assert onyxrt.backend.OnyxBackend.supports_device("CPU")
    if ort.get_available_providers() == [CPU]:
        assert not onyxrt.backend.supports_device("CUDA")
    x = _x()
    expected = np.maximum(x + W, 0)
    rep = onyxrt.backend.prepare(add_relu_model, "CPU")
    assert isinstance(rep, onnx.backend.base.BackendRep)
    (y,) = rep.run([x])
    np.testing.assert_array_equal(y, expected)
    np.testing.assert_array_equal(rep.run({"x": x})[0], expected)
    (y2,) = onyxrt.backend.run_model(add_relu_model, [x])
    np.testing.assert_array_equal(y2, expected)


def test_backend_run_node_runs_a_single_add():
    node = helper.make_node("Add", ["a", "b"], ["c"])
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([10.0, 20.0, 30.0], np.float32)
    (c,) = onyxrt.backend.run_node(node, [a, b])
    np.testing.assert_array_equal(c, a + b)


def test_outputs_that_view_initializers_or_feeds_are_copies():
    """An output that is a view of a constant (Reshape of an initializer) or of a feed
    (Reshape of the input) comes back as its own array, run after run: mutating it changes
    neither the next run's result nor the caller's feed."""
    from onnx import helper

    weights = np.arange(12, dtype=np.float32)
    nodes = [helper.make_node("Reshape", ["w", "shape"], ["w_view"], name="view_w"),
             helper.make_node("Reshape", ["x", "shape"], ["x_view"], name="view_x")]
    model = make_model(nodes, [tensor("x", [12])], [tensor("w_view", [3, 4]), tensor("x_view", [3, 4])],
                       {"w": weights, "shape": np.array([3, 4], np.int64)})
    sess = onyxrt.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.ones(12, np.float32)
    for _ in range(2):
        w_out, x_out = sess.run(None, {"x": x})
        assert not np.shares_memory(x_out, x)
        np.testing.assert_array_equal(w_out, weights.reshape(3, 4))
        w_out[...] = -1
        x_out[...] = -1
    np.testing.assert_array_equal(x, 1)
