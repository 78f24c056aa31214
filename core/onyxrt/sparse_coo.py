"""The COO rule every sparse tensor goes through: a model's sparse initializers and
``sparse_value`` constants (read with the graph), sparse graph outputs, and the tensors
users build with :class:`onyxrt.SparseTensor`.

An index outside the dense shape is an error naming the tensor and the index, as in
onnxruntime (numpy would wrap -1 round to the last element); unsorted and repeated
indices are accepted, and the last value given for a position wins. Below
:mod:`onyxrt.graph` in the layers: numpy arrays and protos in, numpy arrays out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import InvalidGraph, InvalidSparseTensor, OnyxError
from .limits import check_allocation

__all__ = ["canonical_coo", "coo_linear_indices", "coo_to_dense", "dense_from_proto"]


def _first_outside(index: np.ndarray, limit: int) -> int | None:
    """The position of the first entry of ``index`` outside ``0..limit-1`` (None if none)."""
    if not index.size:
        return None
    bad = (index < 0) | (index >= limit)
    return int(np.argmax(bad)) if bad.any() else None


def _axis_name(axis: int, rank: int) -> str:
    return ("rows", "columns")[axis] if rank == 2 else f"axis {axis}"


def coo_linear_indices(
    indices: Any,
    dense_shape: Sequence[int],
    nnz: int,
    what: str,
    error: type[OnyxError] = InvalidSparseTensor,
) -> np.ndarray:
    """The row-major linear index of each of ``nnz`` values placed by COO ``indices``.

    ``indices`` holds ``[nnz]`` linear indices, or ``[nnz, rank]`` coordinates (one
    column per axis of ``dense_shape``). Every index must fall inside ``dense_shape``;
    otherwise ``error`` is raised naming ``what``, the offending index and its position —
    as onnxruntime refuses a sparse initializer or a Constant's ``sparse_value`` (numpy
    would wrap -1 round to the last element). Unsorted and repeated indices are accepted,
    as onnxruntime accepts them (:func:`coo_to_dense` says what a repeat means), and so is
    anything placed in a dense shape without elements, where nothing is written.

    The one check behind every COO path: model weights (``InvalidGraph``), graph outputs
    and tensors built with :class:`SparseTensor` (:class:`InvalidSparseTensor`).

    Example::

        coo_linear_indices(np.array([[0, 1], [1, 2]]), [2, 3], 2, "w")  # array([1, 5])
    """
    idx = np.asarray(indices)
    shape = [int(d) for d in dense_shape]
    rank, size = len(shape), math.prod(shape)
    if idx.size and idx.dtype.kind not in "iu":
        raise error(f"{what}: indices must be integers, got {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    if nnz == 0 and idx.size == 0:  # nothing to place, whatever the layout
        return np.zeros(0, np.int64)
    if idx.ndim == 1 and idx.shape[0] == nnz:
        if size:
            pos = _first_outside(idx, size)
            if pos is not None:
                raise error(
                    f"{what} holds {int(idx[pos])}, outside 0..{size - 1} (linear index into "
                    f"{shape}), at position {pos}; every index must fall inside the dense shape"
                )
        return idx
    if idx.ndim == 2 and idx.shape == (nnz, rank):
        if size:
            for axis, dim in enumerate(shape):
                pos = _first_outside(idx[:, axis], dim)
                if pos is not None:
                    raise error(
                        f"{what} holds {int(idx[pos, axis])}, outside 0..{dim - 1} "
                        f"({_axis_name(axis, rank)} of {shape}), at position [{pos}, {axis}]; "
                        "every index must fall inside the dense shape"
                    )
        if size > np.iinfo(np.int64).max:
            raise error(f"{what}: dense shape {shape} has too many elements to index")
        strides = np.array([math.prod(shape[a + 1 :]) for a in range(rank)], dtype=np.int64)
        return (idx * strides).sum(axis=1, dtype=np.int64)
    raise error(
        f"{what}: indices of shape {list(idx.shape)} cannot place {nnz} values in a "
        f"{rank}-D tensor; give [{nnz}] linear indices or [{nnz}, {rank}] coordinates"
    )


def dense_from_proto(
    st: Any, what: str, error: type[OnyxError] = InvalidGraph
) -> np.ndarray:
    """The dense array of a model's COO ``SparseTensorProto`` ``st`` (a sparse
    initializer, a Constant's ``sparse_value``), sized against the memory limits before
    it is allocated. ``what`` names it in errors (``error``, InvalidGraph by default): 1-D
    values, indices checked by :func:`coo_linear_indices`, a repeat keeps its last value."""
    from onnx import numpy_helper

    values = numpy_helper.to_array(st.values)
    if values.ndim != 1:
        raise error(f"{what}: values must be 1-D (one per index), got shape {list(values.shape)}")
    # A few values can declare enormous dims: size the dense tensor before allocating it.
    check_allocation(st.dims, values.dtype, f"{what} (densified)")
    linear = coo_linear_indices(numpy_helper.to_array(st.indices), st.dims, values.size, what, error)
    return coo_to_dense(values, linear, st.dims)


def _last_of_each(linear: np.ndarray) -> np.ndarray:
    """The position of the last occurrence of each distinct index, ordered by index."""
    _, first_from_end = np.unique(linear[::-1], return_index=True)
    return linear.size - 1 - first_from_end


def coo_to_dense(values: np.ndarray, linear: np.ndarray, dense_shape: Sequence[int]) -> np.ndarray:
    """The dense array of ``dense_shape`` holding ``values`` at the ``linear`` indices
    (checked by :func:`coo_linear_indices`) and 0 elsewhere ("" for strings).

    An index given twice takes the last of its values, as onnxruntime densifies a sparse
    initializer (numpy's own fancy assignment leaves the winner unspecified)."""
    shape = tuple(int(d) for d in dense_shape)
    size = math.prod(shape)
    if values.dtype.kind == "O":
        dense = np.full(size, "", dtype=object)
    else:
        dense = np.zeros(size, dtype=values.dtype)
    if size and linear.size:
        last = _last_of_each(linear)
        dense[linear[last]] = values[last]
    return dense.reshape(shape)


def canonical_coo(values: np.ndarray, linear: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``values`` and ``linear`` indices as onnxruntime hands a sparse tensor back: sorted
    by index, one value per index (the last given), zeros (and empty strings) left out."""
    if not linear.size:
        return values, linear
    last = _last_of_each(linear)
    values, linear = values[last], linear[last]
    keep = values != "" if values.dtype.kind == "O" else values != 0
    return np.ascontiguousarray(values[keep]), np.ascontiguousarray(linear[keep])
