"""Tests for the CPU spectral kernels (onyxrt_cpu.kernels.signal): DFT, STFT, MelWeightMatrix.

The onnx node conformance cases run straight through the registry; targeted tests compare
with onnxruntime (and onnx's reference evaluator for MelWeightMatrix) what they leave out:
complex inputs, dft_length padding/truncation, negative axes, both DFT versions, float64,
complex and windowed STFT, other filterbank parameters.
"""

from __future__ import annotations

import numpy as np
import pytest
from kernel_cases import (
    assert_all_versions_registered,
    conformance_params,
    one_node,
    randn,
    run_case,
    run_onnxruntime,
    run_ours,
)
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo
from onyxrt_cpu.kernels import registry

OPS = ["DFT", "STFT", "MelWeightMatrix"]

# Conformance cases these kernels cannot pass, with the reason. None today.
XFAIL: dict[str, str] = {}


@pytest.mark.parametrize("case", conformance_params(OPS, XFAIL))
def test_conformance(case):
    run_case(case)


def test_all_versions_registered():
    assert_all_versions_registered(OPS)


def _both(op, inputs, opset, rtol=1e-4, atol=1e-4, **attrs):
    names = [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    while names[-1] == "":
        names.pop()
    node = one_node(op, names, 1, **attrs)
    got = run_ours(node, opset, *inputs)[0]
    want = run_onnxruntime(node, opset, inputs, [inputs[0].dtype])[0]
    assert got.dtype == want.dtype and got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


# ---------------------------------------------------------------------- DFT


@pytest.mark.parametrize("last", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, 2, -2, -3])
@pytest.mark.parametrize("inverse", [0, 1])
@pytest.mark.parametrize("n", [None, 5, 12])
def test_dft20_full(last, axis, inverse, n):
    x = randn((3, 8, 6, last), seed=1)
    ins = [x, None if n is None else np.array(n, dtype=np.int64), np.array(axis, dtype=np.int64)]
    _both("DFT", ins, 20, inverse=inverse)


@pytest.mark.parametrize("axis", [1, 2, -2])
@pytest.mark.parametrize("n", [None, 7, 10])
def test_dft20_rfft_irfft(axis, n):
    x = randn((2, 8, 6, 1), seed=2)
    length = None if n is None else np.array(n, dtype=np.int64)
    ax = np.array(axis, dtype=np.int64)
    spec = _both("DFT", [x, length, ax], 20, onesided=1)
    _both("DFT", [spec, length, ax], 20, onesided=1, inverse=1)


@pytest.mark.parametrize("axis", [1, 2, -2])
def test_dft17_axis_attribute(axis):
    x = randn((2, 6, 5, 2), seed=3)
    _both("DFT", [x, np.array(8, dtype=np.int64)], 17, axis=axis, inverse=1)


def test_dft17_default_axis_is_1():
    x = randn((2, 6, 5, 1), seed=4)
    got = run_ours(one_node("DFT", 1, 1), 17, x)[0]
    want = np.fft.fft(x[..., 0], axis=1)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], want, rtol=1e-5, atol=1e-5)


def test_dft_float64_matches_numpy():
    x = randn((4, 9, 2), seed=5, dtype=np.float64)
    got = run_ours(one_node("DFT", ["in0", "", "in2"], 1), 20, x, None, np.array(1))[0]
    assert got.dtype == np.float64
    want = np.fft.fft(x[..., 0] + 1j * x[..., 1], axis=1)
    np.testing.assert_allclose(got[..., 0] + 1j * got[..., 1], want, rtol=1e-12, atol=1e-12)


def test_dft_float16():
    x = randn((2, 8, 1), seed=6, dtype=np.float16)
    got = run_ours(one_node("DFT", ["in0", "", "in2"], 1), 20, x, None, np.array(1))[0]
    assert got.dtype == np.float16
    want = np.fft.fft(x[..., 0].astype(np.float64), axis=1)
    np.testing.assert_allclose(got[..., 0].astype(np.float64), want.real, atol=2e-2)


@pytest.mark.parametrize("axis", [3, -1, -5])
def test_dft_bad_axis(axis):
    node = one_node("DFT", ["in0", "", "in2"], 1)
    with pytest.raises(ValueError, match="axis"):
        run_ours(node, 20, randn((2, 3, 4, 1)), None, np.array(axis, dtype=np.int64))


def test_dft_bad_attribute():
    kdef, _ = registry.lookup("", "DFT", 20)
    with pytest.raises(InvalidGraph, match="DFT"):
        kdef.factory(KernelInfo.from_node(one_node("DFT", 1, 1, onesided=2), 20, since_version=20))


