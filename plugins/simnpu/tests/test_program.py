"""Programs: compilation output, the schedule, the cost model and the safe format."""

from __future__ import annotations

import hashlib
import json
import struct

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from onyxrt.graph import Graph
from onyxrt.protocol import FusedSubgraph
from onyxrt_simnpu.compiler import CompileError, compile_group
from onyxrt_simnpu.ops import to_storage
from onyxrt_simnpu.program import MAGIC, CorruptProgram, Instruction, Program

RNG = np.random.default_rng(7)


def _model(opset: int = 17) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Conv → Relu → Reshape → Gemm(transB) + Add of a second input, 2 outputs."""
    inits = {
        "W": RNG.standard_normal((4, 3, 3, 3)).astype(np.float32),
        "B": RNG.standard_normal(4).astype(np.float32),
        "shape": np.array([2, -1], np.int64),
        "fc": RNG.standard_normal((5, 4 * 4 * 4)).astype(np.float32),
    }
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["f"], name="reshape"),
        helper.make_node("Gemm", ["f", "fc"], ["g"], name="fc", transB=1),
        helper.make_node("Add", ["g", "z"], ["y"], name="add"),
    ]
    feeds = {
        "x": RNG.standard_normal((2, 3, 8, 8)).astype(np.float32),
        "z": RNG.standard_normal((2, 5)).astype(np.float32),
    }
    graph = helper.make_graph(
        nodes, "prog",
        [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, a.shape) for n, a in feeds.items()],
        [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("r")],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return onnx.shape_inference.infer_shapes(model), feeds


def _group(model: onnx.ModelProto) -> FusedSubgraph:
    graph = Graph.from_proto(model.graph, {"": 17})
    produced = {o for n in graph.nodes for o in n.outputs}
    inputs = list(dict.fromkeys(i for n in graph.nodes for i in n.inputs if i and i not in produced))
    return FusedSubgraph("SimNPU_prog_0", tuple(graph.nodes), tuple(inputs), tuple(graph.outputs), graph)


@pytest.fixture(scope="module")
def compiled():
    model, feeds = _model()
    group = _group(model)
    return model, feeds, group, compile_group(group, "fp16")


# -- compilation ------------------------------------------------------------------------
def test_program_signature(compiled):
    _, _, group, program = compiled
    assert program.name == group.name
    assert program.inputs == list(group.runtime_inputs) == ["x", "z"]
    assert program.outputs == ["y", "r"]
    assert [i.op for i in program.instructions] == ["Conv", "Relu", "Reshape", "Gemm", "Add"]
    assert program.io_types["x"] == ("float16", (2, 3, 8, 8))
    assert program.io_types["y"] == ("float16", (2, 5))
    assert program.precision == "fp16"


def test_constants_baked_in_storage_precision(compiled):
    model, _, group, program = compiled
    assert program.constants["W"].dtype == np.float16
    assert program.constants["shape"].dtype == np.int64
    for arr in program.constants.values():
        assert not arr.flags.writeable
    # The graph's own arrays are untouched, even in fp32 where no conversion is needed.
    fresh = _group(model)
    flags = {k: v.flags.writeable for k, v in fresh.graph.initializers.items()}
    p32 = compile_group(fresh, "fp32")
    assert {k: v.flags.writeable for k, v in fresh.graph.initializers.items()} == flags
    assert not np.shares_memory(p32.constants["W"], fresh.graph.initializers["W"])
    assert fresh.graph.initializers["W"].dtype == np.float32
    assert program.weight_bytes() == sum(a.nbytes for a in program.constants.values())
    assert program.weight_bytes() == (4 * 27 + 4 + 5 * 64) * 2 + 2 * 8


def test_fp32_program_keeps_float32(compiled):
    model, feeds, group, _ = compiled
    program = compile_group(group, "fp32")
    assert program.constants["W"].dtype == np.float32
    y, r = program.run([feeds["x"], feeds["z"]])
    ey, er = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(y, ey, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(r, er, rtol=1e-5, atol=1e-5)


def test_run_matches_reference_fp16(compiled):
    model, feeds, _, program = compiled
    y, r = program.run([to_storage(feeds["x"], "fp16"), to_storage(feeds["z"], "fp16")])
    assert y.dtype == np.float16 and r.dtype == np.float16
    ey, er = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(y.astype(np.float32), ey, rtol=1e-2, atol=1e-2 * np.abs(ey).max())
    np.testing.assert_allclose(r.astype(np.float32), er, rtol=1e-2, atol=1e-2 * np.abs(er).max())


def test_run_casts_float_inputs_and_checks_shapes(compiled):
    _, feeds, _, program = compiled
    a = program.run([to_storage(feeds["x"], "fp16"), to_storage(feeds["z"], "fp16")])
    b = program.run([feeds["x"], feeds["z"]])  # float32 given: stored as float16 first
    np.testing.assert_array_equal(a[0], b[0])
    with pytest.raises(ValueError, match="takes 2 inputs"):
        program.run([feeds["x"]])
    with pytest.raises(ValueError, match="shape"):
        program.run([feeds["x"][:1], feeds["z"]])


def test_inputs_are_never_modified_and_outputs_never_alias(compiled):
    _, feeds, _, program = compiled
    x = to_storage(feeds["x"], "fp16")
    x.flags.writeable = False  # device tensors hand read-only views to programs
    z = to_storage(feeds["z"], "fp16")
    before = z.copy()
    y, r = program.run([x, z])
    np.testing.assert_array_equal(z, before)
    for out in (y, r):
        assert out.flags.owndata and out.flags.writeable
        assert not np.shares_memory(out, x) and not np.shares_memory(out, z)


def test_view_outputs_are_copied():
    # A lone Reshape's result is a view of the input: the program must return its own buffer.
    x = RNG.standard_normal((2, 6)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="r")], "v",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6])],
        [helper.make_empty_tensor_value_info("y")],
        [numpy_helper.from_array(np.array([3, 4], np.int64), "s")],
    )
    model = onnx.shape_inference.infer_shapes(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    )
    program = compile_group(_group(model), "fp32")
    (y,) = program.run([x])
    assert y.shape == (3, 4) and not np.shares_memory(y, x)


def test_drop_schedule_frees_buffers_after_last_reader(compiled):
    _, _, _, program = compiled
    drops = program.drop_schedule()
    assert len(drops) == len(program.instructions)
    freed = {name: i for i, names in enumerate(drops) for name in names}
    assert freed["x"] == 0  # read only by the Conv
    assert freed["c"] == 1  # Conv output, read by Relu
    assert freed["f"] == 3 and freed["g"] == 4 and freed["z"] == 4
    assert "r" not in freed and "y" not in freed  # program outputs are kept
    assert not set(freed) & set(program.constants)  # constants stay resident


def test_compile_rejects_a_node_outside_the_op_set():
    graph = helper.make_graph(
        [helper.make_node("Sqrt", ["x"], ["y"], name="sqrt")], "bad",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    with pytest.raises(CompileError, match="Sqrt"):
        compile_group(_group(model), "fp16")
    with pytest.raises(ValueError, match="precision"):
        compile_group(_group(model), "bf16")


# -- cost model -------------------------------------------------------------------------
def test_device_time_is_a_roofline():
    program = Program(
        "p", ["a"], ["c"],
        [
            Instruction("Relu", ["a"], ["b"], {}, macs=10**9, bytes=10**3),  # compute bound
            Instruction("Relu", ["b"], ["c"], {}, macs=1, bytes=10**9),  # memory bound
        ],
        {}, "fp16",
    )
    # 2e9 ops at 10 TOPS = 200 us; 1e9 bytes at 100 GB/s = 10 000 us.
    assert program.device_time_us(10.0, 100.0) == pytest.approx(200.0 + 10_000.0)
    assert program.device_time_us(20.0, 200.0) == pytest.approx(100.0 + 5_000.0)
    with pytest.raises(ValueError):
        program.device_time_us(0.0, 1.0)


def test_compiled_costs(compiled):
    _, _, _, program = compiled
    conv, relu, reshape, gemm, add = program.instructions
    assert conv.macs == 2 * 4 * 4 * 4 * 27
    assert reshape.macs == 0 and reshape.bytes == 0
    assert gemm.macs == 2 * 5 * 64
    assert relu.bytes == 2 * (2 * 4 * 4 * 4) * 2
    assert program.macs() == sum(i.macs for i in program.instructions)
    assert program.device_time_us(10.0, 50.0) > 0


# -- serialization ----------------------------------------------------------------------
def test_round_trip(compiled):
    _, feeds, _, program = compiled
    data = program.to_bytes()
    assert data.startswith(MAGIC)
    loaded = Program.from_bytes(data)
    assert loaded.name == program.name
    assert loaded.inputs == program.inputs and loaded.outputs == program.outputs
    assert loaded.instructions == program.instructions
    assert loaded.precision == program.precision
    assert loaded.io_types == program.io_types
    assert list(loaded.constants) == list(program.constants)
    for name, arr in program.constants.items():
        assert loaded.constants[name].dtype == arr.dtype
        np.testing.assert_array_equal(loaded.constants[name], arr)
    args = [to_storage(feeds["x"], "fp16"), to_storage(feeds["z"], "fp16")]
    for a, b in zip(program.run(args), loaded.run(args)):
        np.testing.assert_array_equal(a, b)
    assert loaded.to_bytes() == data  # deterministic
    assert Program.from_bytes(bytearray(data)).to_bytes() == data
    assert Program.from_bytes(memoryview(data)).to_bytes() == data


def test_header_is_json_not_pickle(compiled):
    data = compiled[3].to_bytes()
    _, _, head_len, _ = struct.unpack_from("<8sII32s", data)
    header = json.loads(data[48: 48 + head_len])
    assert header["precision"] == "fp16"
    assert {c["name"] for c in header["constants"]} == set(compiled[3].constants)
    assert b"\x80\x04\x95" not in data[:48 + head_len]  # no pickle protocol header


def test_truncated_data_is_rejected(compiled):
    data = compiled[3].to_bytes()
    for length in sorted({0, 1, 7, 8, 20, 47, 48, 60, len(data) // 2, len(data) - 64, len(data) - 1}):
        with pytest.raises(CorruptProgram):
            Program.from_bytes(data[:length])


def test_trailing_bytes_are_rejected(compiled):
    with pytest.raises(CorruptProgram, match="payload"):
        Program.from_bytes(compiled[3].to_bytes() + b"\x00")


def test_every_bit_flip_is_detected(compiled):
    data = compiled[3].to_bytes()
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 1 << (pos % 8)
        with pytest.raises(CorruptProgram):
            Program.from_bytes(bytes(damaged))


def test_bad_magic_and_version(compiled):
    data = compiled[3].to_bytes()
    with pytest.raises(CorruptProgram, match="magic"):
        Program.from_bytes(b"PK\x03\x04" + data[4:])
    future = bytearray(data)
    struct.pack_into("<I", future, 8, 99)
    with pytest.raises(CorruptProgram, match="version 99"):
        Program.from_bytes(bytes(future))
    with pytest.raises(TypeError):
        Program.from_bytes("not bytes")  # type: ignore[arg-type]


def _forge(data: bytes, edit) -> bytes:
    """Re-sign a program after editing its header: checksums valid, content hostile."""
    _, version, head_len, _ = struct.unpack_from("<8sII32s", data)
    header = json.loads(data[48: 48 + head_len])
    payload = data[48 + head_len:]
    payload = edit(header, payload) or payload
    header["payload_size"] = len(payload)
    header["payload_sha256"] = hashlib.sha256(payload).hexdigest()
    head = json.dumps(header).encode()
    return struct.pack("<8sII32s", MAGIC, version, len(head), hashlib.sha256(head).digest()) + head + payload


def _set(path, value):
    def edit(header, payload):
        target = header
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return edit


@pytest.mark.parametrize(
    "edit, match",
    [
        (_set(("constants", 0, "dtype"), "object"), "dtype"),
        (_set(("constants", 0, "offset"), 10**9), "payload"),
        (_set(("constants", 0, "shape"), [10**6]), "payload"),
        (_set(("constants", 0, "shape"), [-1]), "non-negative"),
        (_set(("instructions", 0, "op"), "os.system"), "unknown op"),
        (_set(("instructions", 1, "inputs"), ["nowhere"]), "undefined"),
        (_set(("instructions", 0, "macs"), "many"), "integer"),
        (_set(("instructions", 0, "attrs"), [1, 2]), "object"),
        (_set(("outputs",), ["y", "ghost"]), "never produced"),
        (_set(("precision",), "fp64"), "precision"),
        (_set(("name",), 42), "string"),
        (_set(("instructions",), None), "malformed"),
    ],
)
def test_forged_headers_are_rejected(compiled, edit, match):
    data = compiled[3].to_bytes()
    Program.from_bytes(_forge(data, lambda h, p: None))  # re-signing alone is fine
    with pytest.raises(CorruptProgram, match=match):
        Program.from_bytes(_forge(data, edit))


def test_validate_catches_malformed_schedules():
    good = Program("p", ["a"], ["b"], [Instruction("Relu", ["a"], ["b"], {}, 1, 1)], {}, "fp16")
    good.validate()
    twice = Program(
        "p", ["a"], ["b"],
        [Instruction("Relu", ["a"], ["b"], {}, 1, 1), Instruction("Relu", ["a"], ["b"], {}, 1, 1)],
        {}, "fp16",
    )
    with pytest.raises(CorruptProgram, match="redefines"):
        twice.validate()
    clash = Program("p", ["a"], ["b"], [Instruction("Relu", ["a"], ["b"], {}, 1, 1)],
                    {"a": np.zeros(1, np.float16)}, "fp16")
    with pytest.raises(CorruptProgram, match="constant"):
        clash.validate()
