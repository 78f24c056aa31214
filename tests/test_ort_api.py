"""onnxruntime's public API on onyxrt, side by side with the onnxruntime wheel: module
functions, OrtValue and OrtValueVector, NodeArg types, model metadata, set_providers,
run_async, memory infos, graph assignment, the profile file, the memory-info classes and
devices. Each test compares what a user of onnxruntime would observe."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper

import onyxrt as ort
from onyxrt.errors import InvalidArgument, InvalidInput, ProviderUnavailable

ortrt = pytest.importorskip("onnxruntime")
CPU = "CPUExecutionProvider"


def _relu_neg():
    return make_model(
        [helper.make_node("Relu", ["x"], ["t"], name="r1"), helper.make_node("Neg", ["t"], ["y"], name="n1")],
        [tensor("x", [2])], [tensor("y", [2])])


def _both(model, **kwargs):
    data = model.SerializeToString()
    return ort.InferenceSession(data, **kwargs), ortrt.InferenceSession(data, **kwargs)


# -- module functions ------------------------------------------------------------------


def test_telemetry_switches_and_small_module_functions_behave_as_onnxruntime():
    for name in ("disable_telemetry_events", "enable_telemetry_events"):
        assert getattr(ort, name)() is None and getattr(ortrt, name)() is None
    assert ort.has_collective_ops() is ortrt.has_collective_ops() is False
    assert ort.preload_dlls() is None
    assert ort.import_capi_exception is None and ortrt.import_capi_exception is None
    assert ort.cuda_version == ortrt.cuda_version == ""  # no CUDA provider here
    assert isinstance(ort.version, str) and ort.package_name == "onyxrt"


def test_print_debug_info_lists_every_provider_with_its_state(capsys):
    ort.print_debug_info()
    out = capsys.readouterr().out
    assert ort.__version__ in out
    for name in ort.get_all_providers():
        assert name in out


def _random_model(seed=None):
    attrs = {"shape": [4], "dtype": TensorProto.FLOAT}
    if seed is not None:
        attrs["seed"] = float(seed)
    return make_model([helper.make_node("RandomNormal", [], ["y"], **attrs)], [], [tensor("y", [4])])


def test_set_seed_makes_unseeded_random_operators_repeat(monkeypatch):
    import onyxrt.seeding

    monkeypatch.setattr(onyxrt.seeding, "_seed", None)
    model = _random_model().SerializeToString()
    ort.set_seed(42)
    first = ort.InferenceSession(model).run(None, {})[0]
    again = ort.InferenceSession(model).run(None, {})[0]
    np.testing.assert_array_equal(first, again)
    ort.set_seed(43)
    assert not np.array_equal(ort.InferenceSession(model).run(None, {})[0], first)
    # onnxruntime: the same property (its generator differs from numpy's, so not the values).
    ortrt.set_seed(42)
    a = ortrt.InferenceSession(model).run(None, {})[0]
    ortrt.set_seed(42)
    np.testing.assert_array_equal(a, ortrt.InferenceSession(model).run(None, {})[0])
    # A node's own seed attribute still wins over the global seed.
    seeded = _random_model(seed=7).SerializeToString()
    np.testing.assert_array_equal(ort.InferenceSession(seeded).run(None, {})[0],
                                  ort.InferenceSession(seeded).run(None, {})[0])
    with pytest.raises(InvalidArgument):
        ort.set_seed("42")


def test_logger_callback_gets_every_message_with_its_severity_and_session_logid():
    got = []
    so = ort.SessionOptions()
    so.logid = "my-session"
    so.log_severity_level = 0
    ort.set_default_logger_callback(lambda *record: got.append(record), 0)
    try:
        ort.InferenceSession(_relu_neg().SerializeToString(), so)
    finally:
        ort.set_default_logger_callback(None)
        ort.set_default_logger_severity(2)
    assert got, "no message reached the callback"
    severity, category, logid, location, message = got[0]
    assert isinstance(severity, int) and 0 <= severity <= 4
    assert category == "onyxrt" and logid == "my-session" and ":" in location and message
    with pytest.raises(ValueError):
        ort.set_default_logger_callback(None, 7)
    ort.set_default_logger_verbosity(1)


def test_global_thread_pool_sizes_apply_to_sessions_without_their_own(monkeypatch):
    import onyxrt.session
    import onyxrt.threads

    asked = []
    real = onyxrt.session.intra_op_limit
    monkeypatch.setattr(onyxrt.session, "intra_op_limit", lambda n: asked.append(n) or real(n))
    monkeypatch.setattr(onyxrt.threads, "_global_sizes", None)
    ort.set_global_thread_pool_sizes(1, 1)
    so = ort.SessionOptions()
    so.use_per_session_threads = False
    shared = ort.InferenceSession(_relu_neg().SerializeToString(), so)
    assert set(asked) <= {1}  # the warm-up's runs at creation (if any) ran under it too
    asked.clear()
    shared.run(None, {"x": np.ones(2, np.float32)})
    own = ort.InferenceSession(_relu_neg().SerializeToString())
    own.run(None, {"x": np.ones(2, np.float32)})
    # the shared size limits the first session's runs; the per-session one keeps its own
    # default (0: no limit, so its runs do not enter a limit at all)
    assert asked == [1]
    assert own._intra_op_threads == 0
    with pytest.raises(InvalidArgument):
        ort.set_global_thread_pool_sizes(-1, 0)


def test_register_execution_provider_library_loads_an_onyxrt_plugin_module(tmp_path):
    from toy_provider import TOY_PLUGIN

    from onyxrt.discovery import reset_catalog

    reset_catalog()
    plugin = tmp_path / "my_toy_plugin.py"
    plugin.write_text(TOY_PLUGIN)
    try:
        ort.register_execution_provider_library("toy", str(plugin))
        assert "ToyDeviceExecutionProvider" in ort.get_available_providers()
        sess = ort.InferenceSession(_relu_neg().SerializeToString(), providers=["ToyDeviceExecutionProvider", CPU])
        assert "ToyDeviceExecutionProvider" in sess.get_providers()
        with pytest.raises(InvalidArgument, match="already registered"):
            ort.register_execution_provider_library("toy", str(plugin))
        ort.unregister_execution_provider_library("toy")
        assert "ToyDeviceExecutionProvider" not in ort.get_all_providers()
        with pytest.raises(InvalidArgument, match="no execution provider library"):
            ort.unregister_execution_provider_library("toy")
        with pytest.raises(InvalidArgument, match="native onnxruntime plugin library"):
            ort.register_execution_provider_library("native", "/opt/libonnxruntime_providers_foo.so")
    finally:
        reset_catalog()


def test_kernel_and_device_introspection_of_capi():
    from onyxrt.capi import _pybind_state as C

    defs = C.get_all_opkernel_def()
    relu = [d for d in defs if d.op_name == "Relu" and d.provider == CPU]
    assert relu and all(d.domain == "ai.onnx" for d in relu)
    assert relu[-1].version_range[1] == 2147483647
    assert {d.op_name for d in C.get_registered_ep_kernel_defs(CPU)} >= {"Relu", "Conv", "MatMul"}
    assert any(s.name == "Relu" for s in C.get_all_operator_schema())
    devices = C.get_hardware_devices()
    assert devices[0].type == "cpu" and devices[0].type == ort.OrtHardwareDeviceType.CPU
    assert C.is_dlpack_uint8_tensor(np.zeros(3, np.uint8).__dlpack__())
    assert not C.is_dlpack_uint8_tensor(np.zeros(3, np.float32).__dlpack__())
    assert isinstance(C.get_default_session_options(), ort.SessionOptions)


# -- OrtValue ----------------------------------------------------------------------------


def test_ortvalue_accessors_match_onnxruntime():
    arr = np.arange(6, dtype=np.float32).reshape(2, 3)
    ours, theirs = ort.OrtValue.ortvalue_from_numpy(arr), ortrt.OrtValue.ortvalue_from_numpy(arr)
    for method in ("element_type", "data_type", "shape", "tensor_size_in_bytes", "device_name",
                   "is_tensor", "has_value", "is_sparse_tensor", "is_tensor_sequence"):
        assert getattr(ours, method)() == getattr(theirs, method)(), method
    assert ours.data_ptr() == theirs.data_ptr() == arr.__array_interface__["data"][0]
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    assert np.asarray(ours).dtype == np.float32  # not an object array


def test_ortvalue_from_numpy_with_onnx_type_reads_the_bits_and_converts_back():
    bits = np.array([16256, 16384, 49024], np.uint16)  # bfloat16 1.0, 2.0, -1.0
    ours = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    theirs = ortrt.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, TensorProto.BFLOAT16)
    assert ours.data_type() == theirs.data_type() == "tensor(bfloat16)"
    assert ours.element_type() == theirs.element_type() == TensorProto.BFLOAT16
    np.testing.assert_array_equal(ours.numpy().astype(np.float32), [1.0, 2.0, -1.0])  # onnxruntime cannot
    with pytest.raises(InvalidArgument, match="bytes per item"):
        ort.OrtValue.ortvalue_from_numpy_with_onnx_type(np.zeros(2, np.float32), TensorProto.BFLOAT16)


def test_from_dlpack_takes_a_capsule_and_ortvaluevector_holds_values():
    arr = np.arange(4, dtype=np.int64)
    value = ort.OrtValue.from_dlpack(arr.__dlpack__())
    np.testing.assert_array_equal(value.numpy(), arr)
    from onyxrt.capi._pybind_state import OrtValueVector

    vec = OrtValueVector()
    vec.reserve(2)
    vec.push_back(value)
    vec.push_back(ort.OrtValue.ortvalue_from_numpy(np.array([True, False])))
    assert len(vec) == 2 and vec.element_type_at(0) == TensorProto.INT64
    assert vec.bool_tensor_indices() == [1]
    np.testing.assert_array_equal(np.from_dlpack(_Capsule(vec.dlpack_at(0))), arr)
    assert [v.shape() for v in vec] == [[4], [2]]


class _Capsule:
    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (1, 0)


def test_copy_tensors_copies_between_values_and_checks_shapes():
    src = [ort.OrtValue.ortvalue_from_numpy(np.arange(3, dtype=np.float32))]
    dst = [ort.OrtValue.ortvalue_from_shape_and_type([3], np.float32)]
    ort.copy_tensors(src, dst)
    np.testing.assert_array_equal(dst[0].numpy(), [0, 1, 2])
    with pytest.raises(InvalidArgument, match="destination 0"):
        ort.copy_tensors(src, [ort.OrtValue.ortvalue_from_shape_and_type([4], np.float32)])


def test_iobinding_outputs_as_ortvaluevector_and_run_with_ortvaluevector():
    sess = ort.InferenceSession(_relu_neg().SerializeToString())
    binding = sess.io_binding()
    binding.bind_cpu_input("x", np.array([1, -2], np.float32))
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    vec = binding.get_outputs_as_ortvaluevector()
    np.testing.assert_array_equal(vec[0].numpy(), [-1, 0])
    from onyxrt.capi._pybind_state import OrtValueVector

    fetches = OrtValueVector()
    feeds = OrtValueVector([ort.OrtValue.ortvalue_from_numpy(np.array([3, -4], np.float32))])
    sess.run_with_ortvaluevector(ort.RunOptions(), ["x"], feeds, ["y"], fetches, [])
    np.testing.assert_array_equal(fetches[0].numpy(), [-3, 0])


# -- NodeArg, metadata --------------------------------------------------------------------


def _typed_outputs_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    opt = helper.make_value_info("o", helper.make_optional_type_proto(
        helper.make_tensor_type_proto(TensorProto.FLOAT, [2])))
    graph = helper.make_graph(
        [helper.make_node("SequenceConstruct", ["x"], ["s"]), helper.make_node("Optional", ["x"], ["o"])],
        "g", [x], [seq, opt])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_nodearg_types_of_sequences_and_optionals_are_onnxruntimes_strings():
    ours, theirs = _both(_typed_outputs_model())
    assert [(o.name, o.type, o.shape) for o in ours.get_outputs()] == [
        (o.name, o.type, o.shape) for o in theirs.get_outputs()]
    assert [o.type for o in ours.get_outputs()] == ["seq(tensor(float))", "optional(tensor(float))"]


def test_nodearg_map_types_are_spelled_as_onnxruntime_spells_them():
    from onyxrt.dtypes import type_proto_string

    proto = helper.make_sequence_type_proto(
        helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    assert type_proto_string(proto) == "seq(map(int64,tensor(float)))"  # logreg_iris's output


def test_declared_dim_names_are_kept_and_minus_one_is_unknown():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["unk__214", -1, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [-1, "unk__215", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    ours, theirs = _both(model)
    assert [i.shape for i in ours.get_inputs()] == [i.shape for i in theirs.get_inputs()] == [["unk__214", None, 3]]
    assert [o.shape for o in ours.get_outputs()] == [o.shape for o in theirs.get_outputs()]
    feed = {"x": np.ones((2, 5, 3), np.float32)}
    np.testing.assert_array_equal(ours.run(None, feed)[0], theirs.run(None, feed)[0])


def test_model_version_of_a_model_without_one_is_int64_max():
    ours, theirs = _both(_relu_neg())
    assert ours.get_modelmeta().version == theirs.get_modelmeta().version == 2**63 - 1
    model = _relu_neg()
    model.model_version = 3
    ours, theirs = _both(model)
    assert ours.get_modelmeta().version == theirs.get_modelmeta().version == 3


# -- feeds ------------------------------------------------------------------------------


def _string_identity():
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [None])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [None])
    return make_model([helper.make_node("Identity", ["x"], ["y"])], [x], [y])


@pytest.mark.parametrize("feed", [
    np.array(["ab", "c"]),
    np.array(["ab", 3], dtype=object),
    ["ab", "c"],
    [1, 2],
    np.array([b"ab", b"cd"]).view("V2"),
], ids=["unicode", "mixed objects", "list of str", "list of ints", "np.void records"])
def test_string_inputs_take_every_form_onnxruntime_takes(feed):
    ours, theirs = _both(_string_identity())
    got, want = ours.run(None, {"x": feed})[0], theirs.run(None, {"x": feed})[0]
    assert got.dtype == object and list(got) == list(want)
    assert all(type(v) is str for v in got)


def test_string_inputs_of_bytes_are_decoded_item_by_item():
    # onnxruntime reads an 'S' array past each item's end (b"ab", b"c" → 'abc', 'c') and
    # turns bytes objects into their repr ("b'ab'"); onyxrt decodes each item as UTF-8.
    ours = ort.InferenceSession(_string_identity().SerializeToString())
    assert list(ours.run(None, {"x": np.array([b"ab", b"c"])})[0]) == ["ab", "c"]
    assert list(ours.run(None, {"x": np.array([b"ab", "\u00e9"], dtype=object)})[0]) == ["ab", "\u00e9"]
    assert list(ours.run(None, {"x": np.array([b"\xff"], dtype=object)})[0]) == ["\udcff"]  # kept, not lost


def test_an_int_array_for_a_string_input_is_refused_as_onnxruntime_refuses_it():
    ours, theirs = _both(_string_identity())
    with pytest.raises(ortrt.capi.onnxruntime_pybind11_state.InvalidArgument):
        theirs.run(None, {"x": np.array([1, 2])})
    with pytest.raises(InvalidInput, match=r"tensor\(string\)"):
        ours.run(None, {"x": np.array([1, 2])})


def test_out_of_range_python_ints_are_a_typed_error_naming_the_input():
    x = helper.make_tensor_value_info("x", TensorProto.INT8, [1])
    y = helper.make_tensor_value_info("y", TensorProto.INT8, [1])
    ours, theirs = _both(make_model([helper.make_node("Identity", ["x"], ["y"])], [x], [y]))
    with pytest.raises(RuntimeError):  # onnxruntime: "Could not create tensor from given input list"
        theirs.run(None, {"x": [300]})
    with pytest.raises(InvalidInput, match=r"'x'.*-128\.\.127"):
        ours.run(None, {"x": [300]})
    assert ours.run(None, {"x": [3.7]})[0].tolist() == theirs.run(None, {"x": [3.7]})[0].tolist() == [3]


# -- session methods ------------------------------------------------------------------


def test_set_providers_raises_for_unknown_names_and_keeps_the_session_working():
    ours, theirs = _both(_relu_neg())
    with pytest.raises(RuntimeError, match="Unknown Provider Type: Nope"):
        theirs.set_providers(["Nope"])
    with pytest.raises(ProviderUnavailable, match="Unknown Provider Type: Nope") as err:
        ours.set_providers(["Nope"])
    assert isinstance(err.value, RuntimeError)
    np.testing.assert_array_equal(ours.run(None, {"x": np.ones(2, np.float32)})[0], [-1, -1])
    with pytest.warns(UserWarning):  # a provider onnxruntime knows but that is missing here
        ours.set_providers(["TensorrtExecutionProvider", CPU])
    assert ours.get_providers() == [CPU]


def test_run_async_calls_back_with_outputs_or_the_error():
    ours, theirs = _both(_relu_neg())
    results = {}

    def run(sess, key, feed):
        done = threading.Event()

        def callback(outputs, user_data, error):
            results[key] = (outputs, user_data, error)
            done.set()

        sess.run_async(None, feed, callback, key)
        assert done.wait(10), "callback not called"

    good, bad = {"x": np.array([1, -2], np.float32)}, {"x": np.ones(3, np.float32)}
    run(ours, "ours", good)
    run(theirs, "theirs", good)
    np.testing.assert_array_equal(results["ours"][0][0], results["theirs"][0][0])
    assert results["ours"][1:] == ("ours", "") and results["theirs"][2] == ""
    run(ours, "ours-bad", bad)
    run(theirs, "theirs-bad", bad)
    assert results["ours-bad"][0] == [] == results["theirs-bad"][0]
    assert "dimension 0 is 3" in results["ours-bad"][2] and results["theirs-bad"][2]
    with pytest.raises(ValueError):  # a missing input raises at the call, in both
        ours.run_async(None, {}, lambda *a: None, None)
    with pytest.raises(ValueError):
        theirs.run_async(None, {}, lambda *a: None, None)


def test_memory_infos_and_input_devices_describe_cpu_memory_as_onnxruntime_does():
    ours, theirs = _both(_relu_neg())
    for mine, reference in ((ours.get_input_memory_infos(), theirs.get_input_memory_infos()),
                            (ours.get_output_memory_infos(), theirs.get_output_memory_infos())):
        assert [(m.name, m.device_id, int(m.mem_type), int(m.allocator_type), int(m.device_mem_type),
                 m.device_vendor_id) for m in mine] == [
            (m.name, m.device_id, int(m.mem_type), int(m.allocator_type), int(m.device_mem_type),
             m.device_vendor_id) for m in reference]
    assert [d.ep_name for d in ours.get_input_epdevices()] == [d.ep_name for d in theirs.get_input_epdevices()]


def test_graph_assignment_info_lists_each_node_with_its_provider():
    so_ours, so_theirs = ort.SessionOptions(), ortrt.SessionOptions()
    so_theirs.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    so_ours.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so_theirs.graph_optimization_level = ortrt.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = _relu_neg().SerializeToString()
    ours = ort.InferenceSession(data, so_ours).get_provider_graph_assignment_info()
    theirs = ortrt.InferenceSession(data, so_theirs).get_provider_graph_assignment_info()

    def flat(info):
        return [(s.ep_name, [(n.name, n.domain, n.op_type) for n in s.get_nodes()]) for s in info]

    assert flat(ours) == flat(theirs)


def test_tuning_dynamic_options_and_captured_graphs_are_accepted():
    sess = ort.InferenceSession(_relu_neg().SerializeToString())
    assert sess.get_tuning_results() == []
    sess.set_tuning_results([])
    with pytest.raises(InvalidArgument):
        sess.set_tuning_results([{"ep": "x"}], error_on_invalid=True)
    sess.set_ep_dynamic_options({"ep.dynamic.workload_type": "Efficient"})
    assert sess.get_ep_dynamic_options() == {"ep.dynamic.workload_type": "Efficient"}
    sess.release_captured_graph()
    value = sess.create_ortvalue_from_shape_and_type([2, 2], np.float32, "cpu")
    assert value.shape() == [2, 2]


def test_the_profile_has_one_event_per_line_like_onnxruntimes(tmp_path):
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = str(tmp_path / "trace")
    sess = ort.InferenceSession(_relu_neg().SerializeToString(), so)
    sess.run(None, {"x": np.ones(2, np.float32)})
    path = sess.end_profiling()
    text = Path(path).read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "[" and lines[-1] == "]"
    events = [json.loads(line.rstrip(",")) for line in lines[1:-1]]
    assert events == json.loads(text)
    assert {e["cat"] for e in events} >= {"Session", "Node"} and all(e["ph"] == "X" for e in events)


# -- memory info classes and devices ------------------------------------------------------


def test_ortdevice_and_memory_info_match_onnxruntime():
    for name in ("cpu", "cuda", "dml"):
        ours, theirs = ort.OrtDevice.make(name, 0), ortrt.OrtDevice.make(name, 0)
        assert (ours.device_type(), ours.device_mem_type(), ours.device_id()) == (
            theirs.device_type(), theirs.device_mem_type(), theirs.device_id()), name
    with pytest.raises(InvalidArgument, match="Did you mean 'cuda'"):
        ort.OrtDevice.make("cudaa", 0)
    args = ("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    ours = ort.OrtMemoryInfo(*args)
    theirs = ortrt.OrtMemoryInfo("Cpu", ortrt.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ortrt.OrtMemType.DEFAULT)
    assert (ours.name, ours.device_id, int(ours.mem_type), int(ours.allocator_type), int(ours.device_mem_type)) == (
        theirs.name, theirs.device_id, int(theirs.mem_type), int(theirs.allocator_type), int(theirs.device_mem_type))
    v2 = ort.OrtMemoryInfo.create_v2("Cuda", ort.OrtMemoryInfoDeviceType.GPU, 0x10DE, 0,
                                     ort.OrtDeviceMemoryType.DEFAULT, 0, ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR)
    ref = ortrt.OrtMemoryInfo.create_v2("Cuda", ortrt.OrtMemoryInfoDeviceType.GPU, 0x10DE, 0,
                                        ortrt.OrtDeviceMemoryType.DEFAULT, 0, ortrt.OrtAllocatorType.ORT_ARENA_ALLOCATOR)
    assert (v2.name, v2.device_vendor_id, v2.device_id) == (ref.name, ref.device_vendor_id, ref.device_id)
    for enum_name in ("OrtMemType", "OrtAllocatorType", "OrtDeviceMemoryType", "OrtMemoryInfoDeviceType",
                      "OrtHardwareDeviceType", "OrtExecutionProviderDevicePolicy", "OrtCompileApiFlags"):
        ours_enum, theirs_enum = getattr(ort, enum_name), getattr(ortrt, enum_name)
        assert {k: int(v) for k, v in ours_enum.__members__.items()} == {
            k: int(v) for k, v in theirs_enum.__members__.items()}, enum_name


def test_arena_cfg_takes_onnxruntimes_forms_and_names_a_bad_key():
    for args in ((0, -1, -1, -1), ({"max_mem": 16, "arena_extend_strategy": 1},)):
        ours, theirs = ort.OrtArenaCfg(*args), ortrt.OrtArenaCfg(*args)
        for key in ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes", "max_dead_bytes_per_chunk",
                    "initial_growth_chunk_size_bytes", "max_power_of_two_extend_bytes"):
            assert getattr(ours, key) == getattr(theirs, key), key
    with pytest.raises(InvalidArgument, match="Did you mean 'max_mem'"):
        ort.OrtArenaCfg({"max_memm": 1})
    info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
    from onyxrt.memory_info import registered_allocators

    before = len(registered_allocators())
    assert ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, 1, -1, -1)) is None
    assert registered_allocators()[before].arena["arena_extend_strategy"] == 1


def test_ep_devices_have_memory_infos_streams_and_hardware_types():
    cpu = next(d for d in ort.get_ep_devices() if d.ep_name == CPU)
    assert cpu.device.type == "cpu" and cpu.device.type == ort.OrtHardwareDeviceType.CPU
    assert cpu.device.type == ort.OrtHardwareDeviceType.CPU and cpu.device.type != ort.OrtHardwareDeviceType.GPU
    assert cpu.memory_info(ort.OrtDeviceMemoryType.DEFAULT).name == "Cpu"
    assert cpu.create_sync_stream().get_handle() == 0
    theirs = next(d for d in ortrt.get_ep_devices() if d.ep_name == CPU)
    assert int(theirs.device.type) == cpu.device.type.value
    assert isinstance(onnx.__version__, str)


def test_a_provider_listed_twice_is_ignored_with_a_warning_as_in_onnxruntime():
    data = _relu_neg().SerializeToString()
    with pytest.warns(UserWarning, match="listed twice"):
        ours = ort.InferenceSession(data, providers=[CPU, CPU])
    with pytest.warns(UserWarning, match="Duplicate provider"):
        theirs = ortrt.InferenceSession(data, providers=[CPU, CPU])
    assert ours.get_providers() == theirs.get_providers() == [CPU]


def test_provider_arguments_onnxruntime_tolerates_are_warnings_not_errors():
    data = _relu_neg().SerializeToString()
    with pytest.warns(UserWarning, match="taken as"):  # a bare name, not a list
        assert ort.InferenceSession(data, providers=CPU).get_providers() == [CPU]
    with pytest.warns(UserWarning, match="without providers"):
        ort.InferenceSession(data, provider_options=[{}])
    ortrt.InferenceSession(data, provider_options=[{}])  # onnxruntime: accepted, ignored
