"""``IOBinding`` and ``OrtValue`` as onnxruntime users drive them.

Host bindings (arrays, raw pointers, preallocated ``OrtValue`` outputs), clearing
bindings, outputs bound to a second device with its own memory (the toy provider from
``toy_provider.py``, installed through a fake distribution) and DLPack on the CPU.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
from model_helpers import make_model, tensor
from onnx import helper
from toy_provider import ToyBuffer

import onyxrt as ort
from onyxrt.errors import InvalidArgument, InvalidInput, ProviderUnavailable

CPU = "CPUExecutionProvider"
TOY = "ToyDeviceExecutionProvider"

W = np.array([1.0, -2.0, 3.0], np.float32)


def _x(n: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x + W, 0)


def _toy(sess: ort.InferenceSession):
    (toy,) = [p for p in sess._providers if p.name == TOY]
    return toy


# -- host bindings ----------------------------------------------------------------------


def test_bind_cpu_input_and_cpu_output(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    x = _x()
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu")
    assert binding.get_outputs_names() == ["y"]
    sess.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert isinstance(out, ort.OrtValue)
    assert out.is_tensor()
    assert out.device_name() == "cpu"
    assert out.shape() == [2, 3]
    assert out.data_type() == "tensor(float)"
    np.testing.assert_array_equal(out.numpy(), _expected(x))
    (copied,) = binding.copy_outputs_to_cpu()
    assert isinstance(copied, np.ndarray)
    np.testing.assert_array_equal(copied, _expected(x))

    ref = onnxruntime.InferenceSession(add_relu_model.SerializeToString(), providers=[CPU])
    ref_binding = ref.io_binding()
    ref_binding.bind_cpu_input("x", x)
    ref_binding.bind_output("y", "cpu")
    ref.run_with_iobinding(ref_binding)
    np.testing.assert_array_equal(copied, ref_binding.copy_outputs_to_cpu()[0])
    assert out.shape() == ref_binding.get_outputs()[0].shape()
    assert out.data_type() == ref_binding.get_outputs()[0].data_type()


def test_rebinding_an_input_and_running_again_gives_new_results(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    binding = sess.io_binding()
    binding.bind_output("y")
    for seed, n in [(0, 2), (1, 5)]:
        x = _x(n, seed)
        binding.bind_cpu_input("x", x)
        sess.run_with_iobinding(binding)
        np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _expected(x))


def test_bind_output_into_a_preallocated_ortvalue(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    x = _x()
    target = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    host = target.numpy()  # the memory behind the OrtValue
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_ortvalue_output("y", target)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(host, _expected(x))
    (out,) = binding.get_outputs()
    assert np.shares_memory(out.numpy(), host)
    # A second run writes into the same memory again.
    x2 = _x(seed=7)
    binding.bind_cpu_input("x", x2)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(host, _expected(x2))


@pytest.mark.parametrize("element_type", [np.float32, "tensor(float)", onnx.TensorProto.FLOAT])
def test_ortvalue_from_shape_and_type_accepts_onnxruntime_type_spellings(element_type):
    value = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], element_type)
    assert value.shape() == [2, 3]
    assert value.data_type() == "tensor(float)"
    assert value.device_name() == "cpu"


def test_bind_output_to_a_raw_host_pointer(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    x = _x()
    out = np.zeros((2, 3), np.float32)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu", 0, np.float32, list(out.shape), out.ctypes.data)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out, _expected(x))


def test_bind_output_pointer_needs_type_and_shape(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    out = np.zeros((2, 3), np.float32)
    with pytest.raises(InvalidArgument, match="element_type and shape"):
        sess.io_binding().bind_output("y", "cpu", 0, None, None, out.ctypes.data)


def test_bind_input_from_a_raw_host_pointer(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    x = _x(3)
    binding = sess.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
    binding.bind_output("y", "cpu")
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _expected(x))


def test_bind_input_raw_pointer_is_rejected_for_a_device(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    x = _x()
    with pytest.raises(InvalidArgument, match="bind_ortvalue_input"):
        sess.io_binding().bind_input("x", "cuda", 0, np.float32, list(x.shape), x.ctypes.data)


def test_bind_ortvalue_input(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    x = _x()
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x))
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _expected(x))


def test_clear_binding_inputs_and_outputs(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    x = _x()
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    assert len(binding.get_outputs()) == 1

    binding.clear_binding_outputs()
    assert binding.get_outputs_names() == []
    assert binding.get_outputs() == []
    assert binding.copy_outputs_to_cpu() == []

    binding.clear_binding_inputs()
    binding.bind_output("y")
    with pytest.raises(InvalidInput, match="missing") as err:
        sess.run_with_iobinding(binding)
    assert "'x'" in str(err.value)

    binding.bind_cpu_input("x", x)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _expected(x))


def test_binding_an_unknown_output_name_fails_with_a_suggestion(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", _x())
    binding.bind_output("yy")
    with pytest.raises(ValueError, match="'yy'"):
        sess.run_with_iobinding(binding)


def test_binding_an_output_to_an_unavailable_device_fails_at_bind_time(add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    with pytest.raises(ProviderUnavailable, match="cuda"):
        sess.io_binding().bind_output("y", "cuda")


@pytest.mark.parametrize(
    ("shape", "dtype"),
    [([2, 3], np.float32), ([3], np.float64)],
    ids=["broadcastable-shape", "wider-dtype"],
)
def test_preallocated_output_of_the_wrong_shape_or_type_is_an_error(shape, dtype):
    model = make_model(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")],
        [tensor("x", [3])],
        [tensor("y", [3])],
        {"w": W},
    )
    sess = ort.InferenceSession(model)
    target = ort.OrtValue.ortvalue_from_shape_and_type(shape, dtype)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", np.ones(3, np.float32))
    binding.bind_ortvalue_output("y", target)
    with pytest.raises(InvalidArgument, match="'y'"):
        sess.run_with_iobinding(binding)


# -- a second device with its own memory ------------------------------------------------


def test_output_bound_to_the_device_stays_there(toy_provider, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, providers=[TOY, CPU])
    assert sess.placement.nodes_by_provider() == {TOY: ["add", "relu"]}
    toy = _toy(sess)
    x = _x()
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "toy")
    sess.run_with_iobinding(binding)
    assert toy.transfer.to_host == 0  # nothing came back to the host

    (out,) = binding.get_outputs()
    assert out.device_name() == "toy"
    assert isinstance(out.value, ToyBuffer)
    assert out.is_tensor()
    assert out.shape() == [2, 3]
    assert out.data_type() == "tensor(float)"
    assert "toy" in repr(out)
    assert toy.transfer.to_host == 0  # describing it needs no copy either

    np.testing.assert_array_equal(out.numpy(), _expected(x))
    assert toy.transfer.to_host == 1
    (copied,) = binding.copy_outputs_to_cpu()
    assert isinstance(copied, np.ndarray)
    np.testing.assert_array_equal(copied, _expected(x))


def test_output_bound_to_cpu_in_a_device_session_comes_back_to_the_host(
    toy_provider, add_relu_model
):
    sess = ort.InferenceSession(add_relu_model, providers=[TOY, CPU])
    x = _x()
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cpu")
    sess.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert out.device_name() == "cpu"
    assert isinstance(out.value, np.ndarray)
    np.testing.assert_array_equal(out.numpy(), _expected(x))


def test_output_of_a_cpu_session_bound_to_the_device_is_moved_there(toy_provider, add_relu_model):
    sess = ort.InferenceSession(add_relu_model)
    assert sess.get_providers() == [CPU]
    x = _x()
    binding = sess.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "toy")
    sess.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert out.device_name() == "toy"
    assert isinstance(out.value, ToyBuffer)
    np.testing.assert_array_equal(out.numpy(), _expected(x))


def test_device_ortvalues_as_inputs_and_preallocated_outputs(toy_provider, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, providers=[TOY, CPU])
    x = _x()
    value = ort.OrtValue.ortvalue_from_numpy(x, "toy")
    assert value.device_name() == "toy" and isinstance(value.value, ToyBuffer)
    target = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32, "toy")
    assert target.device_name() == "toy"
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", value)
    binding.bind_ortvalue_output("y", target)
    sess.run_with_iobinding(binding)
    (out,) = binding.get_outputs()
    assert out is target
    assert target.device_name() == "toy" and isinstance(target.value, ToyBuffer)
    np.testing.assert_array_equal(target.numpy(), _expected(x))
    # Plain run() and run_with_ort_values() take device OrtValues too.
    np.testing.assert_array_equal(sess.run(None, {"x": value})[0], _expected(x))
    (ov,) = sess.run_with_ort_values(None, {"x": value})
    np.testing.assert_array_equal(ov.numpy(), _expected(x))


def test_device_input_is_used_where_it_lives(toy_provider, add_relu_model):
    sess = ort.InferenceSession(add_relu_model, providers=[TOY, CPU])
    x = _x()
    value = ort.OrtValue.ortvalue_from_numpy(x, "toy")
    transfers = [_toy(sess).transfer, value.provider.transfer]

    def copies() -> int:
        return sum(t.to_host + t.to_device for t in transfers)

    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", value)
    binding.bind_output("y", "toy")
    before = copies()
    sess.run_with_iobinding(binding)
    assert copies() == before
    np.testing.assert_array_equal(binding.get_outputs()[0].numpy(), _expected(x))


# -- DLPack -----------------------------------------------------------------------------


def test_dlpack_round_trip_on_cpu_shares_memory(add_relu_model):
    x = _x()
    value = ort.OrtValue.ortvalue_from_numpy(x)
    assert np.shares_memory(value.numpy(), x)  # zero-copy wrap
    exported = np.from_dlpack(value)
    assert np.shares_memory(exported, x)
    np.testing.assert_array_equal(exported, x)
    assert value.__dlpack_device__()[0] == 1  # kDLCPU

    imported = ort.OrtValue.from_dlpack(x)
    assert np.shares_memory(imported.numpy(), x)
    x[0, 0] = 123.0
    assert exported[0, 0] == 123.0 and imported.numpy()[0, 0] == 123.0

    sess = ort.InferenceSession(add_relu_model)
    (out,) = sess.run_with_ort_values(None, {"x": imported})
    np.testing.assert_array_equal(np.from_dlpack(out), _expected(x))


def test_from_dlpack_bool_tensor():
    mask = np.array([1, 0, 1], np.uint8)
    value = ort.OrtValue.from_dlpack(mask, is_bool_tensor=True)
    assert value.data_type() == "tensor(bool)"
    np.testing.assert_array_equal(value.numpy(), [True, False, True])
