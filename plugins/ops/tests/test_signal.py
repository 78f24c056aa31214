"""Tests of the library's spectral operators (onyxrt_ops.signal): DFT, STFT, MelWeightMatrix.

Every operator runs over numpy and over array_api_strict and is compared with onnxruntime (or onnx's reference
evaluator): real and complex signals, forward, inverse, one-sided (RFFT) and IRFFT,
``dft_length``, DFT-17's axis attribute and DFT-20's axis input, STFT windows and frame
lengths, float32/float64. Half-precision types (which the array API standard lacks) run
over numpy. Over a namespace without the fft extension the transforms run on the host. The
kernels also run over the GPU providers' backend under the simulated CuPy. Attribute
errors are InvalidGraph naming the node; errors in the data are ValueError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from library_harness import Bound, assert_matches, bind, node, onnx_versions, oracle, typed_oracle
from onnx import TensorProto

from onyxrt.dtypes import np_dtype
from onyxrt.errors import InvalidGraph
from onyxrt_ops import library, namespace_backend, numpy_backend

BF16 = np_dtype(TensorProto.BFLOAT16)
SIGNAL = {d.op_type for d in library.definitions if d.cls.__module__ == "onyxrt_ops.signal"}
TOL = {np.dtype(np.float32): (1e-4, 1e-4), np.dtype(np.float64): (1e-10, 1e-10)}


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def i64(v: int) -> np.ndarray:
    return np.array(v, np.int64)


def case(op: str, inputs: list[Any], opset: int, *, id: str, **attrs: Any) -> Any:
    return pytest.param(op, inputs, opset, attrs, id=id)


CASES = [
    case("DFT", [randn(2, 8, 1)], 20, id="real"),
    case("DFT", [randn(3, 6, 2, dtype=np.float64)], 20, id="complex-f64"),
    case("DFT", [randn(2, 5, 4, 2), None, i64(1)], 20, id="axis-input"),
    case("DFT", [randn(2, 5, 4, 2), None, i64(-3)], 20, id="negative-axis"),
    case("DFT", [randn(2, 10, 2), i64(6)], 20, inverse=1, id="inverse-truncated"),
    case("DFT", [randn(2, 10, 1), i64(14)], 20, onesided=1, id="rfft-padded"),
    case("DFT", [randn(2, 6, 2)], 20, inverse=1, onesided=1, id="irfft"),
    case("DFT", [randn(2, 7, 2), i64(12)], 20, inverse=1, onesided=1, id="irfft-length"),
    case("DFT", [randn(3, 4, 7, 1)], 17, axis=2, id="17-axis-attr"),
    case("DFT", [randn(3, 8, 2)], 17, inverse=1, id="17-inverse"),
    case("DFT", [randn(2, 9, 1)], 17, onesided=1, id="17-rfft"),
    case("STFT", [randn(2, 64, 1), i64(8), np.hanning(16).astype(np.float32)], 17, id="window"),
    case("STFT", [randn(1, 40, 2), i64(5), None, i64(12)], 17, onesided=0, id="complex-length"),
    case("STFT", [randn(2, 50, 1, dtype=np.float64), i64(7), np.hamming(10), i64(10)], 17,
         id="f64-window-length"),
    case("MelWeightMatrix", [i64(8), i64(64), i64(16000), np.array(0.0, np.float32),
                             np.array(8000.0, np.float32)], 17, id="mel"),
    case("MelWeightMatrix", [i64(5), i64(33), i64(8000), np.array(100.0), np.array(3000.0)], 17,
         output_datatype=TensorProto.DOUBLE, id="mel-double"),
]


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs):
    got = bound.run(op, inputs, opset, **attrs)
    if op == "MelWeightMatrix":
        out = np_dtype(attrs.get("output_datatype", TensorProto.FLOAT))
        want = typed_oracle(op, inputs, opset, out, **attrs)
    else:
        want = oracle(op, inputs, opset, **attrs)
    assert_matches(got, want, TOL)


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} == SIGNAL


def test_every_onnx_version_is_bound(numpy_bound: Bound):
    host = {"DFT": {1, 2}, "STFT": {1, 3}, "MelWeightMatrix": {0, 1, 2, 3, 4}}
    for op in SIGNAL:
        for v in onnx_versions(op):
            kdef, _ = numpy_bound.registry.lookup("", op, v)
            assert kdef is not None and kdef.since_version == v, f"{op}-{v}"
            assert set(kdef.host_inputs) == host[op]


@pytest.mark.parametrize("half", [np.float16, BF16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize(("op", "inputs", "attrs"), [
    ("DFT", [randn(2, 8, 2)], {}),
    ("DFT", [randn(2, 6, 2)], {"inverse": 1, "onesided": 1}),
    ("STFT", [randn(1, 32, 1), i64(4), np.hanning(8)], {}),
], ids=["dft", "irfft", "stft"])
def test_half_types_run_in_float32(numpy_bound: Bound, half, op, inputs, attrs):
    b = numpy_bound
    halves = [v.astype(half) if v.dtype.kind == "f" else v for v in inputs]
    got = b.run(op, halves, 20 if op == "DFT" else 17, **attrs)
    want = b.run(op, [v.astype(np.float32) if v.dtype == half else v for v in halves],
                 20 if op == "DFT" else 17, **attrs)
    assert got.dtype == half
    np.testing.assert_array_equal(got, want.astype(half))


class WithoutFFT:
    """array_api_strict without its (optional) fft extension."""

    def __getattr__(self, name: str) -> Any:
        import array_api_strict as xp

        if name == "fft":
            raise AttributeError(name)
        return getattr(xp, name)


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"),
                         [p for p in CASES if p.values[0] != "MelWeightMatrix"])
def test_a_namespace_without_fft_transforms_on_the_host(op, inputs, opset, attrs):
    got = bind("no fft", namespace_backend(WithoutFFT(), "no fft")).run(op, inputs, opset, **attrs)
    want = bind("numpy", numpy_backend()).run(op, inputs, opset, **attrs)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_over_the_gpu_backend():
    """Under the simulated CuPy the kernels give numpy's results, on the device."""
    from onyxrt_gpu.kernels._common import BACKEND
    from onyxrt_gpu.testing.simulated_cupy import install

    host = bind("numpy", numpy_backend())
    with install():
        import cupy

        gpu = bind("cupy", BACKEND)
        for p in CASES:
            op, inputs, opset, attrs = p.values
            kernel = gpu.kernel(node(op, len(inputs), [i for i, v in enumerate(inputs) if v is None],
                                     **attrs), opset)
            kdef, _ = gpu.registry.lookup("", op, opset)
            args = [v if v is None or i in kdef.host_inputs else cupy.asarray(v)
                    for i, v in enumerate(inputs)]
            (y,) = kernel.compute(*args)
            want = host.run(op, inputs, opset, **attrs)
            assert isinstance(y, cupy.ndarray) and y.dtype == want.dtype, p.id
            np.testing.assert_allclose(y.get(), want, rtol=1e-6, atol=1e-6, err_msg=p.id)


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("op", "opset", "attrs", "match"),
    [
        ("DFT", 20, {"onesided": 2}, "onesided"),
        ("DFT", 20, {"inverse": -1}, "inverse"),
        ("DFT", 17, {"axis": 1.5}, "axis"),
        ("STFT", 17, {"onesided": 3}, "onesided"),
        ("MelWeightMatrix", 17, {"output_datatype": TensorProto.INT32}, "output_datatype"),
    ],
)
def test_bad_attributes_are_invalid_graph(numpy_bound: Bound, op, opset, attrs, match):
    with pytest.raises(InvalidGraph, match=f"{op} node '{op}_node'.*{match}"):
        numpy_bound.kernel(node(op, 2, **attrs), opset)


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "match"),
    [
        ("DFT", [randn(2, 4, 3)], {}, "last dimension"),
        ("DFT", [randn(2, 4, 1), None, i64(2)], {}, "axis 2 is out of range"),
        ("DFT", [randn(2, 4, 1), None, i64(-1)], {}, "axis -1 is out of range"),
        ("DFT", [randn(2, 4, 1), i64(0)], {}, "dft_length must be positive"),
        ("DFT", [randn(2, 4, 1), np.array(2.0, np.float32)], {}, "one integer"),
        ("STFT", [randn(64), i64(8)], {}, "rank 3"),
        ("STFT", [randn(1, 20, 1), i64(0)], {}, "frame_step"),
        ("STFT", [randn(1, 20, 1), i64(2), np.ones(6, np.float32), i64(5)], {}, "window length"),
        ("STFT", [randn(1, 20, 1), i64(2), np.ones((2, 3), np.float32)], {}, "1-D"),
        ("STFT", [randn(1, 20, 1), i64(2), None, i64(30)], {}, "frame length 30"),
        ("MelWeightMatrix", [i64(0), i64(64), i64(16000), np.array(0.0), np.array(10.0)], {},
         "must be positive"),
        ("MelWeightMatrix", [i64(4), i64(64), i64(16000), np.array(10.0), np.array(1.0)], {},
         "lower_edge_hertz"),
    ],
)
def test_bad_data_are_value_errors(bound: Bound, op, inputs, attrs, match):
    with pytest.raises(ValueError, match=match):
        bound.run(op, inputs, 20 if op == "DFT" else 17, **attrs)
