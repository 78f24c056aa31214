"""LoRA adapter files (``onyxrt.lora``): files travel both ways between onyxrt and
onnxruntime with the same parameters and versions (onyxrt even writes the same bytes), and
a truncated or corrupt file ends in a typed ``InvalidAdapter`` quickly, never another
exception, a hang or a huge allocation.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto

from onyxrt.errors import InvalidArgument, InvalidModel, ModelFileNotFound
from onyxrt.lora import (
    AdapterFileNotFound,
    AdapterFormat,
    InvalidAdapter,
    LoraAdapter,
    decode_adapter,
    encode_adapter,
)
from onyxrt.ortvalue import OrtValue

# Every element type the adapter format carries, with the ONNX code onnxruntime uses.
DTYPES = {
    "float32": (np.float32, TensorProto.FLOAT),
    "float16": (np.float16, TensorProto.FLOAT16),
    "float64": (np.float64, TensorProto.DOUBLE),
    "int8": (np.int8, TensorProto.INT8),
    "uint8": (np.uint8, TensorProto.UINT8),
    "int16": (np.int16, TensorProto.INT16),
    "uint16": (np.uint16, TensorProto.UINT16),
    "int32": (np.int32, TensorProto.INT32),
    "uint32": (np.uint32, TensorProto.UINT32),
    "int64": (np.int64, TensorProto.INT64),
    "uint64": (np.uint64, TensorProto.UINT64),
    "bfloat16": (ml_dtypes.bfloat16, TensorProto.BFLOAT16),
    "float8e4m3fn": (ml_dtypes.float8_e4m3fn, TensorProto.FLOAT8E4M3FN),
    "float8e4m3fnuz": (ml_dtypes.float8_e4m3fnuz, TensorProto.FLOAT8E4M3FNUZ),
    "float8e5m2": (ml_dtypes.float8_e5m2, TensorProto.FLOAT8E5M2),
    "float8e5m2fnuz": (ml_dtypes.float8_e5m2fnuz, TensorProto.FLOAT8E5M2FNUZ),
}
_UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


@pytest.fixture(scope="module")
def ref():
    """onnxruntime, the oracle."""
    return pytest.importorskip("onnxruntime")


def _sample(dtype, shape=(3, 4), seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * 4).astype(dtype)


def _bits(array: np.ndarray) -> np.ndarray:
    """The array's bytes, to compare floats bit for bit (NaNs included)."""
    return np.ascontiguousarray(array).view(_UINT_OF_SIZE[array.dtype.itemsize])


def _ref_value(ref, array: np.ndarray):
    """An onnxruntime OrtValue of ``array`` (ml_dtypes types through their ONNX code)."""
    name = np.dtype(array.dtype).name
    code = next((c for dt, c in DTYPES.values() if np.dtype(dt) == array.dtype), None)
    if name in ("bfloat16",) or name.startswith("float8"):
        return ref.OrtValue.ortvalue_from_numpy_with_onnx_type(_bits(array), code)
    return ref.OrtValue.ortvalue_from_numpy(array)


def _ref_export(ref, path: Path, params: dict[str, np.ndarray], adapter_version=0, model_version=0):
    fmt = ref.AdapterFormat()
    fmt.set_adapter_version(adapter_version)
    fmt.set_model_version(model_version)
    fmt.set_parameters({k: _ref_value(ref, v) for k, v in params.items()})
    fmt.export_adapter(str(path))


def _ref_rejects(ref, path: Path) -> bool:
    try:
        ref.AdapterFormat.read_adapter(str(path))
    except (RuntimeError, UnicodeDecodeError):
        return True
    return False


# -- both directions ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_file_written_by_onnxruntime_reads_in_onyxrt(ref, tmp_path, dtype_name):
    dtype, _ = DTYPES[dtype_name]
    params = {"lora_A": _sample(dtype, (4, 2)), "lora_B": _sample(dtype, (2, 4), seed=1),
              "bias": _sample(dtype, (5,), seed=2)}
    path = tmp_path / "ref.onnx_adapter"
    _ref_export(ref, path, params, adapter_version=7, model_version=3)

    fmt = AdapterFormat.read_adapter(path)
    assert (fmt.get_format_version(), fmt.get_adapter_version(), fmt.get_model_version()) == (1, 7, 3)
    got = fmt.get_parameters()
    assert sorted(got) == sorted(params)
    for name, expected in params.items():
        value = got[name]
        assert isinstance(value, OrtValue)
        array = value.numpy()
        assert array.dtype == expected.dtype and array.shape == expected.shape
        np.testing.assert_array_equal(_bits(array), _bits(expected))

    adapter = LoraAdapter()
    adapter.Load(str(path))
    assert sorted(adapter.parameters()) == sorted(params)
    np.testing.assert_array_equal(_bits(adapter.parameters()["bias"]), _bits(params["bias"]))


