"""float16 to tensor cores and TF32 (issue 25 item 7).

CuPy 14's ``cupy.matmul`` copies batched float16 operands to float32 and back; the GPU
kernels call cuBLAS's strided-batched GEMM themselves, reading float16 and accumulating
in float32, and ask for TF32 on float32 products under the ``use_tf32`` option
(onnxruntime's CUDA key, on by default). The simulated CuPy records every GEMM with its
element and compute types (``gemm_calls``) and counts ``cupy.matmul``'s float16 upcasts.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt as ort
from onyxrt.errors import InvalidProviderOption
from onyxrt_gpu.kernels.blas import CublasMatmul
from onyxrt_gpu.testing.provider_tests import simulated_gpu
from onyxrt_gpu.testing.simulated_cupy import GemmCall

CUDA = "CUDAExecutionProvider"
ROCM = "ROCMExecutionProvider"
CPU = "CPUExecutionProvider"
HALF = np.dtype(np.float16)
SINGLE = np.dtype(np.float32)


def _rand(*shape: int, dtype: type = np.float16, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _model(nodes, inputs, initializers=(), opset: int = 17) -> bytes:
    elem = {HALF: TensorProto.FLOAT16, SINGLE: TensorProto.FLOAT}
    graph = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info(n, elem[v.dtype], list(v.shape)) for n, v in inputs.items()],
        [helper.make_tensor_value_info("y", elem[next(iter(inputs.values())).dtype], None)],
        [numpy_helper.from_array(v, n) for n, v in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def _onnxruntime(model: bytes, feeds: dict[str, np.ndarray]) -> np.ndarray:
    onnxruntime = pytest.importorskip("onnxruntime")
    session = onnxruntime.InferenceSession(model, providers=[CPU])
    return session.run(None, feeds)[0]


def _run(sim, model: bytes, feeds: dict[str, np.ndarray], options=None) -> np.ndarray:
    session = ort.InferenceSession(model, providers=[(CUDA, options or {}), CPU])
    assert list(session.placement.nodes_by_provider()) == [CUDA]
    sim.reset_counters()
    return session.run(None, feeds)[0]


def _matmul_cases():
    return [
        pytest.param((3, 5, 7), (3, 7, 9), id="batch3-M5-K7-N9"),
        pytest.param((2, 3, 5, 7), (7, 9), id="broadcast-weight"),
        pytest.param((2, 1, 5, 7), (3, 7, 9), id="broadcast-batch"),
        pytest.param((2, 3, 5, 7), (3, 7, 9), id="uneven-broadcast"),
    ]


@pytest.mark.parametrize(("a_shape", "b_shape"), _matmul_cases())
def test_float16_batched_matmul_accumulates_in_float32_without_copies(cuda_sim, a_shape, b_shape):
    a, b = _rand(*a_shape), _rand(*b_shape, seed=1)
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b})
    y = _run(cuda_sim, model, {"a": a, "b": b})
    assert y.dtype == HALF
    # No float32 copies of the operands (CuPy's batched float16 path makes two) ...
    assert cuda_sim.matmul_upcasts == 0
    # ... but cuBLAS GEMMs reading float16 and accumulating in float32.
    assert cuda_sim.gemm_calls
    for call in cuda_sim.gemm_calls:
        assert (call.api, call.data_type, call.compute_type) == ("gemmStridedBatchedEx", HALF, "32F")
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(y, _onnxruntime(model, {"a": a, "b": b}), rtol=2e-3, atol=2e-3)


def test_a_broadcast_weight_is_one_tall_gemm(cuda_sim):
    a, w = _rand(4, 3, 5, 7), _rand(7, 9, seed=1)
    model = _model([helper.make_node("MatMul", ["a", "w"], ["y"])], {"a": a}, [("w", w)])
    y = _run(cuda_sim, model, {"a": a})
    assert cuda_sim.gemm_calls == [GemmCall("gemmStridedBatchedEx", HALF, "32F", 1, 9, 60, 7)]
    np.testing.assert_allclose(y, _onnxruntime(model, {"a": a}), rtol=2e-3, atol=2e-3)


def test_float16_gemm_takes_transposed_b_by_flag(cuda_sim):
    a, b, c = _rand(5, 7), _rand(9, 7, seed=1), _rand(9, seed=2)
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5, beta=2.0)
    model = _model([node], {"a": a, "b": b, "c": c})
    y = _run(cuda_sim, model, {"a": a, "b": b, "c": c})
    assert cuda_sim.matmul_upcasts == 0
    assert [(g.api, g.data_type, g.compute_type) for g in cuda_sim.gemm_calls] == \
        [("gemmStridedBatchedEx", HALF, "32F")]
    want = 0.5 * (a.astype(np.float64) @ b.T.astype(np.float64)) + 2.0 * c
    np.testing.assert_allclose(y.astype(np.float64), want, rtol=2e-3, atol=4e-3)
    np.testing.assert_allclose(y, _onnxruntime(model, {"a": a, "b": b, "c": c}), rtol=2e-3, atol=4e-3)


def test_float16_convolution_gemms_read_float16(cuda_sim):
    x, w = _rand(2, 3, 6, 6), _rand(4, 3, 3, 3, seed=1)
    model = _model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
                   {"x": x}, [("w", w)])
    y = _run(cuda_sim, model, {"x": x})
    assert cuda_sim.matmul_upcasts == 0
    assert {(g.data_type, g.compute_type) for g in cuda_sim.gemm_calls} == {(HALF, "32F")}
    np.testing.assert_allclose(y, _onnxruntime(model, {"x": x}), rtol=3e-3, atol=3e-3)


@pytest.mark.parametrize(("options", "compute"), [
    ({}, "32F_FAST_TF32"),  # onnxruntime's default: TF32 on
    ({"use_tf32": "1"}, "32F_FAST_TF32"),
    ({"use_tf32": 1}, "32F_FAST_TF32"),
    ({"use_tf32": "0"}, "32F"),
    ({"use_tf32": False}, "32F"),
])
def test_use_tf32_picks_the_float32_compute_type(cuda_sim, options, compute):
    a, b = _rand(3, 5, 7, dtype=np.float32), _rand(7, 9, seed=1, dtype=np.float32)
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b})
    session = ort.InferenceSession(model, providers=[(CUDA, options), CPU])
    assert session.get_provider_options()[CUDA]["use_tf32"] == ("0" if compute == "32F" else "1")
    cuda_sim.reset_counters()
    session.run(None, {"a": a, "b": b})
    assert [(g.data_type, g.compute_type) for g in cuda_sim.gemm_calls] == [(SINGLE, compute)]


def test_tf32_products_are_rounded_and_full_float32_ones_are_not():
    """With the simulation rounding TF32 operands as tensor cores do, use_tf32=1 moves a
    float32 product by ~1e-4 relative; use_tf32=0 keeps it exact to float32."""
    a, b = _rand(8, 64, dtype=np.float32), _rand(64, 8, seed=1, dtype=np.float32)
    want = a.astype(np.float64) @ b.astype(np.float64)
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b})
    for sim in simulated_gpu(hip=False, emulate_tf32=True):
        results = {}
        for flag in ("0", "1"):
            session = ort.InferenceSession(model, providers=[(CUDA, {"use_tf32": flag}), CPU])
            results[flag] = session.run(None, {"a": a, "b": b})[0].astype(np.float64)
        assert sim.gemm_calls
    scale = np.abs(want).max()
    assert np.abs(results["0"] - want).max() / scale < 1e-6
    assert 1e-5 < np.abs(results["1"] - want).max() / scale < 3e-3


@pytest.mark.parametrize("value", ["maybe", "2", 2.5])
def test_a_bad_use_tf32_is_a_typed_error_naming_the_option(cuda_sim, value):
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])],
                   {"a": _rand(2, 2, dtype=np.float32), "b": _rand(2, 2, dtype=np.float32)})
    with pytest.raises(InvalidProviderOption, match=r"option 'use_tf32': expected a boolean") as err:
        ort.InferenceSession(model, providers=[(CUDA, {"use_tf32": value}), CPU])
    assert repr(value) in str(err.value)


def test_rocm_keeps_cupy_matmul():
    """hipBLAS's compute types are not confirmed through CuPy's HIP build: ROCm products
    stay on ``cupy.matmul`` (and ``use_tf32`` changes nothing there)."""
    a, b = _rand(3, 5, 7), _rand(3, 7, 9, seed=1)
    model = _model([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b})
    for sim in simulated_gpu(hip=True):
        session = ort.InferenceSession(model, providers=[(ROCM, {"use_tf32": "0"}), CPU])
        sim.reset_counters()
        y = session.run(None, {"a": a, "b": b})[0]
        assert [g.api for g in sim.gemm_calls] == ["cupy.matmul"]
        assert sim.matmul_upcasts == 1
    np.testing.assert_allclose(y, _onnxruntime(model, {"a": a, "b": b}), rtol=2e-3, atol=2e-3)


# -- the GEMM path itself, on layouts a kernel hands it --------------------------------


def test_views_go_to_cublas_without_copies_and_unexpressible_ones_do_not(sim_cupy):
    cp = sim_cupy.cupy
    blas = CublasMatmul(cp, tf32=False)
    host = _rand(3, 6, 10, dtype=np.float32)
    x = cp.asarray(host)
    w = cp.asarray(_rand(10, 7, seed=1, dtype=np.float32))
    views = {
        "row slice (ld > cols)": (x[:, :, :7], host[:, :, :7], w[:7]),
        "every other row": (x[:, ::2, :], host[:, ::2, :], w),
        "transposed": (cp.swapaxes(x, -1, -2)[:, :5], np.swapaxes(host, -1, -2)[:, :5],
                       w[:6, :6].T),
    }
    for name, (a, ha, b) in views.items():
        allocations = sim_cupy.allocator_calls
        y = blas.matmul(a, b)
        assert y is not None, name
        assert sim_cupy.allocator_calls == allocations + 1, name  # the output only
        np.testing.assert_allclose(y.get(), ha @ b.get(), rtol=1e-5, atol=1e-5, err_msg=name)
    assert blas.matmul(x[:, ::2, ::2], w[:5]) is None  # no leading dimension describes it
    assert blas.matmul(x.astype(cp.float64), w.astype(cp.float64)) is None


def test_simulated_gemm_honours_flags_leading_dims_strides_and_scalars(sim_cupy):
    cp = sim_cupy.cupy
    lib = cp.cuda.cublas
    rt = cp.cuda.runtime
    batch, m, n, k = 2, 3, 4, 5
    # Column-major operands: op(A) = A^T from a (batch, m, k+1) buffer read as k x m
    # with ld k+1; B not transposed, n columns of k rows, ld k; C with ld m+2.
    a_host = _rand(batch, m, k + 1, dtype=np.float32)
    b_host = _rand(batch, n, k, seed=1, dtype=np.float32)
    c_host = _rand(batch, n, m + 2, seed=2, dtype=np.float32)
    a, b, c = cp.asarray(a_host), cp.asarray(b_host), cp.asarray(c_host)
    alpha, beta = np.array([1.5], np.float32), np.array([-0.5], np.float32)
    lib.gemmStridedBatchedEx(
        cp.cuda.device.get_cublas_handle(), lib.CUBLAS_OP_T, lib.CUBLAS_OP_N, m, n, k,
        alpha.ctypes.data, a.data.ptr, rt.CUDA_R_32F, k + 1, m * (k + 1),
        b.data.ptr, rt.CUDA_R_32F, k, n * k, beta.ctypes.data,
        c.data.ptr, rt.CUDA_R_32F, m + 2, n * (m + 2), batch, lib.CUBLAS_COMPUTE_32F,
        lib.CUBLAS_GEMM_DEFAULT)
    op_a = a_host[:, :, :k]  # (batch, m, k): column i of the stored k x m matrix is row i
    op_b = np.swapaxes(b_host, 1, 2)  # (batch, k, n)
    want = c_host.copy()
    want[:, :, :m] = np.swapaxes(1.5 * op_a @ op_b, 1, 2) - 0.5 * c_host[:, :, :m]
    np.testing.assert_allclose(c.get(), want, rtol=1e-5, atol=1e-5)  # padding untouched
    assert sim_cupy.gemm_calls[-1] == GemmCall("gemmStridedBatchedEx", SINGLE, "32F", batch, m, n, k)
    with pytest.raises(lib.CUBLASError, match="INVALID_VALUE"):  # ld shorter than a column
        lib.gemmEx(cp.cuda.device.get_cublas_handle(), lib.CUBLAS_OP_N, lib.CUBLAS_OP_N, m, n, k,
                   alpha.ctypes.data, a.data.ptr, rt.CUDA_R_32F, m - 1, b.data.ptr,
                   rt.CUDA_R_32F, k, beta.ctypes.data, c.data.ptr, rt.CUDA_R_32F, m,
                   lib.CUBLAS_COMPUTE_32F, lib.CUBLAS_GEMM_DEFAULT)
    with pytest.raises(lib.CUBLASError, match="NOT_SUPPORTED"):  # TF32 reads float32 only
        lib.gemmEx(cp.cuda.device.get_cublas_handle(), lib.CUBLAS_OP_N, lib.CUBLAS_OP_N, 1, 1, 1,
                   alpha.ctypes.data, a.data.ptr, rt.CUDA_R_16F, 1, b.data.ptr,
                   rt.CUDA_R_16F, 1, beta.ctypes.data, c.data.ptr, rt.CUDA_R_16F, 1,
                   lib.CUBLAS_COMPUTE_32F_FAST_TF32, lib.CUBLAS_GEMM_DEFAULT)


def test_cupy_matmul_upcasts_batched_float16_as_cupy_14_does(sim_cupy):
    cp = sim_cupy.cupy
    a, b = cp.asarray(_rand(3, 4, 5)), cp.asarray(_rand(3, 5, 2, seed=1))
    y = cp.matmul(a, b)
    assert y.dtype == HALF and sim_cupy.matmul_upcasts == 1
    assert sim_cupy.gemm_calls[-1].data_type == SINGLE
    cp.matmul(a[0], b[0])  # 2-D: float16 read as is, accumulated in float32 (gemmEx)
    assert sim_cupy.matmul_upcasts == 1
    assert sim_cupy.gemm_calls[-1] == GemmCall("cupy.matmul", HALF, "32F", 1, 4, 2, 5)
