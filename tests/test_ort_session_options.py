"""onnxruntime's ``SessionOptions`` features beyond the basics, side by side with the
onnxruntime wheel: initializers supplied by the caller (external data in memory),
providers added on the options, custom-op libraries, cancellation, a selection delegate,
saving the optimized model with external initializers, the model's own ``ort_config``,
``ModelCompiler``, and LoRA adapters in runs."""

from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from model_helpers import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.errors import CompileError, InvalidArgument, InvalidInput, UnknownOperator
from onyxrt.status import Fail, ModelLoadCanceled

ortrt = pytest.importorskip("onnxruntime")
CPU = "CPUExecutionProvider"
W = np.arange(64, dtype=np.float32).reshape(8, 8) / 10.0


def _matmul_model():
    return make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                      [tensor("x", [1, 8])], [tensor("y", [1, 8])], {"w": W})


def _save_with_external_weights(folder, location="weights.bin"):
    model = _matmul_model()
    path = str(folder / "model.onnx")
    onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location, size_threshold=0)
    return path


X = np.ones((1, 8), np.float32)


def test_external_initializers_supplied_by_the_caller_replace_the_missing_file(tmp_path):
    path = _save_with_external_weights(tmp_path)
    os.remove(tmp_path / "weights.bin")
    values = [W * 2]
    results = []
    for rt in (ort, ortrt):
        so = rt.SessionOptions()
        so.add_external_initializers(["w"], [rt.OrtValue.ortvalue_from_numpy(values[0])])
        results.append(rt.InferenceSession(path, so, providers=[CPU]).run(None, {"x": X})[0])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
    np.testing.assert_allclose(results[0], X @ (W * 2), rtol=1e-6)
    so = ort.SessionOptions()
    with pytest.raises(InvalidArgument, match="2 names but 1 values"):
        so.add_external_initializers(["w", "v"], [ort.OrtValue.ortvalue_from_numpy(W)])


def test_external_data_files_given_in_memory(tmp_path):
    path = _save_with_external_weights(tmp_path)
    data = (tmp_path / "weights.bin").read_bytes()
    model_bytes = (tmp_path / "model.onnx").read_bytes()
    os.remove(tmp_path / "weights.bin")
    results = []
    for rt in (ort, ortrt):
        so = rt.SessionOptions()
        so.add_external_initializers_from_files_in_memory(["weights.bin"], [data], [len(data)])
        results.append(rt.InferenceSession(model_bytes, so, providers=[CPU]).run(None, {"x": X})[0])
    np.testing.assert_allclose(results[0], results[1], rtol=1e-6)
    assert os.path.exists(path)
    so = ort.SessionOptions()
    with pytest.raises(InvalidArgument, match="outside its buffer"):
        so.add_external_initializers_from_files_in_memory(["weights.bin"], [data], [len(data) + 1])


def test_providers_added_on_the_options_are_used_when_the_session_names_none():
    so = ort.SessionOptions()
    so.add_provider(CPU, {"arena_extend_strategy": "kSameAsRequested"})
    assert so.has_providers()
    sess = ort.InferenceSession(_matmul_model().SerializeToString(), so)
    assert sess.get_providers() == [CPU]
    assert any("arena_extend_strategy" in note for note in sess.placement.option_notes)


def test_a_selection_delegate_picks_among_the_usable_devices():
    seen = []

    def delegate(ep_devices, model_metadata, runtime_metadata, max_selections):
        seen.append((ep_devices, max_selections))
        return [d for d in ep_devices if d.ep_name == CPU]

    so = ort.SessionOptions()
    so.set_provider_selection_policy_delegate(delegate)
    sess = ort.InferenceSession(_matmul_model().SerializeToString(), so)
    assert sess.get_providers() == [CPU]
    devices, count = seen[0]
    assert devices and all(d.state == "usable" for d in devices) and count == len(devices)
    with pytest.raises(InvalidArgument):
        so.set_provider_selection_policy_delegate("not callable")