@pytest.mark.parametrize("dtype_name", DTYPES)
def test_file_written_by_onyxrt_reads_in_onnxruntime(ref, tmp_path, dtype_name):
    dtype, code = DTYPES[dtype_name]
    params = {"lora_A": _sample(dtype, (4, 2)), "lora_B": _sample(dtype, (2, 4), seed=1)}
    fmt = AdapterFormat()
    fmt.set_adapter_version(11)
    fmt.set_model_version(-2)
    fmt.set_parameters({k: OrtValue.ortvalue_from_numpy(v) for k, v in params.items()})
    path = tmp_path / "onyx.onnx_adapter"
    fmt.export_adapter(path)

    theirs = ref.AdapterFormat.read_adapter(str(path))
    assert (theirs.get_format_version(), theirs.get_adapter_version(), theirs.get_model_version()) == (1, 11, -2)
    got = theirs.get_parameters()
    assert sorted(got) == sorted(params)
    for name, expected in params.items():
        assert got[name].shape() == list(expected.shape)
        assert got[name].element_type() == code
    # onnxruntime's numpy() cannot give bfloat16/float8 arrays: compare the values by
    # having onnxruntime write them again and reading that file here.
    again = tmp_path / "again.onnx_adapter"
    theirs.export_adapter(str(again))
    back = AdapterFormat.read_adapter(again).get_parameters()
    for name, expected in params.items():
        np.testing.assert_array_equal(_bits(back[name].numpy()), _bits(expected))

    ref.LoraAdapter().Load(str(path))  # onnxruntime's loader accepts it as well


BYTE_CASES = {
    "empty": ({}, 0, 0),
    "versions": ({}, -5, 2**31 - 1),
    "two tables share a vtable": (
        {"x": np.zeros(3, np.float32), "y": np.ones(3, np.float32)}, 1, 2),
    "odd byte lengths": (
        {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "bb": np.array([1, 2, 3], np.int8),
         "ccc": np.arange(5, dtype=np.uint8)}, 7, 3),
    "zero-size tensor": ({"z": np.zeros((0, 3), np.float32), "w": np.ones(5, np.int16)}, 0, 1),
    "mixed dtypes and ranks": (
        {f"p{i}": _sample(dt, tuple(range(1, i % 4 + 2)), seed=i)
         for i, (dt, _) in enumerate(DTYPES.values())}, 4, 9),
    "non-ascii name": ({"poids_é": np.ones((2, 2), np.float16)}, 0, 0),
}


@pytest.mark.parametrize("case", BYTE_CASES)
def test_onyxrt_writes_the_same_bytes_as_onnxruntime(ref, tmp_path, case):
    params, adapter_version, model_version = BYTE_CASES[case]
    path = tmp_path / "ref.onnx_adapter"
    _ref_export(ref, path, params, adapter_version, model_version)
    assert encode_adapter(params, adapter_version, model_version) == path.read_bytes()


def test_a_new_adapter_format_starts_as_onnxruntimes_does(ref, tmp_path):
    ours, theirs = AdapterFormat(), ref.AdapterFormat()
    assert ours.get_format_version() == theirs.get_format_version() == 1
    assert ours.get_adapter_version() == theirs.get_adapter_version() == 0
    assert ours.get_model_version() == theirs.get_model_version() == 0
    assert ours.get_parameters() == theirs.get_parameters() == {}
    ours.export_adapter(tmp_path / "empty.onnx_adapter")
    read = ref.AdapterFormat.read_adapter(str(tmp_path / "empty.onnx_adapter"))
    assert read.get_parameters() == {}


def test_parameters_read_are_writable_views_as_in_onnxruntime(ref, tmp_path):
    path = tmp_path / "a.onnx_adapter"
    _ref_export(ref, path, {"w": np.arange(4, dtype=np.float32)})
    theirs = ref.AdapterFormat.read_adapter(str(path)).get_parameters()["w"].numpy()
    ours = AdapterFormat.read_adapter(path).get_parameters()["w"].numpy()
    assert ours.flags.writeable == theirs.flags.writeable
    assert not ours.flags.owndata  # a view of the file's bytes, not a copy per parameter


