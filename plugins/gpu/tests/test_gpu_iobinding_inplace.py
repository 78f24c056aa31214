"""IOBinding with preallocated GPU buffers, as onnxruntime + torch/CuPy code drives it.

``bind_ortvalue_output`` and ``bind_output(..., buffer_ptr=...)`` fill the bound device
memory in place (device to device): the very array the user holds, and every DLPack view
of it, see each run's result, and nothing goes through the host. ``bind_input`` takes a
device pointer too. All under the simulated CuPy, which counts every copy.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.errors import InvalidArgument

CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"
W = np.array([1.0, -2.0, 3.0], np.float32)



def _model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["y"], name="relu")],
        "add_relu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(W, "w")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model.SerializeToString()


def _session() -> ort.InferenceSession:
    session = ort.InferenceSession(_model(), providers=[CUDA, CPU])
    assert session.placement.nodes_by_provider() == {CUDA: ["add", "relu"]}
    return session


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(x + W, 0)


def _cupy() -> Any:
    return sys.modules["cupy"]


def test_bound_ortvalue_output_is_filled_in_place_on_the_device(cuda_sim):
    cupy = _cupy()
    session = _session()
    out = cupy.zeros((2, 3), dtype=np.float32)  # what torch.empty(..., device="cuda") plays
    view = cupy.from_dlpack(out)  # a DLPack consumer sharing the buffer
    target = ort.OrtValue.from_dlpack(out)
    binding = session.io_binding()
    for seed in (0, 1):  # every run writes into the same memory
        x = _x(seed)
        binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(x, "cuda"))
        binding.bind_ortvalue_output("y", target)
        d2h = cuda_sim.d2h
        session.run_with_iobinding(binding)
        assert cuda_sim.d2h == d2h, "the device-bound output went through the host"
        (result,) = binding.get_outputs()
        assert result is target and result.value is not None
        assert target.data_ptr() == out.data.ptr  # not repointed at a new device copy
        np.testing.assert_array_equal(out.get(), _expected(x))
        np.testing.assert_array_equal(view.get(), _expected(x))


def test_preallocated_device_output_gets_one_device_copy_and_no_host_copy(cuda_sim):
    cupy = _cupy()
    session = _session()
    x = ort.OrtValue.ortvalue_from_numpy(_x(), "cuda")
    target = ort.OrtValue.from_dlpack(cupy.empty((2, 3), dtype=np.float32))
    binding = session.io_binding()
    binding.bind_ortvalue_input("x", x)
    binding.bind_ortvalue_output("y", target)
    session.run_with_iobinding(binding)  # first run: the creation's wait happens here
    (gpu,) = [p for p in session._providers if p.name == CUDA]
    counts = (cuda_sim.h2d, cuda_sim.d2h, gpu.transfer.counts.host_device_copies,
              target.provider.transfer.counts.device_to_device)
    session.run_with_iobinding(binding)
    # the input and the weight are on the device already; the output is copied device
    # to device into the bound buffer, once
    assert (cuda_sim.h2d, cuda_sim.d2h, gpu.transfer.counts.host_device_copies) == counts[:3]
    assert target.provider.transfer.counts.device_to_device == counts[3] + 1
    np.testing.assert_array_equal(target.numpy(), _expected(_x()))


def test_buffer_ptr_input_and_output_on_the_device(cuda_sim):
    cupy = _cupy()
    session = _session()
    x = _x(3)
    x_dev = cupy.asarray(x)
    out = cupy.zeros((2, 3), dtype=np.float32)
    binding = session.io_binding()
    binding.bind_input("x", "cuda", 0, np.float32, list(x.shape), x_dev.data.ptr)
    binding.bind_output("y", "cuda", 0, np.float32, [2, 3], out.data.ptr)
    counts = (cuda_sim.h2d, cuda_sim.d2h)
    session.run_with_iobinding(binding)
    assert (cuda_sim.h2d, cuda_sim.d2h) == counts  # pointers wrapped, nothing copied via the host
    np.testing.assert_array_equal(out.get(), _expected(x))
    (result,) = binding.get_outputs()
    assert result.device_name() == "cuda" and result.data_ptr() == out.data.ptr
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], _expected(x))


def test_buffer_ptr_output_computed_on_the_cpu_is_written_into_the_device_buffer(cuda_sim):
    cupy = _cupy()
    session = ort.InferenceSession(_model(), providers=[CPU])
    x = _x(4)
    out = cupy.zeros((2, 3), dtype=np.float32)
    binding = session.io_binding()
    binding.bind_cpu_input("x", x)
    binding.bind_output("y", "cuda", 0, np.float32, [2, 3], out.data.ptr)
    session.run_with_iobinding(binding)
    np.testing.assert_array_equal(out.get(), _expected(x))


def test_buffer_ptr_that_is_not_device_memory_is_a_typed_error(cuda_sim):
    session = _session()
    host = np.zeros((2, 3), np.float32)
    with pytest.raises(InvalidArgument, match=r"bind_input\('x'\).*buffer_ptr"):
        session.io_binding().bind_input("x", "cuda", 0, np.float32, [2, 3], host.ctypes.data)


@pytest.mark.parametrize(("shape", "dtype"), [((3, 2), np.float32), ((2, 3), np.float64)])
def test_bound_device_buffer_of_the_wrong_shape_or_type_names_the_output(cuda_sim, shape, dtype):
    cupy = _cupy()
    session = _session()
    target = ort.OrtValue.from_dlpack(cupy.zeros(shape, dtype=dtype))
    binding = session.io_binding()
    binding.bind_cpu_input("x", _x())
    binding.bind_ortvalue_output("y", target)
    with pytest.raises(InvalidArgument, match=r"output 'y': the bound buffer is"):
        session.run_with_iobinding(binding)
    out = cupy.zeros(shape, dtype=dtype)
    binding.bind_output("y", "cuda", 0, dtype, list(shape), out.data.ptr)
    with pytest.raises(InvalidArgument, match=r"output 'y'"):
        session.run_with_iobinding(binding)


def test_update_inplace_keeps_the_device_memory(cuda_sim):
    cupy = _cupy()
    ort.get_available_providers()
    buffer = cupy.zeros(3, dtype=np.float32)
    value = ort.OrtValue.from_dlpack(buffer)
    value.update_inplace(W)
    assert value.data_ptr() == buffer.data.ptr
    np.testing.assert_array_equal(buffer.get(), W)
