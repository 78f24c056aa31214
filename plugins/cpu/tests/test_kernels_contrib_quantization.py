"""The CPU provider's com.microsoft MatMulIntegerToFloat and DynamicQuantizeMatMul: with a
constant B their integer product goes through the int8 kernel (where the CPU has AVX-512
VNNI) — checked against onnxruntime in sessions, B as an initializer as quantization tools
write it, per-tensor and per-column parameters, uint8 and int8 B, a bias, a batched A."""

from __future__ import annotations

import numpy as np
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import onyxrt
from onyxrt.kernels import KernelInfo
from onyxrt_cpu import native
from onyxrt_cpu.kernels import contrib_quantization, registry

MS = "com.microsoft"


def _session_pair(op: str, inputs: list[str], feeds: dict, inits: dict, out_shape: list) -> tuple:
    """onyxrt's and onnxruntime's result of one node."""
    data = _one_node(op, inputs, feeds, inits, out_shape)
    ours = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return ours, theirs


def _one_node(op: str, inputs: list[str], feeds: dict, inits: dict, out_shape: list) -> bytes:
    node = helper.make_node(op, inputs, ["y"], domain=MS)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=10).SerializeToString()


def test_the_overrides_are_registered():
    for op, cls in (("MatMulIntegerToFloat", contrib_quantization.MatMulIntegerToFloat),
                    ("DynamicQuantizeMatMul", contrib_quantization.DynamicQuantizeMatMul)):
        kdef, reason = registry.lookup(MS, op, 1)
        assert kdef is not None and kdef.factory is cls, reason


@pytest.mark.parametrize("bdt", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
@pytest.mark.parametrize("shape", [(4, 96), (2, 3, 300)], ids=["2d", "batched"])
def test_dynamic_quantize_matmul(bdt, per_column, shape):
    rng = np.random.default_rng(3)
    k, n = shape[-1], 70
    a = rng.standard_normal(shape).astype(np.float32)
    info = np.iinfo(bdt)
    b = rng.integers(info.min, info.max + 1, (k, n)).astype(bdt)
    scale = (rng.random(n if per_column else 1) * 0.02 + 0.001).astype(np.float32)
    zp = rng.integers(info.min, info.max + 1, n if per_column else 1).astype(bdt)
    bias = rng.standard_normal(n).astype(np.float32)
    ours, theirs = _session_pair("DynamicQuantizeMatMul", ["a", "b", "s", "z", "bias"], {"a": a},
                                 {"b": b, "s": scale, "z": zp, "bias": bias}, [*shape[:-1], n])
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not native.QGEMM, reason="the int8 kernel needs AVX-512 VNNI")
@pytest.mark.parametrize("op", ["DynamicQuantizeMatMul", "MatMulIntegerToFloat"])
@pytest.mark.parametrize("bdt", [np.int8, np.uint8])
@pytest.mark.parametrize("per_column", [False, True])
def test_scaling_in_the_kernels_registers_is_the_librarys(op, bdt, per_column, monkeypatch):
    """The float epilogue of the int8 kernel (zero points' terms, scale, bias in its
    registers) gives the bytes of the int32 product followed by the library's to_float."""
    rng = np.random.default_rng(5)
    k, n = 301, 77  # no multiple of 4 or 16
    info = np.iinfo(bdt)
    inits = {"b": rng.integers(info.min, info.max + 1, (k, n)).astype(bdt),
             "s": (rng.random(n if per_column else 1) * 0.02 + 0.001).astype(np.float32),
             "z": rng.integers(info.min, info.max + 1, n if per_column else 1).astype(bdt),
             "bias": rng.standard_normal(n).astype(np.float32)}
    if op == "DynamicQuantizeMatMul":
        feeds = {"a": rng.standard_normal((2, 9, k)).astype(np.float32)}
        inputs = ["a", "b", "s", "z", "bias"]
    else:
        feeds = {"a": rng.integers(0, 256, (2, 9, k)).astype(np.uint8)}
        inits.update(sa=np.array(0.03, np.float32), za=np.array(131, np.uint8))
        inputs = ["a", "b", "sa", "s", "za", "z", "bias"]
    data = _one_node(op, inputs, feeds, inits, [2, 9, n])
    calls = []
    fused = native.qgemm_float
    monkeypatch.setattr(native, "qgemm_float", lambda *args: calls.append(1) or fused(*args))
    ours = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert calls, "the float epilogue did not run"
    monkeypatch.setattr(native, "qgemm_float", lambda *args: None)
    unfused = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(ours, unfused)


