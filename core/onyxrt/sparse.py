"""Sparse tensors: onnxruntime's ``SparseTensor``, its format enum ``OrtSparseFormat`` and
its index views (``SparseCooView``, ``SparseCsrView``, ``SparseBlockSparseView``).

A sparse tensor is a dense shape, the non-zero values and the indices that place them:

* COO: ``indices`` are one linear index per value (shape ``[nnz]``) or one
  ``(row, col)`` pair per value (shape ``[nnz, 2]``, 2-D tensors);
* CSR(C): ``inner`` holds each value's column, ``outer`` each row's start in ``values``
  (``rows + 1`` entries), 2-D tensors only;
* block-sparse: blocks of values and ``int32`` block coordinates (``[2, blocks]``).

Numeric arrays are kept as given (no copy when they are contiguous), as onnxruntime keeps
them; strings are copied. onyxrt checks more than onnxruntime does when a tensor is built
(indices inside the dense shape, CSR row pointers that add up), because a bad index
otherwise only shows up later as a wrong result.

The sparse tensors of a model (sparse initializers, a Constant's ``sparse_value``, sparse
graph outputs) go through the same COO rule (:mod:`onyxrt.sparse_coo`,
:func:`coo_linear_indices`): an index outside the dense shape is an error naming the
tensor and the index, as in onnxruntime, while unsorted and repeated indices are accepted
(the last value given for a position wins).

Example::

    dense_shape = [2, 4]
    st = SparseTensor.sparse_coo_from_numpy(dense_shape, np.array([1.0, 2.0], np.float32),
                                            np.array([1, 6]), OrtDevice.make("cpu", 0))
    st.to_dense()  # [[0, 1, 0, 0], [0, 0, 2, 0]]
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .discovery import catalog
from .dtypes import onnx_elem_type, type_string
from .errors import (
    InvalidArgument,
    InvalidSparseTensor,
    ProviderUnavailable,
)
from .limits import check_allocation
from .memory_info import OrtDevice
from .ortvalue import OrtValue, SparseValue
from .records import record
from .sparse_coo import (
    _first_outside,
    canonical_coo,
    coo_linear_indices,
    coo_to_dense,
    dense_from_proto,
)

__all__ = [
    "InvalidSparseTensor",
    "OrtSparseFormat",
    "SparseBlockSparseView",
    "SparseCooView",
    "SparseCsrView",
    "SparseTensor",
    "canonical_coo",
    "coo_linear_indices",
    "coo_to_dense",
    "dense_from_proto",
]


class OrtSparseFormat(enum.IntEnum):
    """How a sparse tensor stores its indices (onnxruntime's numbers)."""

    ORT_SPARSE_UNDEFINED = 0
    ORT_SPARSE_COO = 1
    ORT_SPARSE_CSRC = 2
    ORT_SPARSE_BLOCK_SPARSE = 4

    def __str__(self) -> str:
        return f"OrtSparseFormat.{self.name}"  # as onnxruntime prints it


def _readonly(array: np.ndarray) -> np.ndarray:
    view = array.view()
    view.flags.writeable = False
    return view


@record(frozen=True)
class _Buffer:
    """One array of a sparse tensor: a host array, or a copy on a device (an ``OrtValue``)
    with the shape and dtype it was copied with."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    host: np.ndarray | None = None
    device_value: OrtValue | None = None

    @staticmethod
    def of(array: np.ndarray) -> _Buffer:
        return _Buffer(tuple(array.shape), array.dtype, host=array)

    def numpy(self) -> np.ndarray:
        """The array on the host (a copy when it lives on a device)."""
        if self.host is not None:
            return self.host
        assert self.device_value is not None
        return np.asarray(self.device_value.numpy())

    def copy_to(self, device_name: str, device_id: int) -> _Buffer:
        value = OrtValue.ortvalue_from_numpy(self.numpy(), device_name, device_id)
        return _Buffer(self.shape, self.dtype, device_value=value)


class SparseCooView:
    """The COO indices of a sparse tensor (from :meth:`SparseTensor.as_coo_view`)."""

    def __init__(self, indices: _Buffer) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        """int64 indices: ``[nnz]`` linear indices or ``[nnz, 2]`` coordinates
        (read-only; a host copy when the tensor lives on a device)."""
        return _readonly(self._indices.numpy())


class SparseCsrView:
    """The CSR(C) indices of a sparse tensor (from :meth:`SparseTensor.as_csrc_view`)."""

    def __init__(self, inner: _Buffer, outer: _Buffer) -> None:
        self._inner = inner
        self._outer = outer

    def inner(self) -> np.ndarray:
        """int64 column index of each value (read-only)."""
        return _readonly(self._inner.numpy())

    def outer(self) -> np.ndarray:
        """int64 start of each row in the values, plus the end (``rows + 1`` entries;
        empty for a tensor with no values; read-only)."""
        return _readonly(self._outer.numpy())


class SparseBlockSparseView:
    """The block coordinates of a block-sparse tensor (from
    :meth:`SparseTensor.as_blocksparse_view`)."""

    def __init__(self, indices: _Buffer) -> None:
        self._indices = indices

    def indices(self) -> np.ndarray:
        """int32 block coordinates, shape ``[2, blocks]`` (read-only)."""
        return _readonly(self._indices.numpy())


def _as_device(ort_device: Any) -> OrtDevice:
    """An :class:`OrtDevice` from one, from an object with its methods (onnxruntime's
    ``OrtDevice``), or the CPU for None."""
    if ort_device is None:
        return OrtDevice.make("cpu", 0)
    if isinstance(ort_device, OrtDevice):
        return ort_device
    try:
        return OrtDevice(int(ort_device.device_type()), 0, int(ort_device.device_vendor_id()),
                         int(ort_device.device_id()))
    except (AttributeError, TypeError, ValueError):
        raise InvalidArgument(
            f"ort_device must be an OrtDevice, e.g. OrtDevice.make('cpu', 0); got "
            f"{type(ort_device).__name__} {ort_device!r}"
        ) from None


def _dense_shape(dense_shape: Any) -> tuple[int, ...]:
    shape = np.asarray(dense_shape)
    if shape.ndim != 1 or (shape.size and shape.dtype.kind not in "iu"):
        raise InvalidSparseTensor(
            f"dense_shape must be a 1-D list of integers, got {dense_shape!r}"
        )
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise InvalidSparseTensor(f"dense_shape {list(dims)} has a negative dimension")
    return dims


def _values(values: Any, rank: int | None, what: str) -> np.ndarray:
    """The values as a contiguous array (strings as an object array of str); ``rank``
    None means any rank."""
    array = np.asarray(values)
    if rank is not None and array.ndim != rank:
        raise InvalidSparseTensor(
            f"{what} must be a 1-D array of the non-zero values, got shape {list(array.shape)}"
        )
    if array.dtype.kind in "USO":
        try:
            text = [v.decode("utf-8") if isinstance(v, bytes) else v for v in array.ravel().tolist()]
        except UnicodeDecodeError:
            raise InvalidSparseTensor(f"{what} holds bytes that are not UTF-8") from None
        if not all(isinstance(v, str) for v in text):
            raise InvalidSparseTensor(
                f"{what} is an object array with non-string items; sparse values are "
                "numbers or strings"
            )
        strings = np.empty(len(text), dtype=object)
        strings[:] = text
        return strings.reshape(array.shape)
    try:
        onnx_elem_type(array.dtype)
    except TypeError:
        raise InvalidSparseTensor(f"{what} has dtype {array.dtype}, which has no ONNX element type") from None
    return np.ascontiguousarray(array)


def _indices(indices: Any, what: str, dtype: type = np.int64) -> np.ndarray:
    array = np.asarray(indices)
    if array.size and array.dtype.kind not in "iu":
        raise InvalidSparseTensor(f"{what} must hold integers ({np.dtype(dtype).name}), got {array.dtype}")
    if array.size and np.dtype(dtype) == np.int32 and (
        array.min() < np.iinfo(np.int32).min or array.max() > np.iinfo(np.int32).max
    ):
        raise InvalidSparseTensor(f"{what} does not fit int32")
    if array.dtype.kind == "u" and array.size and array.max() > np.iinfo(np.int64).max:
        raise InvalidSparseTensor(f"{what} does not fit int64")
    return np.ascontiguousarray(array, dtype=dtype)


def _check_range(name: str, index: np.ndarray, limit: int, axis: str) -> None:
    pos = _first_outside(index, limit)
    if pos is not None:
        raise InvalidSparseTensor(
            f"{name} holds {int(index[pos])}, outside 0..{limit - 1} ({axis}), at position "
            f"{pos}; every index must fall inside dense_shape"
        )


_VIEW_OF_FORMAT = {
    OrtSparseFormat.ORT_SPARSE_COO: "as_coo_view()",
    OrtSparseFormat.ORT_SPARSE_CSRC: "as_csrc_view()",
    OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE: "as_blocksparse_view()",
}


class SparseTensor(SparseValue):
    """A sparse tensor: dense shape, non-zero values, indices and the device holding them.

    Build one with :meth:`sparse_coo_from_numpy`, :meth:`sparse_csr_from_numpy`,
    :meth:`blocksparse_from_numpy` or :meth:`from_dense`; the constructor is internal.
    """

    def __init__(
        self,
        format: OrtSparseFormat,
        dense_shape: Sequence[int],
        values: np.ndarray | _Buffer,
        indices: Sequence[np.ndarray | _Buffer],
        device: OrtDevice | None = None,
    ) -> None:
        self._format = OrtSparseFormat(format)
        self._dense_shape = tuple(int(d) for d in dense_shape)
        self._values = values if isinstance(values, _Buffer) else _Buffer.of(values)
        self._indices = tuple(i if isinstance(i, _Buffer) else _Buffer.of(i) for i in indices)
        self._device = device if device is not None else OrtDevice.make("cpu", 0)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def _build(
        cls,
        fmt: OrtSparseFormat,
        shape: tuple[int, ...],
        values: np.ndarray,
        indices: Sequence[np.ndarray],
        ort_device: Any,
    ) -> SparseTensor:
        device = _as_device(ort_device)
        if device.device_type() == OrtDevice.cpu():
            return cls(fmt, shape, values, indices, device)
        if values.dtype.kind == "O":
            raise InvalidSparseTensor(
                f"string values can only live on the CPU, not on {device.name}; build the "
                "tensor with OrtDevice.make('cpu', 0)"
            )
        return cls(fmt, shape, values, indices)._copy_to(device)

    @classmethod
    def sparse_coo_from_numpy(
        cls, dense_shape: Any, values: Any, coo_indices: Any, ort_device: Any = None
    ) -> SparseTensor:
        """A COO tensor of ``dense_shape`` from 1-D ``values`` and int64 ``coo_indices``.

        ``coo_indices`` holds one linear index per value, or one (row, col) pair per value
        (``[nnz, 2]``, or flat with twice as many entries as values) for a 2-D tensor.
        ``ort_device`` (default: the CPU) is where the tensor lives; numeric arrays are
        used without a copy on the CPU.
        """
        shape = _dense_shape(dense_shape)
        vals = _values(values, 1, "values")
        idx = _indices(coo_indices, "coo_indices")
        nnz = vals.size
        if idx.size == 2 * nnz:  # pairs (an empty tensor counts as pairs, as onnxruntime says)
            idx = idx.reshape(nnz, 2)
            if nnz and len(shape) != 2:
                raise InvalidSparseTensor(
                    f"coo_indices holds (row, col) pairs, which need a 2-D dense_shape; got "
                    f"{list(shape)}. Pass one linear index per value for other ranks"
                )
            if nnz:
                coo_linear_indices(idx, shape, nnz, "coo_indices")
        elif idx.size == nnz:
            idx = idx.reshape(nnz)
            coo_linear_indices(idx, shape, nnz, "coo_indices")
        else:
            raise InvalidSparseTensor(
                f"coo_indices has {idx.size} entries for {nnz} values; give one linear index "
                f"per value ({nnz}) or one (row, col) pair per value ({2 * nnz})"
            )
        return cls._build(OrtSparseFormat.ORT_SPARSE_COO, shape, vals, [idx], ort_device)

    @classmethod
    def sparse_csr_from_numpy(
        cls,
        dense_shape: Any,
        values: Any,
        inner_indices: Any,
        outer_indices: Any,
        ort_device: Any = None,
    ) -> SparseTensor:
        """A CSR tensor of 2-D ``dense_shape`` (rows, cols) from 1-D ``values``, their
        column indices ``inner_indices`` and the row starts ``outer_indices`` (``rows + 1``
        entries, ending with the number of values; both empty when there are no values).
        """
        shape = _dense_shape(dense_shape)
        vals = _values(values, None, "values")
        inner = _indices(inner_indices, "inner_indices")
        outer = _indices(outer_indices, "outer_indices")
        if vals.ndim != 1 or inner.ndim != 1 or outer.ndim != 1:
            raise InvalidSparseTensor(
                "values, inner_indices and outer_indices must all be 1-D for CSR, got shapes "
                f"{list(vals.shape)}, {list(inner.shape)}, {list(outer.shape)}"
            )
        if len(shape) != 2:
            raise InvalidSparseTensor(f"CSR needs a 2-D dense_shape (rows, cols), got {list(shape)}")
        rows, cols = shape
        if inner.size != vals.size:
            raise InvalidSparseTensor(
                f"inner_indices has {inner.size} entries for {vals.size} values; give one "
                "column index per value"
            )
        if outer.size not in (0, rows + 1):
            raise InvalidSparseTensor(
                f"outer_indices has {outer.size} entries; a CSR tensor with {rows} rows needs "
                f"{rows + 1} (or none when there are no values)"
            )
        if (inner.size == 0) != (outer.size == 0):
            raise InvalidSparseTensor(
                "inner_indices and outer_indices must both be empty (no values) or both "
                f"non-empty; got {inner.size} and {outer.size} entries"
            )
        if outer.size:
            if outer[0] != 0 or outer[-1] != vals.size or np.any(np.diff(outer) < 0):
                raise InvalidSparseTensor(
                    f"outer_indices {outer.tolist()[:12]} must start at 0, never decrease and "
                    f"end at the number of values ({vals.size})"
                )
            _check_range("inner_indices", inner, cols, "columns")
        return cls._build(OrtSparseFormat.ORT_SPARSE_CSRC, shape, vals, [inner, outer], ort_device)

    @classmethod
    def blocksparse_from_numpy(
        cls, dense_shape: Any, values: Any, indices: Any, ort_device: Any = None
    ) -> SparseTensor:
        """A block-sparse tensor: ``values`` at least 3-D, int32 ``indices`` of shape
        ``[2, blocks]`` with as many blocks as ``values.shape[2:]`` holds (onnxruntime's
        rule); a tensor with no values takes shape ``[0]`` values and ``[0]`` indices.

        onnxruntime has this factory on its C class only
        (``C.SparseTensor.blocksparse_from_numpy``).
        """
        shape = _dense_shape(dense_shape)
        vals = _values(values, None, "values")
        idx = _indices(indices, "indices", np.int32)
        if vals.size:
            if vals.ndim < 3:
                raise InvalidSparseTensor(f"block-sparse values must be at least 3-D, got shape {list(vals.shape)}")
            if idx.ndim != 2 or idx.shape[0] != 2:
                raise InvalidSparseTensor(f"block-sparse indices must have shape [2, blocks], got {list(idx.shape)}")
            blocks = math.prod(vals.shape[2:])
            if idx.shape[1] != blocks:
                raise InvalidSparseTensor(
                    f"indices name {idx.shape[1]} blocks but values {list(vals.shape)} hold {blocks}"
                )
        elif vals.ndim != 1 or idx.ndim != 1 or idx.size:
            raise InvalidSparseTensor(
                "a block-sparse tensor with no values takes values of shape [0] and indices "
                f"of shape [0], got {list(vals.shape)} and {list(idx.shape)}"
            )
        return cls._build(OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE, shape, vals, [idx], ort_device)

    @classmethod
    def from_dense(
        cls,
        array: Any,
        format: OrtSparseFormat = OrtSparseFormat.ORT_SPARSE_COO,
        ort_device: Any = None,
    ) -> SparseTensor:
        """The sparse form of ``array`` (zeros, and empty strings, left out): COO with
        linear indices, or CSR for a 2-D array. An onyxrt addition."""
        dense = np.asarray(array)
        text = dense.dtype.kind in "USO"
        flat = _values(dense.ravel(), 1, "array")
        mask = flat != "" if text else flat != 0
        positions = np.flatnonzero(mask).astype(np.int64)
        values = flat[positions]
        fmt = OrtSparseFormat(format)
        if fmt == OrtSparseFormat.ORT_SPARSE_COO:
            return cls.sparse_coo_from_numpy(dense.shape, values, positions, ort_device)
        if fmt == OrtSparseFormat.ORT_SPARSE_CSRC:
            if dense.ndim != 2:
                raise InvalidSparseTensor(f"CSR needs a 2-D array, got shape {list(dense.shape)}")
            if not values.size:
                return cls.sparse_csr_from_numpy(dense.shape, values, positions, positions, ort_device)
            rows, cols = dense.shape
            outer = np.zeros(rows + 1, dtype=np.int64)
            np.cumsum(np.count_nonzero(mask.reshape(rows, cols), axis=1), out=outer[1:])
            return cls.sparse_csr_from_numpy(dense.shape, values, positions % cols, outer, ort_device)
        raise InvalidSparseTensor(f"from_dense builds COO or CSRC tensors, not {fmt.name}")

    # -- inspection --------------------------------------------------------------------
    def format(self) -> OrtSparseFormat:
        """The storage format (``OrtSparseFormat.ORT_SPARSE_COO``...)."""
        return self._format

    def dense_shape(self) -> list[int]:
        """The shape of the dense tensor, as a list of ints."""
        return list(self._dense_shape)

    def values(self) -> np.ndarray:
        """The non-zero values (read-only; the array given when built, on the CPU; a host
        copy when the tensor lives on a device; strings as an object array)."""
        return _readonly(self._values.numpy())

    def data_type(self) -> str:
        """onnxruntime's type string, e.g. ``'sparse_tensor(float)'``."""
        dtype = self._values.dtype
        return "sparse_" + type_string(onnx_elem_type(dtype))

    def device_name(self) -> str:
        """Where the arrays live: ``"cpu"``, ``"cuda"``..."""
        return self._device.name

    def _wrong_format(self, wanted: str) -> InvalidSparseTensor:
        own = _VIEW_OF_FORMAT.get(self._format, "no view")
        return InvalidSparseTensor(
            f"this sparse tensor does not contain {wanted} format (it is "
            f"{self._format.name}); use the view of its own format, {own}"
        )

    def as_coo_view(self) -> SparseCooView:
        """The COO indices (raises for another format)."""
        if self._format != OrtSparseFormat.ORT_SPARSE_COO:
            raise self._wrong_format("COO")
        return SparseCooView(self._indices[0])

    def as_csrc_view(self) -> SparseCsrView:
        """The CSR(C) inner and outer indices (raises for another format)."""
        if self._format != OrtSparseFormat.ORT_SPARSE_CSRC:
            raise self._wrong_format("CSR(C)")
        return SparseCsrView(self._indices[0], self._indices[1])

    def as_blocksparse_view(self) -> SparseBlockSparseView:
        """The block-sparse indices (raises for another format)."""
        if self._format != OrtSparseFormat.ORT_SPARSE_BLOCK_SPARSE:
            raise self._wrong_format("BlockSparse")
        return SparseBlockSparseView(self._indices[0])

    # -- conversion --------------------------------------------------------------------
    def _copy_to(self, device: OrtDevice) -> SparseTensor:
        name, device_id = device.name, device.device_id()
        values = self._values.copy_to(name, device_id)
        indices = [i.copy_to(name, device_id) for i in self._indices]
        return SparseTensor(self._format, self._dense_shape, values, indices, device)

    def to_cuda(self, ort_device: Any) -> SparseTensor:
        """A copy of this CPU tensor on the CUDA device ``ort_device``
        (``OrtDevice.make("cuda", 0)``).

        Raises :class:`~onyxrt.errors.ProviderUnavailable` when no usable CUDA provider is
        installed, and :class:`InvalidSparseTensor` for string values or a tensor already
        on a GPU.
        """
        device = _as_device(ort_device)
        if device.device_type() != OrtDevice.gpu():
            raise InvalidSparseTensor(
                f"to_cuda needs a CUDA device such as OrtDevice.make('cuda', 0), got {device!r}"
            )
        if self._values.dtype.kind == "O":
            raise InvalidSparseTensor("cannot copy a string sparse tensor to a GPU; strings stay on the CPU")
        if self._device.device_type() != OrtDevice.cpu():
            raise InvalidSparseTensor(
                f"this sparse tensor is already on {self._device.name}; cross-device copies are "
                "not supported, build it again on the CPU first"
            )
        available = catalog().available()
        if "CUDAExecutionProvider" not in available:
            raise ProviderUnavailable(
                "to_cuda: CUDAExecutionProvider is not usable here (usable providers: "
                f"{', '.join(available)}); install onyxrt-cuda on a machine with an NVIDIA GPU "
                "and run `onyxrt providers` to see why it is not usable",
                provider="CUDAExecutionProvider",
            )
        return self._copy_to(OrtDevice.make("cuda", device.device_id()))

    def to_dense(self) -> np.ndarray:
        """The dense host array (an onyxrt addition; COO and CSR(C) tensors). Positions
        without a value hold 0 (an empty string for strings); a position given twice is
        an error."""
        if self._format not in (OrtSparseFormat.ORT_SPARSE_COO, OrtSparseFormat.ORT_SPARSE_CSRC):
            raise InvalidSparseTensor(
                f"to_dense supports COO and CSR(C) tensors, not {self._format.name}"
            )
        values = self._values.numpy()
        shape = self._dense_shape
        check_allocation(shape, values.dtype, "SparseTensor.to_dense()")
        if self._format == OrtSparseFormat.ORT_SPARSE_COO:
            linear = coo_linear_indices(self._indices[0].numpy(), shape, values.size, "coo_indices")
        else:
            inner, outer = (i.numpy() for i in self._indices)
            rows = np.repeat(np.arange(shape[0], dtype=np.int64), np.diff(outer)) if outer.size else inner
            linear = rows * shape[1] + inner
        # Stricter than a sparse initializer (where the last value wins, as in
        # onnxruntime): a tensor built here with a position given twice is a caller's bug.
        if linear.size and np.unique(linear).size != linear.size:
            raise InvalidSparseTensor(
                "to_dense: an index appears more than once, so the dense value there is "
                "ambiguous; give each position one value"
            )
        return coo_to_dense(values, linear, shape)

    def __repr__(self) -> str:
        dtype = self.data_type()[len("sparse_tensor(") : -1]
        kind = self._format.name[len("ORT_SPARSE_") :]
        nnz = math.prod(self._values.shape)
        return (f"SparseTensor({kind}, {dtype}, dense_shape={list(self._dense_shape)}, "
                f"nnz={nnz}, {self.device_name()})")
