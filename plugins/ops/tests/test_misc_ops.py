"""Tests of the operators moved into the library from the CPU provider's own kernels: Mod
(onyxrt_ops.elementwise), TopK and CumProd (onyxrt_ops.reduction), TensorScatter
(onyxrt_ops.indexing) and QLinearConv (onyxrt_ops.quantization).

Each runs over numpy and over array_api_strict and is compared with onnxruntime (or onnx's
reference evaluator where onnxruntime has no kernel): Mod's fmod=0/1 on signed, unsigned
and float types with zero divisors, old versions; TopK's ties (lower index first), NaN (the
largest), largest/smallest, every version, k = 0 and k = n; CumProd's exclusive and reverse
modes; TensorScatter's linear and circular modes on several axes; QLinearConv per-tensor and
per-channel with groups, strides, padding and bias. float16 and bfloat16 (which the
standard lacks) run over numpy. Attribute errors are InvalidGraph naming the node; errors in
the data are ValueError.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx.defs
import pytest
from library_harness import Bound, assert_matches, typed_oracle, unbound_versions
from onnx import TensorProto, helper

from onyxrt.dtypes import np_dtype, onnx_elem_type
from onyxrt.errors import InvalidGraph
from onyxrt.kernels import KernelInfo

#: The operators this file covers (the family test files leave them to it).
MISC_OPS = {"Mod", "TopK", "CumProd", "TensorScatter", "QLinearConv"}
BF16 = np_dtype(TensorProto.BFLOAT16)
_TOL = {np.dtype(np.float16): (1e-3, 1e-3), np.dtype(np.float32): (1e-5, 1e-6),
        np.dtype(np.float64): (1e-12, 1e-12)}


def randn(*shape: int, seed: int = 0, dtype: Any = np.float32, scale: float = 3.0) -> np.ndarray:
    """Seeded standard-normal values times ``scale``."""
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def randint(*shape: int, lo: int = -9, hi: int = 10, seed: int = 0, dtype: Any = np.int32):
    """Seeded integers in [lo, hi)."""
    return np.random.default_rng(seed).integers(lo, hi, shape).astype(dtype)


def i64(*values: int) -> np.ndarray:
    """An int64 vector."""
    return np.array(values, np.int64)


def case(op: str, inputs: list[Any], opset: int, *, id: str, **attrs: Any) -> Any:
    """One single-output case."""
    return pytest.param(op, inputs, opset, attrs, id=id)


def _multi_node(op: str, inputs: Sequence[Any], n_out: int, **attrs: Any) -> onnx.NodeProto:
    names = [f"in{i}" for i in range(len(inputs))]
    return helper.make_node(op, names, [f"y{i}" for i in range(n_out)], name=f"{op}_node", **attrs)


def run_multi(bound: Bound, op: str, inputs: Sequence[Any], opset: int, n_out: int,
              **attrs: Any) -> list[np.ndarray]:
    """Every output of ``op`` over the bound library, back on the host."""
    kernel = bound.kernel(_multi_node(op, inputs, n_out, **attrs), opset)
    return [bound.host(o) for o in kernel.compute(*[bound.array(v) for v in inputs])]


def ort_multi(op: str, inputs: Sequence[Any], opset: int, out_types: Sequence[Any],
              **attrs: Any) -> list[np.ndarray]:
    """Every output of ``op`` by onnxruntime."""
    import onnxruntime as ort

    n = _multi_node(op, inputs, len(out_types), **attrs)
    feeds = {name: np.asarray(v) for name, v in zip(n.input, inputs)}
    graph = helper.make_graph(
        [n], "oracle",
        [helper.make_tensor_value_info(k, onnx_elem_type(v.dtype), list(v.shape)) for k, v in feeds.items()],
        [helper.make_tensor_value_info(name, onnx_elem_type(np.dtype(t)), None)
         for name, t in zip(n.output, out_types)],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


# ------------------------------------------------------------------ single-output ops

_EDGES = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, 1e-20, np.inf, -np.inf], np.float32)
_A, _B = (v.ravel() for v in np.meshgrid(_EDGES, _EDGES[:9]))


def _u8(*shape: int, seed: int = 0) -> np.ndarray:
    return randint(*shape, lo=0, hi=256, seed=seed, dtype=np.uint8)


def _i8(*shape: int, seed: int = 0) -> np.ndarray:
    return randint(*shape, lo=-128, hi=128, seed=seed, dtype=np.int8)


def _qconv(x: np.ndarray, w: np.ndarray, w_scale: Any, w_zp: Any, bias: Any = None) -> list[Any]:
    zp = np.uint8(128) if x.dtype == np.uint8 else np.int8(-3)
    inputs = [x, np.float32(0.02), zp, w, w_scale, w_zp, np.float32(0.07), np.uint8(120)]
    return inputs + ([] if bias is None else [bias])


CASES = [
    *[case("Mod", [randint(4, 6, lo=-20, hi=20, dtype=dt), randint(4, 6, lo=-6, hi=7, seed=1, dtype=dt)],
           13, fmod=f, id=f"Mod-{np.dtype(dt).name}-fmod{f}")
      for dt in (np.int8, np.int32, np.int64) for f in (0, 1)],
    *[case("Mod", [randint(4, 6, lo=0, hi=250, dtype=dt), randint(4, 6, lo=0, hi=9, seed=1, dtype=dt)],
           13, fmod=f, id=f"Mod-{np.dtype(dt).name}-fmod{f}")
      for dt in (np.uint8, np.uint64) for f in (0, 1)],
    case("Mod", [np.array([-128, 127, -7, 7], np.int8), np.array([-1, -1, 3, -3], np.int8)], 10,
         fmod=1, id="Mod-10-int8-extremes"),
    case("Mod", [randn(3, 5, scale=10), randn(3, 5, seed=1)], 13, fmod=1, id="Mod-float-fmod1"),
    case("Mod", [randn(3, 5, scale=10, dtype=np.float64), randn(5, seed=1, dtype=np.float64)], 28,
         fmod=1, id="Mod-28-f64-broadcast"),
    case("Mod", [_A, _B], 13, fmod=1, id="Mod-float-edges-fmod1"),
    case("Mod", [randn(3, 5, scale=10), randn(3, 5, seed=1)], 13, id="Mod-float-fmod0"),
    case("CumProd", [randn(2, 3, 4, scale=1.0), i64(1)], 26, id="CumProd"),
    *[case("CumProd", [randint(2, 3, 4, lo=-3, hi=4, dtype=np.int64), np.array(ax)], 26,
           exclusive=ex, reverse=rv, id=f"CumProd-axis{ax}-exclusive{ex}-reverse{rv}")
      for ax in (0, -1) for ex in (0, 1) for rv in (0, 1)],
    case("CumProd", [randint(3, 4, lo=0, hi=300, dtype=np.uint32), np.array([1], np.int32)], 26,
         id="CumProd-uint32-wraps"),
    case("CumProd", [randn(3, 4, dtype=np.float64, scale=1.0), np.array(0)], 26, exclusive=1,
         id="CumProd-f64"),
    case("TensorScatter", [randn(2, 3, 6, 4), randn(2, 3, 2, 4, seed=1), i64(1, 4)], 24,
         id="TensorScatter"),
    case("TensorScatter", [randn(2, 3, 6, 4), randn(2, 3, 6, 4, seed=1)], 24,
         id="TensorScatter-no-indices-full"),
    case("TensorScatter", [randn(3, 5, 2), randn(3, 3, 2, seed=1), i64(4, 1, 3)], 24,
         mode="circular", axis=1, id="TensorScatter-circular"),
    case("TensorScatter", [randint(2, 4, 5, dtype=np.int64), randint(2, 4, 2, seed=1, dtype=np.int64),
                           i64(3, 0)], 24, axis=-1, id="TensorScatter-int64-last-axis"),
    case("QLinearConv", _qconv(_u8(1, 2, 5, 5), _i8(4, 2, 3, 3, seed=1), np.float32(0.01), np.int8(0),
                               randint(4, lo=-500, hi=500)), 10, pads=[1, 1, 1, 1], id="QLinearConv"),
    case("QLinearConv", _qconv(_u8(2, 4, 6, 6), _u8(6, 2, 2, 2, seed=1),
                               np.array([0.01, 0.02, 0.005, 0.01, 0.03, 0.02], np.float32),
                               _u8(6, seed=2)), 10, group=2, strides=[2, 2],
         id="QLinearConv-per-channel-group-stride"),
    case("QLinearConv", _qconv(_i8(1, 3, 7), _i8(2, 3, 3, seed=1), np.float32(0.01), np.int8(0)), 10,
         auto_pad="SAME_UPPER", dilations=[2], id="QLinearConv-1d-int8-same"),
]


@pytest.mark.parametrize(("op", "inputs", "opset", "attrs"), CASES)
def test_same_as_onnxruntime(bound: Bound, op, inputs, opset, attrs):
    got = bound.run(op, inputs, opset, **attrs)
    out_dtype = inputs[7].dtype if op == "QLinearConv" else inputs[0].dtype  # y_zero_point's
    assert_matches(got, np.asarray(typed_oracle(op, inputs, opset, out_dtype, **attrs)), _TOL)


@pytest.mark.parametrize("fmod", [0, 1])
@pytest.mark.parametrize("dtype", [np.float16, BF16])
def test_mod_half_types_round_once(numpy_bound: Bound, dtype, fmod):
    a, b = randn(4, 5, scale=10), randn(4, 5, seed=1)
    got = numpy_bound.run("Mod", [a.astype(dtype), b.astype(dtype)], 13, fmod=fmod)
    fn = np.fmod if fmod else np.mod
    want = fn(a.astype(dtype).astype(np.float32), b.astype(dtype).astype(np.float32)).astype(dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_mod_by_zero(bound: Bound):
    a = np.array([5, -5, 0], np.int32)
    for fmod in (0, 1):
        np.testing.assert_array_equal(bound.run("Mod", [a, np.zeros(3, np.int32)], 13, fmod=fmod), 0)
        got = bound.run("Mod", [a.astype(np.float32), np.zeros(3, np.float32)], 13, fmod=fmod)
        assert np.isnan(got).all()


def test_fmod_keeps_the_dividends_sign_exactly(bound: Bound):
    # remainder(x, y) - y would round 1e-20 - 1 + 1 to 0; C's fmod keeps 1e-20.
    got = bound.run("Mod", [np.array([1e-20, -1e-20, -0.0], np.float64), np.array([-1.0, 1.0, 3.0])],
                    13, fmod=1)
    np.testing.assert_array_equal(got, [1e-20, -1e-20, -0.0])
    assert np.signbit(got[2])


def test_cumprod_half_types(numpy_bound: Bound):
    x = randn(3, 4, scale=1.0)
    for dt in (np.float16, BF16):
        got = numpy_bound.run("CumProd", [x.astype(dt), np.array(1)], 26)
        want = np.cumprod(x.astype(dt).astype(np.float32), axis=1).astype(dt)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


def test_every_operator_has_a_case():
    assert {p.values[0] for p in CASES} | {"TopK"} == MISC_OPS


def test_every_onnx_version_is_bound(numpy_bound: Bound, strict_bound: Bound):
    assert not unbound_versions(numpy_bound.registry, MISC_OPS)
    assert not unbound_versions(strict_bound.registry, MISC_OPS)


def test_steering_inputs_are_host_inputs(numpy_bound: Bound):
    for op, opset, host in (("TopK", 11, {1}), ("CumProd", 26, {1}), ("TensorScatter", 24, {2}),
                            ("Mod", 13, set()), ("QLinearConv", 10, set())):
        kdef, _ = numpy_bound.registry.lookup("", op, opset)
        assert set(kdef.host_inputs) == host, op


# ------------------------------------------------------------------------------ TopK

_TIES = randint(3, 12, lo=0, hi=4).astype(np.float32)
_NANS = np.array([[1.0, np.nan, 3.0, np.nan, -np.inf, 3.0, 0.0, np.inf]], np.float32)

TOPK = [
    pytest.param([_TIES, i64(5)], 11, {}, id="ties"),
    pytest.param([_TIES, i64(5)], 11, {"largest": 0}, id="ties-smallest"),
    pytest.param([_TIES.T.copy(), i64(2)], 24, {"axis": 0}, id="24-axis0"),
    pytest.param([_NANS, i64(4)], 11, {}, id="nan-largest"),
    pytest.param([_NANS, i64(4)], 11, {"largest": 0}, id="nan-smallest"),
    pytest.param([randint(2, 70, lo=0, hi=5, dtype=np.uint8), i64(10)], 11, {}, id="uint8-long"),
    pytest.param([randint(2, 3, 4, lo=-3, hi=3, dtype=np.int64), i64(4)], 11,
                 {"axis": -1, "largest": 0, "sorted": 1}, id="int64-k-equals-n"),
    pytest.param([randn(4, 6, dtype=np.float64), i64(0)], 10, {}, id="10-k0"),
    pytest.param([randn(4, 6)], 1, {"k": 3, "axis": 0}, id="1-attribute"),
]


@pytest.mark.parametrize(("inputs", "opset", "attrs"), TOPK)
def test_topk_same_as_onnxruntime(bound: Bound, inputs, opset, attrs):
    got = run_multi(bound, "TopK", inputs, opset, 2, **attrs)
    want = ort_multi("TopK", inputs, opset, [inputs[0].dtype, np.int64], **attrs)
    assert got[1].dtype == np.int64
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == inputs[0].dtype


def test_topk_half_types(numpy_bound: Bound):
    x = randint(3, 9, lo=0, hi=4).astype(np.float32)
    want_idx = np.argsort(-x, axis=1, kind="stable")[:, :4]
    for dt in (np.float16, BF16):
        values, idx = run_multi(numpy_bound, "TopK", [x.astype(dt), i64(4)], 24, 2)
        np.testing.assert_array_equal(idx, want_idx)
        assert values.dtype == np.dtype(dt)


# ---------------------------------------------------------------------------- errors


def _build(bound: Bound, op: str, opset: int, n_in: int, n_out: int = 1, **attrs: Any) -> Any:
    n = helper.make_node(op, [f"in{i}" for i in range(n_in)], [f"y{i}" for i in range(n_out)],
                         name=f"{op}_node", **attrs)
    kdef, _ = bound.registry.lookup("", op, opset)
    return kdef.factory(KernelInfo.from_node(n, opset, since_version=kdef.since_version))


@pytest.mark.parametrize(("op", "opset", "n_in", "n_out", "attrs"), [
    ("Mod", 13, 2, 1, {"fmod": 2}),
    ("TopK", 11, 2, 2, {"largest": 2}),
    ("TopK", 11, 2, 2, {"sorted": 3}),
    ("TopK", 1, 1, 2, {}),
    ("CumProd", 26, 2, 1, {"exclusive": 2}),
    ("TensorScatter", 24, 3, 1, {"mode": "ring"}),
    ("QLinearConv", 10, 8, 1, {"group": 0}),
])
def test_bad_attributes_are_invalid_graph(numpy_bound: Bound, op, opset, n_in, n_out, attrs):
    with pytest.raises(InvalidGraph, match=f"{op}_node"):
        _build(numpy_bound, op, opset, n_in, n_out, **attrs)


def test_bad_data_is_value_error(bound: Bound):
    a = bound.array
    topk = _build(bound, "TopK", 11, 2, 2)
    with pytest.raises(ValueError, match="out of range"):
        topk.compute(a(randn(2, 3)), i64(4))
    with pytest.raises(ValueError, match="one integer"):
        topk.compute(a(randn(2, 3)), i64(1, 2))
    cumprod = _build(bound, "CumProd", 26, 2)
    with pytest.raises(ValueError, match="out of range"):
        cumprod.compute(a(randn(2, 3)), np.array(2))
    scatter = _build(bound, "TensorScatter", 24, 3)
    with pytest.raises(ValueError, match="linear mode"):
        scatter.compute(a(randn(2, 4, 3)), a(randn(2, 2, 3)), i64(3, 0))
    with pytest.raises(ValueError, match="does not fit"):
        scatter.compute(a(randn(2, 4, 3)), a(randn(2, 5, 3)))
    with pytest.raises(ValueError, match="expected"):
        scatter.compute(a(randn(2, 4, 3)), a(randn(2, 2, 3)), i64(0, 0, 0))
    qconv = _build(bound, "QLinearConv", 10, 8)
    with pytest.raises(ValueError, match="x_zero_point"):
        qconv.compute(*[a(v) for v in _qconv(_u8(1, 2, 5, 5), _i8(2, 2, 3, 3), np.float32(0.1),
                                             np.int8(0))[:2]], a(_u8(2)),
                      *[a(v) for v in _qconv(_u8(1, 2, 5, 5), _i8(2, 2, 3, 3), np.float32(0.1),
                                             np.int8(0))[3:]])
