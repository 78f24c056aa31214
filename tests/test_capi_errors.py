"""``onyxrt.capi`` and the exception classes: code that catches onnxruntime's classes
(``except C.InvalidArgument``, ``except Fail``) catches onyxrt's errors for the same
failures. Each case runs on onnxruntime and on onyxrt side by side: onyxrt's error must be
an instance of its class of the name onnxruntime raised (and of the builtin onnxruntime
raised, for its ValueError/RuntimeError cases).
"""

from __future__ import annotations

import numpy as np
import pytest
from model_helpers import make_model, tensor
from onnx import helper

import onyxrt as ort
from onyxrt.capi import _pybind_state as C
from onyxrt.capi import onnxruntime_pybind11_state as S
from onyxrt.errors import ConfigEntryNotFound, InvalidInput, ModelFileNotFound, UnknownOperator

ortrt = pytest.importorskip("onnxruntime")
from onnxruntime.capi import onnxruntime_pybind11_state as ORT_C  # noqa: E402

STATUS_CLASSES = ["Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException",
                  "InvalidProtobuf", "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail",
                  "ModelLoadCanceled", "ModelRequiresCompilation", "NotFound"]


def test_every_status_class_of_onnxruntime_exists_under_the_same_import_paths():
    for name in [n for n in STATUS_CLASSES if hasattr(ORT_C, n)]:
        ours = getattr(C, name)
        assert ours is getattr(S, name), name
        assert issubclass(ours, Exception) and ours.__name__ == name


def _relu_model():
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])


def _raised(make, runtime):
    try:
        make(runtime)
    except Exception as exc:  # what each runtime raises is the point of these tests
        return exc
    raise AssertionError(f"{runtime.__name__} raised nothing")


def _classes_of(exc) -> tuple[str, set[type]]:
    builtins = {c for c in type(exc).__mro__ if c.__module__ == "builtins" and c not in (object, BaseException, Exception)}
    return type(exc).__name__, builtins


FEED = {"x": np.zeros(2, np.float32)}


def _session(rt, model=None, **kw):
    return rt.InferenceSession((model or _relu_model()).SerializeToString(), **kw)


CASES = {
    "missing model file": lambda rt: rt.InferenceSession("/no/such/model.onnx"),
    "bytes that are not a model": lambda rt: rt.InferenceSession(b"not a model at all"),
    "unknown operator": lambda rt: _session(rt, make_model(
        [helper.make_node("NoSuchOp", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])),
    "wrong input dtype": lambda rt: _session(rt).run(None, {"x": np.zeros(2, np.int64)}),
    "wrong input rank": lambda rt: _session(rt).run(None, {"x": np.zeros((2, 2), np.float32)}),
    "wrong fixed dim": lambda rt: _session(rt).run(None, {"x": np.zeros(3, np.float32)}),
    "unknown output name": lambda rt: _session(rt).run(["nope"], FEED),
    "unknown input name": lambda rt: _session(rt).run(None, {**FEED, "nope": np.zeros(1)}),
    "missing input": lambda rt: _session(rt).run(None, {}),
    "terminated run": lambda rt: _session(rt).run(None, FEED, _terminated(rt)),
    "unknown provider in set_providers": lambda rt: _session(rt).set_providers(["NoSuchProvider"]),
    "missing session config entry": lambda rt: rt.SessionOptions().get_session_config_entry("nope"),
    "missing run config entry": lambda rt: rt.RunOptions().get_run_config_entry("nope"),
}


def _terminated(rt):
    ro = rt.RunOptions()
    ro.terminate = True
    return ro


@pytest.mark.parametrize("case", sorted(CASES))
def test_onyxrt_raises_what_onnxruntime_code_catches(case):
    theirs = _raised(CASES[case], ortrt)
    ours = _raised(CASES[case], ort)
    name, builtins = _classes_of(theirs)
    if type(theirs).__module__.startswith("onnxruntime"):
        assert isinstance(ours, getattr(C, name)), (case, name, type(ours).__mro__)
    for builtin in builtins:  # ValueError / RuntimeError cases of onnxruntime's wrapper
        assert isinstance(ours, builtin), (case, builtin, type(ours).__mro__)
    assert isinstance(ours, ort.errors.OnyxError), "onyxrt's own typed error, with its message"


def test_a_dangling_node_input_is_invalid_graph_where_onnxruntime_says_invalid_argument():
    # onnxruntime reports "Node input 'z' is not a graph input, initializer, or output of
    # a previous node" as INVALID_ARGUMENT; onyxrt raises InvalidGraph (a Fail, like the
    # rest of its load-time model errors). Code catching Exception or Fail sees both.
    model = make_model([helper.make_node("Relu", ["z"], ["y"])], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(ortrt.capi.onnxruntime_pybind11_state.InvalidArgument):
        ortrt.InferenceSession(model.SerializeToString())
    with pytest.raises(C.InvalidGraph) as err:
        ort.InferenceSession(model.SerializeToString())
    assert isinstance(err.value, C.Fail) and "'z'" in str(err.value)


def test_specific_classes_name_the_failure():
    with pytest.raises(ModelFileNotFound, match="/no/such/model.onnx"):
        ort.InferenceSession("/no/such/model.onnx")
    model = make_model([helper.make_node("NoSuchOp", ["x"], ["y"], name="n1")], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(UnknownOperator, match="'NoSuchOp'") as err:
        ort.InferenceSession(model.SerializeToString())
    assert isinstance(err.value, C.NotImplemented) and isinstance(err.value, C.InvalidGraph)
    with pytest.raises(ConfigEntryNotFound, match="key: nope") as err2:
        ort.SessionOptions().get_session_config_entry("nope")
    assert isinstance(err2.value, RuntimeError) and isinstance(err2.value, ValueError)
    with pytest.raises(InvalidInput, match="'x'"):
        _session(ort).run(None, {"x": np.zeros(3, np.float32)})


def test_capi_modules_of_onnxruntime_import_under_onyxrt():
    from onyxrt.capi import (
        _ld_preload,  # noqa: F401
        build_and_package_info,
        onnxruntime_inference_collection,
        onnxruntime_validation,
    )

    assert build_and_package_info.package_name == "onyxrt"
    assert onnxruntime_inference_collection.InferenceSession is ort.InferenceSession
    assert onnxruntime_inference_collection.Session is ort.InferenceSession
    assert isinstance(onnxruntime_validation.check_distro_info(), str)
    assert ort.onnxruntime_validation is onnxruntime_validation
    names, options = onnxruntime_inference_collection.check_and_normalize_provider_args(
        [("CPUExecutionProvider", {"a": 1})], None, ["CPUExecutionProvider"])
    theirs = ortrt.capi.onnxruntime_inference_collection.check_and_normalize_provider_args(
        [("CPUExecutionProvider", {"a": 1})], None, ["CPUExecutionProvider"])
    assert (names, options) == (list(theirs[0]), [dict(o) for o in theirs[1]])
    reference = ortrt.capi.onnxruntime_inference_collection
    for device in ("cpu", "cuda", "npu"):
        assert onnxruntime_inference_collection.get_ort_device_type(device) == reference.get_ort_device_type(device)
    assert onnxruntime_inference_collection.get_vendor_id_for_device_type("cuda") == int(
        reference.get_vendor_id_for_device_type("cuda"))


def test_pybind_state_exports_what_its_all_says():
    for name in C.__all__:
        assert hasattr(C, name), name
    assert (int(C.kSameAsRequested), int(C.kNextPowerOfTwo)) == (int(ORT_C.kSameAsRequested), int(ORT_C.kNextPowerOfTwo))