# -- versions and parameters that cannot be stored ---------------------------------------


@pytest.mark.parametrize("bad", [2**31, -(2**31) - 1, "3", 3.0, True, None])
def test_versions_outside_int32_or_not_int_are_invalid_argument(bad):
    fmt = AdapterFormat()
    with pytest.raises(InvalidArgument, match="adapter_version"):
        fmt.set_adapter_version(bad)
    with pytest.raises(InvalidArgument, match="model_version"):
        fmt.set_model_version(bad)
    assert fmt.get_adapter_version() == 0


def test_int32_bounds_round_trip(tmp_path):
    fmt = AdapterFormat()
    fmt.set_adapter_version(-(2**31))
    fmt.set_model_version(2**31 - 1)
    fmt.export_adapter(tmp_path / "v.onnx_adapter")
    back = AdapterFormat.read_adapter(tmp_path / "v.onnx_adapter")
    assert (back.get_adapter_version(), back.get_model_version()) == (-(2**31), 2**31 - 1)


@pytest.mark.parametrize(
    "name, value, words",
    [
        ("flag", np.array([True, False]), "bool"),
        ("text", np.array(["a", "b"], dtype=object), "object"),
        ("c", np.array([1 + 2j], np.complex64), "complex64"),
        ("nibbles", np.array([1, 2], ml_dtypes.int4), "int4"),
        ("scale", np.array(2.0, np.float32), "scalar"),
        ("", np.ones(2, np.float32), "non-empty"),
        ("w", [1.0, 2.0], "OrtValue or a numpy array"),
    ],
)
def test_parameters_onnxruntime_cannot_load_are_refused_when_set(name, value, words):
    fmt = AdapterFormat()
    with pytest.raises(InvalidArgument, match=words):
        fmt.set_parameters({name: value})
    assert fmt.get_parameters() == {}
    with pytest.raises(InvalidArgument, match=words):
        LoraAdapter.from_parameters({name: value})


@pytest.mark.parametrize("value", [np.array([True, False]), np.array(2.0, np.float32)])
def test_onnxruntime_writes_but_cannot_load_what_onyxrt_refuses(ref, tmp_path, value):
    # Why onyxrt refuses bool and scalar parameters up front: onnxruntime writes them,
    # then fails to load its own file.
    path = tmp_path / "bad.onnx_adapter"
    _ref_export(ref, path, {"p": value})
    assert _ref_rejects(ref, path)
    with pytest.raises(InvalidAdapter, match="'p'"):
        AdapterFormat.read_adapter(path)


def test_set_parameters_takes_ortvalues_or_arrays_and_get_returns_ortvalues():
    fmt = AdapterFormat()
    value = OrtValue.ortvalue_from_numpy(np.ones(3, np.float32))
    fmt.set_parameters({"a": value, "b": np.zeros(2, np.int64)})
    got = fmt.get_parameters()
    assert got["a"] is value
    assert isinstance(got["b"], OrtValue)
    np.testing.assert_array_equal(got["b"].numpy(), np.zeros(2, np.int64))
    got.clear()  # a new dict each time: the caller cannot empty the adapter
    assert sorted(fmt.get_parameters()) == ["a", "b"]


def test_copy_constructor_keeps_versions_and_parameters():
    fmt = AdapterFormat()
    fmt.set_adapter_version(2)
    fmt.set_parameters({"a": np.ones(1, np.float32)})
    copy = AdapterFormat(fmt)
    assert copy.get_adapter_version() == 2 and sorted(copy.get_parameters()) == ["a"]
    with pytest.raises(InvalidArgument, match="read_adapter"):
        AdapterFormat("some/path.onnx_adapter")  # type: ignore[arg-type]


# -- LoraAdapter ---------------------------------------------------------------------------


def test_lora_adapter_gives_host_arrays_after_load(tmp_path):
    params = {"lora_A": _sample(np.float32, (4, 2)), "lora_B": _sample(np.float16, (2, 4))}
    fmt = AdapterFormat()
    fmt.set_parameters(params)
    fmt.export_adapter(tmp_path / "a.onnx_adapter")
    adapter = LoraAdapter()
    assert not adapter.is_loaded
    with pytest.raises(InvalidArgument, match="Load"):
        adapter.parameters()
    adapter.Load(tmp_path / "a.onnx_adapter")
    got = adapter.parameters()
    assert sorted(got) == ["lora_A", "lora_B"]
    for name, expected in params.items():
        assert isinstance(got[name], np.ndarray)
        np.testing.assert_array_equal(got[name], expected)
        assert got[name].dtype == expected.dtype
    assert adapter.path == str(tmp_path / "a.onnx_adapter")
    assert "lora_A" in repr(adapter)