def test_custom_op_libraries_are_recorded_and_named_when_their_operator_is_missing():
    so = ort.SessionOptions()
    with pytest.warns(UserWarning, match="cannot load native custom-op libraries"):
        so.register_custom_ops_library("/opt/libortextensions.so")
    assert so.custom_op_libraries() == ["/opt/libortextensions.so"]
    # A model without custom operators runs as before.
    ort.InferenceSession(_matmul_model().SerializeToString(), so)
    model = make_model([helper.make_node("NoSuchOp", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(UnknownOperator, match="libortextensions.so"):
        ort.InferenceSession(model.SerializeToString(), so)


def test_load_cancellation_stops_creation():
    so = ort.SessionOptions()
    so.set_load_cancellation_flag(True)
    with pytest.raises(ModelLoadCanceled):
        ort.InferenceSession(_matmul_model().SerializeToString(), so)
    so.set_load_cancellation_flag(False)
    ort.InferenceSession(_matmul_model().SerializeToString(), so)


def test_optimized_model_is_saved_with_its_large_initializers_external(tmp_path):
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    so.add_session_config_entry("session.optimized_model_external_initializers_file_name", "opt.bin")
    so.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "100")
    ort.InferenceSession(_matmul_model().SerializeToString(), so)
    assert (tmp_path / "opt.bin").stat().st_size >= W.nbytes
    saved = onnx.load(str(tmp_path / "opt.onnx"), load_external_data=False)
    assert any(t.data_location == TensorProto.EXTERNAL for t in saved.graph.initializer)
    # The saved model runs on both runtimes, with the same result as the original.
    want = X @ W
    for rt in (ort, ortrt):
        got = rt.InferenceSession(str(tmp_path / "opt.onnx"), providers=[CPU]).run(None, {"x": X})[0]
        np.testing.assert_allclose(got, want, rtol=1e-5)
    # Creating the session again rewrites the file; it does not grow.
    size = (tmp_path / "opt.bin").stat().st_size
    ort.InferenceSession(_matmul_model().SerializeToString(), so)
    assert (tmp_path / "opt.bin").stat().st_size == size


def _with_ort_config(text):
    model = _matmul_model()
    helper.set_model_props(model, {"ort_config": text})
    return model.SerializeToString()


def test_the_models_ort_config_applies_with_the_environment_variable(monkeypatch, tmp_path):
    data = _with_ort_config('{"session_options": {"enable_profiling": 1, "intra_op_num_threads": 1, "foo": 2}}')
    monkeypatch.chdir(tmp_path)
    assert ort.InferenceSession(data).end_profiling() == ""  # not asked for: ignored
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "1")
    so = ort.SessionOptions()
    sess = ort.InferenceSession(data, so)
    sess.run(None, {"x": X})
    assert sess.end_profiling() and not so.enable_profiling  # the caller's options are untouched
    assert sess.get_session_options().intra_op_num_threads == 1
    theirs = ortrt.InferenceSession(data)
    theirs.run(None, {"x": X})
    assert theirs.end_profiling()  # onnxruntime profiles too
    with pytest.raises(InvalidArgument, match="must be an integer"):
        ort.InferenceSession(_with_ort_config('{"session_options": {"enable_profiling": "yes"}}'))
    with pytest.raises(InvalidArgument, match="not valid JSON"):
        ort.InferenceSession(_with_ort_config("{nope"))
    monkeypatch.setenv("ORT_LOAD_CONFIG_FROM_MODEL", "2")
    with pytest.raises(InvalidArgument, match="'0' and '1'"):
        ort.InferenceSession(data)


def test_model_compiler_writes_a_model_both_runtimes_run(tmp_path):
    source = tmp_path / "model.onnx"
    onnx.save_model(_matmul_model(), str(source))
    compiler = ort.ModelCompiler(ort.SessionOptions(), str(source))
    compiler.compile_to_file(str(tmp_path / "compiled.onnx"))
    for rt in (ort, ortrt):
        got = rt.InferenceSession(str(tmp_path / "compiled.onnx"), providers=[CPU]).run(None, {"x": X})[0]
        np.testing.assert_allclose(got, X @ W, rtol=1e-5)
    compiled = ort.ModelCompiler(ort.SessionOptions(), source.read_bytes()).compile_to_bytes()
    np.testing.assert_allclose(ort.InferenceSession(compiled).run(None, {"x": X})[0], X @ W, rtol=1e-5)
    chunks = []
    ort.ModelCompiler(ort.SessionOptions(), str(source)).compile_to_stream(chunks.append)
    assert b"".join(chunks) == compiled
    external = ort.ModelCompiler(ort.SessionOptions(), str(source), external_initializers_file_path="w.bin",
                                 external_initializers_size_threshold=16)
    external.compile_to_file(str(tmp_path / "ext.onnx"))
    assert (tmp_path / "w.bin").stat().st_size >= W.nbytes
    np.testing.assert_allclose(ortrt.InferenceSession(str(tmp_path / "ext.onnx")).run(None, {"x": X})[0],
                               X @ W, rtol=1e-5)


def test_model_compiler_flags_and_binary_location_checks_match_onnxruntime(tmp_path):
    source = tmp_path / "model.onnx"
    onnx.save_model(_matmul_model(), str(source))
    for rt, fail in ((ort, CompileError), (ortrt, ortrt.capi.onnxruntime_pybind11_state.Fail)):
        strict = rt.ModelCompiler(rt.SessionOptions(), str(source), flags=rt.OrtCompileApiFlags.ERROR_IF_NO_NODES_COMPILED)
        with pytest.raises(fail, match="(?i)unable to compile any nodes"):
            strict.compile_to_file(str(tmp_path / "x.onnx"))
    assert issubclass(CompileError, Fail)
    (tmp_path / "exists.onnx").write_bytes(b"")
    guarded = ort.ModelCompiler(ort.SessionOptions(), str(source), flags=ort.OrtCompileApiFlags.ERROR_IF_OUTPUT_FILE_EXISTS)
    with pytest.raises(InvalidArgument, match="exists"):
        guarded.compile_to_file(str(tmp_path / "exists.onnx"))
    (tmp_path / "bins").mkdir()
    for args in (("", "m"), (str(tmp_path / "bins"), "m"), (str(tmp_path / "bins") + "/", "m"), ("a.bin", "m")):
        ours = ort.ModelCompiler(ort.SessionOptions(), str(source))
        theirs = ortrt.ModelCompiler(ortrt.SessionOptions(), str(source))
        outcome = []
        for compiler in (ours, theirs):
            try:
                compiler.set_ep_context_binary_information(*args)
                outcome.append("ok")
            except Exception as exc:  # which runtimes refuse which arguments is the point
                outcome.append(type(exc).__name__)
        assert (outcome[0] == "ok") == (outcome[1] == "ok"), (args, outcome)


def _lora_model():
    """y = x @ (w + delta): ``delta`` is an input with a zero default (what a LoRA
    adapter feeds)."""
    delta = helper.make_tensor_value_info("delta", TensorProto.FLOAT, [8, 8])
    graph = helper.make_graph(
        [helper.make_node("Add", ["w", "delta"], ["wd"]), helper.make_node("MatMul", ["x", "wd"], ["y"])],
        "lora", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8]), delta],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8])],
        [numpy_helper.from_array(W, "w"), numpy_helper.from_array(np.zeros((8, 8), np.float32), "delta")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def test_an_active_lora_adapter_feeds_its_parameters(tmp_path):
    delta = np.eye(8, dtype=np.float32)
    fmt = ort.AdapterFormat()
    fmt.set_parameters({"delta": ort.OrtValue.ortvalue_from_numpy(delta)})
    fmt.export_adapter(str(tmp_path / "a.onnx_adapter"))
    adapter = ort.LoraAdapter()
    adapter.Load(str(tmp_path / "a.onnx_adapter"))
    sess = ort.InferenceSession(_lora_model().SerializeToString())
    np.testing.assert_allclose(sess.run(None, {"x": X})[0], X @ W, rtol=1e-6)
    ro = ort.RunOptions()
    ro.add_active_adapter(adapter)
    np.testing.assert_allclose(sess.run(None, {"x": X}, ro)[0], X @ (W + delta), rtol=1e-6)
    with pytest.raises(InvalidInput, match="both in the feed and by an active LoRA adapter"):
        sess.run(None, {"x": X, "delta": delta}, ro)
    with pytest.raises(InvalidArgument, match="LoraAdapter"):
        ro.add_active_adapter("not an adapter")


def test_keyword_arguments_of_onnxruntime_are_taken():
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["y"], name="add")],
        [tensor("x", [1, 8])], [tensor("y", [1, 8])], {"w": W, "b": np.ones(8, np.float32)})
    data = model.SerializeToString()
    fused = ort.InferenceSession(data)
    assert [n.op_type for n in fused.placement.nodes] != ["MatMul", "Add"]  # fused by default
    for names in (["MatMulAddFusion"], ["fuse_matmul"]):  # onnxruntime's name, or onyxrt's
        plain = ort.InferenceSession(data, disabled_optimizers=names)
        assert [n.op_type for n in plain.placement.nodes] == ["MatMul", "Add"]
        np.testing.assert_allclose(plain.run(None, {"x": X})[0], fused.run(None, {"x": X})[0], rtol=1e-6)
    ortrt.InferenceSession(data, disabled_optimizers=["MatMulAddFusion"])  # onnxruntime takes it too
    with pytest.warns(UserWarning, match="NoSuchOptimizer"):
        ort.InferenceSession(data, disabled_optimizers=["NoSuchOptimizer"])
    with pytest.warns(UserWarning, match="unknown keyword arguments"):
        ort.InferenceSession(data, not_an_argument=1)
    ort.InferenceSession(data, enable_fallback=0)
    helper.set_model_props(model, {"ort_config": '{"session_options": {"intra_op_num_threads": 1}}'})
    sess = ort.InferenceSession(model.SerializeToString(), read_config_from_model=1)
    assert sess.get_session_options().intra_op_num_threads == 1