# --------------------------------------------------------------------- STFT


@pytest.mark.parametrize("last", [1, 2])
@pytest.mark.parametrize("onesided", [0, 1])
@pytest.mark.parametrize("step", [3, 8])
def test_stft_window_and_frame_length(last, onesided, step):
    if last == 2 and onesided:
        pytest.skip("one-sided output needs a real signal")
    x = randn((2, 40, last), seed=7)
    window = np.hanning(10).astype(np.float32)
    fl = np.array(10, dtype=np.int64)
    st = np.array(step, dtype=np.int64)
    _both("STFT", [x, st, window, fl], 17, onesided=onesided)
    _both("STFT", [x, st, window], 17, onesided=onesided)
    _both("STFT", [x, st, None, fl], 17, onesided=onesided)


def test_stft_float64():
    x = randn((1, 33, 1), seed=8, dtype=np.float64)
    got = run_ours(one_node("STFT", ["in0", "in1", "", "in3"], 1), 17, x, np.array(4),
                   None, np.array(9))[0]  # fmt: skip
    assert got.dtype == np.float64 and got.shape == (1, 7, 5, 2)
    frame = x[0, 8:17, 0]
    want = np.fft.rfft(frame)
    np.testing.assert_allclose(got[0, 2, :, 0] + 1j * got[0, 2, :, 1], want, atol=1e-12)


def test_stft_takes_a_real_signal_without_its_trailing_axis():
    # [batch, length]: not the spec's rank 3, but onnxruntime runs it, and exported audio
    # front ends (onnx-asr's preprocessors) feed it so. Same result as [batch, length, 1].
    x = randn((2, 64), seed=9)
    node = one_node("STFT", ["in0", "in1", "in2"], 1)
    window = np.hanning(16).astype(np.float32)
    got = run_ours(node, 17, x, np.array(8), window)[0]
    want = run_ours(node, 17, x[..., None], np.array(8), window)[0]
    np.testing.assert_array_equal(got, want)
    assert got.shape == (2, 7, 9, 2)
    ortrt = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("STFT", ["signal", "step", "window"], ["out"])], "stft",
        [helper.make_tensor_value_info("signal", TensorProto.FLOAT, [2, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(8, np.int64), "step"), numpy_helper.from_array(window, "window")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    theirs = ortrt.InferenceSession(model.SerializeToString()).run(None, {"signal": x})[0]
    np.testing.assert_allclose(got, theirs, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="rank 3"):
        run_ours(node, 17, randn((64,), seed=1), np.array(8), window)


def test_stft_window_length_mismatch():
    node = one_node("STFT", 4, 1)
    with pytest.raises(ValueError, match="window"):
        run_ours(node, 17, randn((1, 20, 1)), np.array(2), np.ones(6, np.float32), np.array(5))


# ----------------------------------------------------------- MelWeightMatrix


@pytest.mark.parametrize(
    "bins,n,rate,low,high",
    [(8, 16, 8192, 0.0, 4096.0), (20, 512, 16000, 20.0, 7600.0), (5, 63, 22050, 100.0, 5000.0),
     (10, 256, 8000, 0.0, 4000.0)],
)  # fmt: skip
@pytest.mark.parametrize("out_type", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_melweightmatrix(bins, n, rate, low, high, out_type):
    ins = [np.array(bins, np.int64), np.array(n, np.int64), np.array(rate, np.int64),
           np.array(low, np.float32), np.array(high, np.float32)]  # fmt: skip
    node = one_node("MelWeightMatrix", 5, 1, output_datatype=out_type)
    got = run_ours(node, 17, *ins)[0]
    want = run_onnxruntime(node, 17, ins, [out_type])[0]
    assert got.dtype == want.dtype and got.shape == (n // 2 + 1, bins)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(f"in{i}", TensorProto.INT64 if i < 3 else
                                       TensorProto.FLOAT, []) for i in range(5)],
        [helper.make_tensor_value_info("out0", out_type, None)],
    )  # fmt: skip
    ref = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    np.testing.assert_allclose(got, ref.run(None, dict(zip(node.input, ins)))[0], atol=1e-6)


def test_melweightmatrix_bad_output_type():
    node = one_node("MelWeightMatrix", 5, 1, output_datatype=TensorProto.INT32)
    kdef, _ = registry.lookup("", "MelWeightMatrix", 17)
    with pytest.raises(InvalidGraph, match="output_datatype"):
        kdef.factory(KernelInfo.from_node(node, 17, since_version=17))