def test_loading_another_file_replaces_the_parameters(tmp_path):
    for name in ("one", "two"):
        fmt = AdapterFormat()
        fmt.set_parameters({name: np.ones(1, np.float32)})
        fmt.export_adapter(tmp_path / f"{name}.onnx_adapter")
    adapter = LoraAdapter()
    adapter.Load(tmp_path / "one.onnx_adapter")
    adapter.Load(tmp_path / "two.onnx_adapter")
    assert list(adapter.parameters()) == ["two"]


def test_lora_adapter_from_parameters_needs_no_file():
    adapter = LoraAdapter.from_parameters({"w": np.arange(3, dtype=np.float32)}, adapter_version=4)
    assert adapter.adapter_version == 4 and adapter.model_version == 0
    np.testing.assert_array_equal(adapter.parameters()["w"], [0, 1, 2])
    assert adapter.path is None


def test_onnxruntime_loads_an_onyxrt_adapter_file(ref, tmp_path):
    fmt = AdapterFormat()
    fmt.set_parameters({"lora_A": _sample(np.float32, (8, 4))})
    fmt.export_adapter(tmp_path / "a.onnx_adapter")
    ref.LoraAdapter().Load(str(tmp_path / "a.onnx_adapter"))


# -- files that are not adapters -----------------------------------------------------------


def test_missing_file_is_a_typed_not_found_error(ref, tmp_path):
    path = tmp_path / "nowhere.onnx_adapter"
    with pytest.raises(AdapterFileNotFound) as err:
        LoraAdapter().Load(path)
    assert isinstance(err.value, ModelFileNotFound) and isinstance(err.value, InvalidModel)
    assert isinstance(err.value, RuntimeError)  # what onnxruntime raises
    assert str(path) in str(err.value)
    with pytest.raises(RuntimeError):
        ref.LoraAdapter().Load(str(path))


def test_a_folder_is_not_an_adapter(tmp_path):
    with pytest.raises(InvalidAdapter, match="directory"):
        AdapterFormat.read_adapter(tmp_path)


@pytest.mark.parametrize(
    "content",
    [b"", b"TORT", b"hello world, this is not an adapter at all",
     b"\x08\x00\x00\x00ONNX" + bytes(40)],
    ids=["empty", "four bytes", "text", "wrong identifier"],
)
def test_bytes_that_are_no_adapter_are_rejected_like_onnxruntime(ref, tmp_path, content):
    path = tmp_path / "x.onnx_adapter"
    path.write_bytes(content)
    assert _ref_rejects(ref, path)
    with pytest.raises(InvalidAdapter) as err:
        AdapterFormat.read_adapter(path)
    assert str(path) in str(err.value) and "not a valid onnxruntime adapter" in str(err.value)


def test_export_into_a_missing_folder_is_invalid_argument(tmp_path):
    target = tmp_path / "no" / "such" / "a.onnx_adapter"
    with pytest.raises(InvalidArgument, match="folder"):
        AdapterFormat().export_adapter(target)


def _root_field(data: bytes | bytearray, index: int) -> int:
    """Byte position of field ``index`` of the root table of a well-formed adapter."""
    root = struct.unpack_from("<I", data, 0)[0]
    vtable = root - struct.unpack_from("<i", data, root)[0]
    return root + struct.unpack_from("<H", data, vtable + 4 + 2 * index)[0]


def _small_adapter() -> bytes:
    return encode_adapter(
        {"lora_A": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array([1, 2, 3], np.int8),
         "c": np.array([[7]], np.int64)}, 3, 4)


def test_unknown_format_version_is_refused_like_onnxruntime(ref, tmp_path):
    data = bytearray(_small_adapter())
    struct.pack_into("<i", data, _root_field(data, 0), 2)
    path = tmp_path / "v2.onnx_adapter"
    path.write_bytes(data)
    assert _ref_rejects(ref, path)
    with pytest.raises(InvalidAdapter, match="format version is 2"):
        AdapterFormat.read_adapter(path)


