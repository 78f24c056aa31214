"""Sparse tensors (``onyxrt.sparse``) behave as onnxruntime's ``SparseTensor`` where it
supports the case: the same formats, type strings, shapes, values and indices, zero-copy
read-only arrays, and an error for the same bad input. Where onnxruntime accepts indices
outside the dense shape, onyxrt refuses them with a typed error naming the index.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from onyxrt.discovery import ProviderCatalog
from onyxrt.errors import InvalidArgument, ProviderUnavailable, ResourceLimitExceeded
from onyxrt.memory_info import OrtDevice
from onyxrt.ortvalue import OrtValue
from onyxrt.sparse import (
    InvalidSparseTensor,
    OrtSparseFormat,
    SparseBlockSparseView,
    SparseCooView,
    SparseCsrView,
    SparseTensor,
)

CPU = OrtDevice.make("cpu", 0)
# Value dtypes onnxruntime's SparseTensor.values() can return.
NUMERIC = [np.float32, np.float64, np.int8, np.uint8, np.int16, np.uint16, np.int32,
           np.uint32, np.int64, np.uint64]


@pytest.fixture(scope="module")
def ref():
    """onnxruntime, the oracle."""
    return pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def ref_cpu(ref):
    return ref.OrtDevice.make("cpu", 0)


def _same(ours: SparseTensor, theirs) -> None:
    """Everything a user can read off both tensors agrees."""
    assert int(ours.format()) == int(theirs.format())
    assert str(ours.format()) == str(theirs.format())
    assert ours.data_type() == theirs.data_type()
    assert ours.dense_shape() == theirs.dense_shape()
    assert all(type(d) is int for d in ours.dense_shape())
    assert ours.device_name() == theirs.device_name()
    ov, tv = ours.values(), theirs.values()
    assert ov.dtype == tv.dtype and ov.shape == tv.shape
    np.testing.assert_array_equal(ov, tv)


def _same_array(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
    np.testing.assert_array_equal(ours, theirs)


# -- what onnxruntime supports: the same answers ------------------------------------------


def test_format_enum_has_onnxruntimes_names_and_numbers(ref):
    theirs = {name: int(member) for name, member in ref.OrtSparseFormat.__members__.items()}
    assert {m.name: int(m) for m in OrtSparseFormat} == theirs


@pytest.mark.parametrize("dtype", NUMERIC)
def test_coo_with_linear_indices_matches_onnxruntime(ref, ref_cpu, dtype):
    values = np.array([1, 2, 3], dtype=dtype)
    indices = np.array([1, 5, 7], np.int64)
    ours = SparseTensor.sparse_coo_from_numpy([2, 4], values, indices, CPU)
    theirs = ref.SparseTensor.sparse_coo_from_numpy([2, 4], values, indices, ref_cpu)
    _same(ours, theirs)
    _same_array(ours.as_coo_view().indices(), theirs.as_coo_view().indices())
    assert isinstance(ours.as_coo_view(), SparseCooView)


@pytest.mark.parametrize(
    "indices",
    [np.array([[0, 1], [1, 1], [1, 3]]), np.array([0, 1, 1, 1, 1, 3]), np.array([[0, 1, 1, 1, 1, 3]])],
    ids=["pairs", "flat pairs", "one row of pairs"],
)
def test_coo_with_coordinate_pairs_matches_onnxruntime(ref, ref_cpu, indices):
    values = np.array([1.5, 2.5, 3.5], np.float32)
    ours = SparseTensor.sparse_coo_from_numpy(np.array([2, 4]), values, indices, CPU)
    theirs = ref.SparseTensor.sparse_coo_from_numpy(np.array([2, 4]), values, indices, ref_cpu)
    _same(ours, theirs)
    _same_array(ours.as_coo_view().indices(), theirs.as_coo_view().indices())
    assert ours.as_coo_view().indices().shape == (3, 2)


@pytest.mark.parametrize("shape", [[2, 4], [5], [3, 2, 2]])
def test_coo_without_values_matches_onnxruntime(ref, ref_cpu, shape):
    empty_values, empty_indices = np.zeros(0, np.float32), np.zeros(0, np.int64)
    ours = SparseTensor.sparse_coo_from_numpy(shape, empty_values, empty_indices, CPU)
    theirs = ref.SparseTensor.sparse_coo_from_numpy(shape, empty_values, empty_indices, ref_cpu)
    _same(ours, theirs)
    _same_array(ours.as_coo_view().indices(), theirs.as_coo_view().indices())  # shape (0, 2)
    np.testing.assert_array_equal(ours.to_dense(), np.zeros(shape, np.float32))


@pytest.mark.parametrize("dtype", NUMERIC)
def test_csr_matches_onnxruntime(ref, ref_cpu, dtype):
    values = np.array([1, 2, 3], dtype=dtype)
    inner, outer = np.array([1, 1, 3]), np.array([0, 1, 3])
    ours = SparseTensor.sparse_csr_from_numpy([2, 4], values, inner, outer, CPU)
    theirs = ref.SparseTensor.sparse_csr_from_numpy([2, 4], values, inner, outer, ref_cpu)
    _same(ours, theirs)
    view, their_view = ours.as_csrc_view(), theirs.as_csrc_view()
    assert isinstance(view, SparseCsrView)
    _same_array(view.inner(), their_view.inner())
    _same_array(view.outer(), their_view.outer())


def test_csr_without_values_matches_onnxruntime(ref, ref_cpu):
    nothing = np.zeros(0, np.int64)
    ours = SparseTensor.sparse_csr_from_numpy([3, 3], np.zeros(0, np.float32), nothing, nothing, CPU)
    theirs = ref.SparseTensor.sparse_csr_from_numpy([3, 3], np.zeros(0, np.float32), nothing, nothing, ref_cpu)
    _same(ours, theirs)
    _same_array(ours.as_csrc_view().outer(), theirs.as_csrc_view().outer())
    np.testing.assert_array_equal(ours.to_dense(), np.zeros((3, 3), np.float32))


@pytest.mark.parametrize("values", [np.array(["a", "bb", "ccc"]), np.array([b"a", b"bb", b"ccc"])],
                         ids=["str", "bytes"])
def test_string_values_are_copied_to_python_strings(ref, ref_cpu, values):
    ours = SparseTensor.sparse_coo_from_numpy([2, 3], values, [0, 2, 4], CPU)
    assert ours.data_type() == "sparse_tensor(string)"
    assert ours.values().dtype == object
    assert list(ours.values()) == ["a", "bb", "ccc"]
    np.testing.assert_array_equal(ours.to_dense(), [["a", "", "bb"], ["", "ccc", ""]])
    if values.dtype.kind == "U":  # onnxruntime returns garbage for bytes values
        theirs = ref.SparseTensor.sparse_coo_from_numpy([2, 3], values, np.array([0, 2, 4]), ref_cpu)
        _same(ours, theirs)


def test_numeric_arrays_are_shared_and_read_only_as_in_onnxruntime(ref, ref_cpu):
    values = np.array([1, 2, 3], np.float32)
    indices = np.array([0, 2, 5], np.int64)
    ours = SparseTensor.sparse_coo_from_numpy([2, 3], values, indices, CPU)
    theirs = ref.SparseTensor.sparse_coo_from_numpy([2, 3], values, indices, ref_cpu)
    for mine, other in ((ours.values(), theirs.values()),
                        (ours.as_coo_view().indices(), theirs.as_coo_view().indices())):
        assert mine.flags.writeable == other.flags.writeable is False
    assert np.shares_memory(ours.values(), values) and np.shares_memory(theirs.values(), values)
    assert np.shares_memory(ours.as_coo_view().indices(), indices)
    values[0] = 9  # the tensor sees the caller's later writes, as onnxruntime's does
    assert ours.values()[0] == theirs.values()[0] == 9


def test_blocksparse_matches_onnxruntimes_c_factory(ref, ref_cpu):
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    values = np.arange(8, dtype=np.float32).reshape(2, 2, 2)
    indices = np.array([[0, 1], [1, 0]], np.int32)
    ours = SparseTensor.blocksparse_from_numpy([4, 4], values, indices, CPU)
    theirs = ref.SparseTensor(C.SparseTensor.blocksparse_from_numpy([4, 4], values, indices, ref_cpu._get_c_device()))
    _same(ours, theirs)
    view = ours.as_blocksparse_view()
    assert isinstance(view, SparseBlockSparseView)
    # onnxruntime 1.31's view reads these int32 indices as int64 and raises; onyxrt returns them.
    _same_array(view.indices(), indices)


@pytest.mark.parametrize(
    "values, indices",
    [(np.zeros((2, 2), np.float32), np.zeros((2, 2), np.int32)),
     (np.zeros((2, 2, 2), np.float32), np.zeros(2, np.int32)),
     (np.zeros((2, 2, 2), np.float32), np.zeros((3, 2), np.int32)),
     (np.zeros((2, 2, 2), np.float32), np.zeros((2, 3), np.int32)),
     (np.zeros((0, 2, 2), np.float32), np.zeros((2, 0), np.int32))],
    ids=["2-D values", "1-D indices", "3 index rows", "block count", "empty not [0]"],
)
def test_blocksparse_shape_errors_match_onnxruntime(ref, ref_cpu, values, indices):
    from onnxruntime.capi import onnxruntime_pybind11_state as C

    with pytest.raises(RuntimeError):
        C.SparseTensor.blocksparse_from_numpy([4, 4], values, indices, ref_cpu._get_c_device())
    with pytest.raises(InvalidSparseTensor):
        SparseTensor.blocksparse_from_numpy([4, 4], values, indices, CPU)


def test_asking_for_another_formats_view_raises_like_onnxruntime(ref, ref_cpu):
    args = ([2, 4], np.array([1, 2], np.float32), np.array([1, 2]))
    ours = SparseTensor.sparse_coo_from_numpy(*args, CPU)
    theirs = ref.SparseTensor.sparse_coo_from_numpy(*args, ref_cpu)
    for view in ("as_csrc_view", "as_blocksparse_view"):
        with pytest.raises(RuntimeError):
            getattr(theirs, view)()
        with pytest.raises(InvalidSparseTensor, match="as_coo_view") as err:
            getattr(ours, view)()
        assert isinstance(err.value, RuntimeError) and isinstance(err.value, InvalidArgument)
    csr = SparseTensor.sparse_csr_from_numpy([2, 4], np.array([1.0]), [0], [0, 1, 1], CPU)
    with pytest.raises(InvalidSparseTensor, match="does not contain COO.*as_csrc_view"):
        csr.as_coo_view()


BAD_COO = {
    "fewer indices than values": ([2, 4], np.array([1, 2, 3], np.float32), np.array([1, 2])),
    "2-D indices with 3 columns": ([2, 4], np.array([1, 2, 3], np.float32), np.zeros((3, 3), np.int64)),
    "2-D values": ([2, 4], np.ones((3, 1), np.float32), np.array([1, 2, 3])),
}
BAD_CSR = {
    "inner shorter than values": ([2, 4], np.ones(3, np.float32), np.array([1, 1]), np.array([0, 1, 3])),
    "outer not rows + 1": ([2, 4], np.ones(3, np.float32), np.array([1, 1, 3]), np.array([0, 3])),
    "3-D dense shape": ([2, 2, 2], np.ones(3, np.float32), np.array([1, 1, 1]), np.array([0, 1, 3])),
    "1-D dense shape": ([8], np.ones(3, np.float32), np.array([1, 1, 3]), np.array([0, 1, 3])),
    "no values but outer": ([2, 4], np.zeros(0, np.float32), np.zeros(0, np.int64), np.zeros(3, np.int64)),
    "2-D inner": ([2, 4], np.ones(2, np.float32), np.zeros((2, 1), np.int64), np.array([0, 1, 2])),
}


@pytest.mark.parametrize("case", BAD_COO)
def test_bad_coo_input_is_refused_like_onnxruntime(ref, ref_cpu, case):
    shape, values, indices = BAD_COO[case]
    with pytest.raises(RuntimeError):
        ref.SparseTensor.sparse_coo_from_numpy(shape, values, indices, ref_cpu)
    with pytest.raises(InvalidSparseTensor):
        SparseTensor.sparse_coo_from_numpy(shape, values, indices, CPU)


@pytest.mark.parametrize("case", BAD_CSR)
def test_bad_csr_input_is_refused_like_onnxruntime(ref, ref_cpu, case):
    shape, values, inner, outer = BAD_CSR[case]
    with pytest.raises(RuntimeError):
        ref.SparseTensor.sparse_csr_from_numpy(shape, values, inner, outer, ref_cpu)
    with pytest.raises(InvalidSparseTensor):
        SparseTensor.sparse_csr_from_numpy(shape, values, inner, outer, CPU)


def test_length_mismatch_message_says_what_to_pass():
    with pytest.raises(InvalidSparseTensor, match=r"2 entries for 3 values.*\(3\).*\(6\)"):
        SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(3, np.float32), [1, 2], CPU)


# -- stricter than onnxruntime: indices must fall inside the dense shape --------------------


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda: SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(2), [1, 8], CPU), "holds 8, outside 0..7"),
        (lambda: SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(2), [-1, 2], CPU), "holds -1"),
        (lambda: SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(2), [[0, 1], [2, 0]], CPU), "rows"),
        (lambda: SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(2), [[0, 1], [1, 4]], CPU), "columns"),
        (lambda: SparseTensor.sparse_coo_from_numpy([2, 2, 2], np.ones(2), [[0, 1], [1, 1]], CPU), "2-D dense_shape"),
        (lambda: SparseTensor.sparse_coo_from_numpy([-2, 4], np.ones(2), [0, 1], CPU), "negative"),
        (lambda: SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(2), [0.5, 1.0], CPU), "integers"),
        (lambda: SparseTensor.sparse_csr_from_numpy([2, 4], np.ones(2), [0, 9], [0, 1, 2], CPU), "holds 9"),
        (lambda: SparseTensor.sparse_csr_from_numpy([2, 4], np.ones(2), [0, 1], [0, 2, 5], CPU), "end at the number of values"),
        (lambda: SparseTensor.sparse_csr_from_numpy([2, 4], np.ones(2), [0, 1], [0, 3, 2], CPU), "never decrease"),
    ],
    ids=["linear past the end", "negative", "row", "column", "pairs need 2-D", "negative dim",
         "float indices", "csr column", "csr outer end", "csr outer order"],
)
def test_indices_outside_the_dense_shape_are_refused(build, words):
    with pytest.raises(InvalidSparseTensor, match=words):
        build()


def test_onnxruntime_accepts_out_of_range_indices_that_onyxrt_refuses(ref, ref_cpu):
    # The reason for the checks above: onnxruntime builds this tensor without complaint.
    theirs = ref.SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(2, np.float32), np.array([1, 100]), ref_cpu)
    assert theirs.as_coo_view().indices().tolist() == [1, 100]


# -- onyxrt additions: dense conversion, more dtypes ---------------------------------------


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("fmt", [OrtSparseFormat.ORT_SPARSE_COO, OrtSparseFormat.ORT_SPARSE_CSRC])
def test_from_dense_and_to_dense_round_trip(seed, fmt):
    rng = np.random.default_rng(seed)
    dense = rng.standard_normal((5, 7)).astype(np.float32)
    dense[rng.random((5, 7)) < 0.7] = 0
    dense[2] = 0  # an empty row
    sparse = SparseTensor.from_dense(dense, fmt)
    assert sparse.format() == fmt
    assert sparse.values().size == np.count_nonzero(dense)
    np.testing.assert_array_equal(sparse.to_dense(), dense)


def test_to_dense_places_coo_pairs_and_csr_rows():
    coo = SparseTensor.sparse_coo_from_numpy([2, 3], np.array([5, 6], np.int32), [[1, 2], [0, 0]], CPU)
    np.testing.assert_array_equal(coo.to_dense(), [[6, 0, 0], [0, 0, 5]])
    csr = SparseTensor.sparse_csr_from_numpy([3, 2], np.array([1.0, 2.0]), [1, 0], [0, 1, 1, 2], CPU)
    np.testing.assert_array_equal(csr.to_dense(), [[0, 1], [0, 0], [2, 0]])
    assert csr.to_dense().dtype == np.float64


def test_to_dense_refuses_a_position_given_twice():
    st = SparseTensor.sparse_coo_from_numpy([4], np.array([1.0, 2.0]), [3, 3], CPU)
    with pytest.raises(InvalidSparseTensor, match="more than once"):
        st.to_dense()


def test_to_dense_of_a_huge_shape_fails_before_allocating():
    st = SparseTensor.sparse_coo_from_numpy([10**6, 10**6], np.ones(1, np.float32), [0], CPU)
    with pytest.raises(ResourceLimitExceeded, match="to_dense"):
        st.to_dense()


@pytest.mark.parametrize(
    "dtype, name",
    [(np.float16, "float16"), (ml_dtypes.bfloat16, "bfloat16"),
     (ml_dtypes.float8_e4m3fn, "float8e4m3fn"), (ml_dtypes.float8_e4m3fnuz, "float8e4m3fnuz"),
     (ml_dtypes.float8_e5m2, "float8e5m2"), (ml_dtypes.float8_e5m2fnuz, "float8e5m2fnuz"),
     (np.bool_, "bool"), (np.float64, "double")],
)
def test_ml_dtypes_values_have_onnx_type_strings(dtype, name):
    # onnxruntime refuses bfloat16/float8 values and cannot return float16/bool ones.
    values = np.array([1, 2], dtype=dtype)
    st = SparseTensor.sparse_coo_from_numpy([4], values, [0, 3], CPU)
    assert st.data_type() == f"sparse_tensor({name})"
    assert st.values().dtype == values.dtype
    dense = st.to_dense()
    assert dense.dtype == values.dtype
    expected = np.array([values[0], 0, 0, values[1]], dtype=dtype)
    np.testing.assert_array_equal(dense.astype(np.float32), expected.astype(np.float32))


def test_repr_names_format_type_shape_and_device():
    st = SparseTensor.sparse_coo_from_numpy([2, 4], np.ones(3, np.float32), [1, 2, 3], CPU)
    assert repr(st) == "SparseTensor(COO, float, dense_shape=[2, 4], nnz=3, cpu)"


# -- devices -------------------------------------------------------------------------------


def test_onnxruntimes_own_ortdevice_and_no_device_mean_the_cpu(ref_cpu):
    for device in (ref_cpu, None):
        st = SparseTensor.sparse_coo_from_numpy([3], np.ones(1, np.float32), [2], device)
        assert st.device_name() == "cpu"


def test_something_that_is_no_device_is_invalid_argument():
    with pytest.raises(InvalidArgument, match="OrtDevice.make"):
        SparseTensor.sparse_coo_from_numpy([3], np.ones(1, np.float32), [2], "cpu")


def test_to_cuda_without_a_cuda_provider_is_provider_unavailable(monkeypatch):
    monkeypatch.setattr(ProviderCatalog, "available", lambda self: ["CPUExecutionProvider"])
    st = SparseTensor.sparse_coo_from_numpy([3], np.ones(1, np.float32), [2], CPU)
    with pytest.raises(ProviderUnavailable, match="CUDAExecutionProvider") as err:
        st.to_cuda(OrtDevice.make("cuda", 0))
    assert "CPUExecutionProvider" in str(err.value)


def test_to_cuda_refuses_strings_and_a_cpu_target():
    strings = SparseTensor.sparse_coo_from_numpy([3], np.array(["x"]), [2], CPU)
    with pytest.raises(InvalidSparseTensor, match="string"):
        strings.to_cuda(OrtDevice.make("cuda", 0))
    numbers = SparseTensor.sparse_coo_from_numpy([3], np.ones(1, np.float32), [2], CPU)
    with pytest.raises(InvalidSparseTensor, match="CUDA device"):
        numbers.to_cuda(CPU)


def test_to_cuda_copies_every_array_to_the_device(monkeypatch):
    copies: list[tuple[str, int]] = []

    def fake_copy(array, device_type="cpu", device_id=0, *rest):
        copies.append((device_type, device_id))
        return OrtValue(np.array(array, copy=True))  # stands in for device memory

    monkeypatch.setattr(ProviderCatalog, "available",
                        lambda self: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(OrtValue, "ortvalue_from_numpy", staticmethod(fake_copy))
    cpu = SparseTensor.sparse_csr_from_numpy([2, 4], np.array([1, 2, 3], np.float32),
                                             [1, 1, 3], [0, 1, 3], CPU)
    gpu = cpu.to_cuda(OrtDevice.make("cuda", 1))
    assert copies == [("cuda", 1)] * 3  # values, inner, outer
    assert gpu.device_name() == "cuda" and cpu.device_name() == "cpu"
    assert gpu.data_type() == "sparse_tensor(float)" and gpu.format() == OrtSparseFormat.ORT_SPARSE_CSRC
    np.testing.assert_array_equal(gpu.values(), [1, 2, 3])
    np.testing.assert_array_equal(gpu.as_csrc_view().outer(), [0, 1, 3])
    np.testing.assert_array_equal(gpu.to_dense(), cpu.to_dense())
    with pytest.raises(InvalidSparseTensor, match="already on cuda"):
        gpu.to_cuda(OrtDevice.make("cuda", 0))