@pytest.mark.parametrize(("adt", "bdt"), [(np.uint8, np.int8), (np.uint8, np.uint8), (np.int8, np.int8)])
def test_matmul_integer_to_float(adt, bdt):
    rng = np.random.default_rng(4)
    ai, bi = np.iinfo(adt), np.iinfo(bdt)
    a = rng.integers(ai.min, ai.max + 1, (5, 600)).astype(adt)
    b = rng.integers(bi.min, bi.max + 1, (600, 33)).astype(bdt)
    inits = {"b": b, "sa": np.array(0.03, np.float32), "sb": (rng.random(33) * 0.01).astype(np.float32),
             "za": np.array(7, adt), "zb": rng.integers(bi.min, bi.max + 1, 33).astype(bdt),
             "bias": rng.standard_normal(33).astype(np.float32)}
    ours, theirs = _session_pair("MatMulIntegerToFloat", ["a", "b", "sa", "sb", "za", "zb", "bias"], {"a": a},
                                 inits, [5, 33])
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def _nbits_weights(n: int, k: int, block: int, seed: int = 0):
    """4-bit B (N, k_blocks, block / 2) packed low nibble first, scales, packed zero points."""
    rng = np.random.default_rng(seed)
    kb = -(-k // block)
    q = rng.integers(0, 16, (n, kb * block)).astype(np.uint8)
    packed = (q[:, 0::2] | (q[:, 1::2] << 4)).reshape(n, kb, block // 2)
    scales = (rng.random((n * kb,)) * 0.05 + 0.01).astype(np.float32)
    zp = rng.integers(0, 16, (n, kb + (kb % 2))).astype(np.uint8)
    zps = (zp[:, 0::2] | (zp[:, 1::2] << 4)).reshape(-1)
    return packed, scales, zps


@pytest.mark.parametrize("budget", [None, 0], ids=["dequantized_once", "over_budget"])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("rows", [(2, 5), (1,), (1, 1)], ids=["2x5", "1", "1x1"])
@pytest.mark.parametrize("gemm_route", [True, False], ids=["compiled-gemm", "blas"])
def test_matmul_nbits_with_constant_weights_matches_onnxruntime(monkeypatch, budget, with_bias, rows, gemm_route):
    """Dequantized once — packed for the compiled GEMM where it is preferred (then the only
    copy, one row included), else kept for numpy's matmul — or per run over the budget."""
    monkeypatch.setattr(native, "GEMM_PREFERRED", gemm_route and native.ENABLED)
    if budget is not None:
        monkeypatch.setattr(contrib_quantization, "DEQUANTIZED_WEIGHTS_BUDGET", budget)
    k, n, block = 80, 37, 32  # K not a multiple of the block, N odd
    b, scales, zps = _nbits_weights(n, k, block)
    a = np.random.default_rng(1).standard_normal((*rows, k)).astype(np.float32)
    inits = {"b": b, "scales": scales, "zps": zps}
    inputs = ["a", "b", "scales", "zps"]
    if with_bias:
        inits["bias"] = np.random.default_rng(2).standard_normal(n).astype(np.float32)
        inputs += ["", "bias"]
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain=MS, K=k, N=n, bits=4, block_size=block)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [*rows, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [*rows, n])],
        [numpy_helper.from_array(v, name) for name, v in inits.items()])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=10).SerializeToString()
    session = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"])
    kernels = [k_ for k_ in _kernels(session) if isinstance(k_, contrib_quantization.MatMulNBits)]
    assert len(kernels) == 1
    kernel = kernels[0]
    assert (kernel._weights is None and kernel._packed is None) == (budget == 0)
    assert (kernel._packed is not None) == (budget != 0 and gemm_route and native.ENABLED)
    ours = session.run(None, {"a": a})[0]
    theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)