def test_duplicate_parameter_names_are_refused(ref, tmp_path):
    # onnxruntime silently keeps one of the two; onyxrt will not guess which was meant.
    data = encode_adapter({"p1": np.ones(2, np.float32), "p2": np.zeros(2, np.float32)})
    assert data.count(b"p2\x00") == 1
    path = tmp_path / "dup.onnx_adapter"
    path.write_bytes(data.replace(b"p2\x00", b"p1\x00"))
    assert list(ref.AdapterFormat.read_adapter(str(path)).get_parameters()) == ["p1"]
    with pytest.raises(InvalidAdapter, match="'p1' appears twice"):
        AdapterFormat.read_adapter(path)


def test_every_truncation_is_rejected_like_onnxruntime(ref, tmp_path):
    data = _small_adapter()
    path = tmp_path / "t.onnx_adapter"
    for size in range(len(data)):
        path.write_bytes(data[:size])
        rejected = _ref_rejects(ref, path)
        try:
            AdapterFormat.read_adapter(path)
        except InvalidAdapter as exc:
            assert str(path) in str(exc)
            assert rejected, f"onnxruntime reads the first {size} bytes but onyxrt does not: {exc}"
        else:
            assert not rejected, f"onyxrt reads the first {size} of {len(data)} bytes, onnxruntime does not"


def test_random_corruption_ends_in_a_typed_error_or_the_same_contents_as_onnxruntime(ref, tmp_path):
    base = _small_adapter()
    rng = np.random.default_rng(20240611)
    path = tmp_path / "m.onnx_adapter"
    accepted = 0
    start = time.perf_counter()
    for _ in range(600):
        data = bytearray(base)
        kind = rng.integers(3)
        at = int(rng.integers(len(data)))
        if kind == 0:  # overwrite a few bytes
            for _ in range(int(rng.integers(1, 4))):
                data[int(rng.integers(len(data)))] = int(rng.integers(256))
        elif kind == 1:  # delete a run of bytes
            del data[at : at + int(rng.integers(1, 9))]
        else:  # insert random bytes
            data[at:at] = rng.integers(0, 256, int(rng.integers(1, 9))).astype(np.uint8).tobytes()
        path.write_bytes(data)
        try:
            theirs = ref.AdapterFormat.read_adapter(str(path))
        except (RuntimeError, UnicodeDecodeError):
            theirs = None
        try:
            ours = decode_adapter(bytearray(data), "mutant")
        except InvalidAdapter as exc:
            # onyxrt refuses what onnxruntime refuses, plus duplicate names and shapes
            # numpy cannot represent.
            assert theirs is None or "appears twice" in str(exc) or "too large" in str(exc), str(exc)
            continue
        assert theirs is not None, "onyxrt read a file onnxruntime refuses"
        accepted += 1
        assert (ours.adapter_version, ours.model_version) == (
            theirs.get_adapter_version(), theirs.get_model_version())
        their_params = theirs.get_parameters()
        assert sorted(ours.parameters) == sorted(their_params)
        for name, array in ours.parameters.items():
            assert list(array.shape) == their_params[name].shape()
            if array.dtype.kind in "iuf" and array.dtype.name in DTYPES:
                np.testing.assert_array_equal(_bits(array), _bits(their_params[name].numpy()))
    assert accepted > 20  # flips inside tensor data leave a readable file
    assert time.perf_counter() - start < 10


@pytest.mark.parametrize("patch", ["vector length 2**32-1", "offset to itself", "offset 2**31",
                                   "dims product overflows"])
def test_hostile_lengths_fail_fast_without_allocating(tmp_path, patch):
    data = bytearray(_small_adapter())
    params_field = _root_field(data, 3)
    params_vector = params_field + struct.unpack_from("<I", data, params_field)[0]
    if patch == "vector length 2**32-1":
        struct.pack_into("<I", data, params_vector, 2**32 - 1)
    elif patch == "offset to itself":
        struct.pack_into("<I", data, params_field, 0)
    elif patch == "offset 2**31":
        struct.pack_into("<I", data, params_field, 2**31)
    else:  # the int64 dimension 3 of lora_A becomes 2**62
        dims = data.find(struct.pack("<qq", 3, 4))
        struct.pack_into("<q", data, dims, 2**62)
    start = time.perf_counter()
    with pytest.raises(InvalidAdapter):
        decode_adapter(data)
    assert time.perf_counter() - start < 0.5