def _kernels(session: onyxrt.InferenceSession) -> list:
    """The kernel objects of a session's plan (each step runs a kernel's bound compute)."""
    return [getattr(step.fn, "__self__", None) for step in session._plan.steps]


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
@pytest.mark.parametrize(("n", "k", "block", "zero_points"), [
    (37, 80, 32, True), (37, 80, 32, False), (5, 64, 16, True), (3, 96, 64, False), (4, 33, 16, True),
    (70, 300, 32, True), (33, 520, 16, False),  # two blocks of K for the GEMM, N past a panel
])  # fmt: skip
def test_compiled_4bit_dequantization_is_the_librarys(n, k, block, zero_points):
    b, scales, zps = _nbits_weights(n, k, block, seed=n + k)
    zps = zps if zero_points else None
    node = helper.make_node("MatMulNBits", ["a", "b", "s", "z" if zero_points else ""], ["y"], domain=MS,
                            K=k, N=n, bits=4, block_size=block)
    kdef, _ = registry.lookup(MS, "MatMulNBits", 1)
    kernel = kdef.factory(KernelInfo.from_node(node, 1, since_version=1))
    compiled = native.dequantize4(b, scales, zps, k, block)
    np.testing.assert_array_equal(compiled, kernel.weights(b, scales, zps))  # same float32 steps
    # straight into the GEMM's packed right operand: what packing the dequantized matrix
    # gives, float for float (panels past N zero, K not a multiple of the block)
    packed = native.dequantize4_packed(b, scales, zps, k, block)
    expected = native.pack_gemm_b(compiled.T)
    assert packed.shape == expected.shape == (k, n) and packed.side == "b"
    np.testing.assert_array_equal(packed.data, expected.data)


@pytest.mark.skipif(not native.ENABLED, reason="compiled module not built")
@pytest.mark.parametrize(("shape", "per_column", "with_bias"), [
    ((128, 768), True, True), ((2, 7, 33), True, False), ((5, 1), False, True), ((3, 17), False, False),
])  # fmt: skip
def test_accumulators_to_float_is_numpys(shape, per_column, with_bias):
    rng = np.random.default_rng(len(shape))
    acc = rng.integers(-(2**31), 2**31 - 1, shape, dtype=np.int64).astype(np.int32)
    acc.reshape(-1)[:3] = [2**31 - 1, -(2**31), 16777217]  # beyond float32's exact integers
    scale = (rng.random(shape[-1] if per_column else 1) * 1e-3).astype(np.float32)
    bias = rng.standard_normal(shape[-1]).astype(np.float32) if with_bias else None
    y = native.accumulators_to_float(acc, scale, bias)
    want = acc.astype(np.float32) * scale
    if bias is not None:
        want = want + bias
    assert y.dtype == np.float32
    np.testing.assert_array_equal(y, want)  # the same float32 operations in the same order


def _qlinear_add_model(dt, shape_a, shape_b) -> bytes:
    t = helper.np_dtype_to_tensor_dtype(np.dtype(dt))
    node = helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sc", "zc"], ["y"], domain=MS)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info("a", t, list(shape_a)), helper.make_tensor_value_info("b", t, list(shape_b))]
        + [helper.make_tensor_value_info(k, TensorProto.FLOAT, []) for k in ("sa", "sb", "sc")]
        + [helper.make_tensor_value_info(k, t, []) for k in ("za", "zb", "zc")],
        [helper.make_tensor_value_info("y", t, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(MS, 1)],
                             ir_version=10).SerializeToString()


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("shape_b", [(2, 3, 17, 19), (3, 1, 1)], ids=["same-shape", "broadcast"])
def test_qlinear_add_is_the_librarys_and_onnxruntimes(dt, shape_b, monkeypatch):
    """One compiled pass where the shapes match (a residual), the library's broadcasting
    otherwise: the same bytes either way, and onnxruntime's."""
    rng = np.random.default_rng(2)
    info = np.iinfo(dt)
    feeds = {
        "a": rng.integers(info.min, info.max + 1, (2, 3, 17, 19)).astype(dt),
        "b": rng.integers(info.min, info.max + 1, shape_b).astype(dt),
        "sa": np.array(0.031, np.float32), "sb": np.array(0.017, np.float32), "sc": np.array(0.029, np.float32),
        "za": np.array(5, dt), "zb": np.array(-3 if dt == np.int8 else 200, dt), "zc": np.array(7, dt),
    }
    data = _qlinear_add_model(dt, feeds["a"].shape, shape_b)
    calls = []
    compiled = native.qlinear_add

    def counted(*args):
        y = compiled(*args)
        if y is not None:  # the compiled pass ran (not a pure-Python build)
            calls.append(1)
        return y

    monkeypatch.setattr(native, "qlinear_add", counted)
    ours = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert bool(calls) == (shape_b == feeds["a"].shape and native.ENABLED)
    monkeypatch.setattr(native, "qlinear_add", lambda *args: None)  # the library's path
    library = onyxrt.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    theirs = onnxruntime.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    assert ours.dtype == np.dtype(dt)
    np.testing.assert_array_equal(ours, library)
    np.testing.assert_array_equal(ours, theirs)
