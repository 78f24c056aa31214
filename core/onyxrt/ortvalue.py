"""``OrtValue``: a value with the device it lives on (onnxruntime's class, same methods).

On the CPU an ``OrtValue`` wraps a numpy array without copying. On another device it
holds the provider's own value (a CuPy array, an NPU buffer) and the provider that can
move it; ``numpy()`` copies it to the host through that provider's data transfer.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .devices import HOST_MEMORY, Device
from .discovery import catalog
from .dtypes import elem_type_from_string, np_dtype, onnx_elem_type, type_string
from .errors import InvalidArgument
from .protocol import ExecutionProvider

__all__ = [
    "InPlaceTransfer", "OrtValue", "OrtValueVector", "SparseValue", "copy_tensors", "resolve_device_provider",
    "dlpack_importable",
]

_HOST = Device("cpu", "host")


def resolve_device_provider(device_type: str, device_id: int = 0) -> ExecutionProvider | None:
    """The provider instance owning device ``device_type:device_id`` (None for the CPU).

    ``device_type`` is what users write: ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"gpu"``,
    ``"npu"`` or any name a provider lists in ``device_names``
    (:meth:`~onyxrt.discovery.ProviderCatalog.device_provider`).
    """
    return catalog().device_provider(device_type, device_id)


@runtime_checkable
class InPlaceTransfer(Protocol):
    """A data transfer that can also write into an existing device value (the GPU's):
    what lets a preallocated device ``OrtValue`` (``bind_ortvalue_output``,
    ``update_inplace``) keep its memory, so the arrays that share it through DLPack or a
    raw pointer see the result. Transfers without it replace the held value instead."""

    def copy_into(self, value: Any, target: Any, src: Device, dst: Device) -> None:
        """Write ``value`` (on ``src``) into ``target`` (on ``dst``), same shape and dtype."""


class SparseValue:
    """The base of :class:`onyxrt.SparseTensor`: what an ``OrtValue`` holding a sparse
    tensor holds. ``SparseTensor`` builds on ``OrtValue`` (a tensor copied to a device
    keeps its arrays as ``OrtValue`` objects), so this module knows it by this base
    instead of importing it."""

    __slots__ = ()


class _Capsule:
    """A bare DLPack capsule dressed as an object with ``__dlpack__`` (what numpy and the
    providers import); it claims host memory, the only thing a bare capsule can be read
    as without its producer."""

    def __init__(self, capsule: Any) -> None:
        self._capsule = capsule

    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple[int, int]:
        return (1, 0)


def dlpack_importable(data: Any) -> Any:
    """``data`` itself when it exports ``__dlpack__``; a bare DLPack capsule wrapped so
    numpy can import it."""
    if hasattr(data, "__dlpack__"):
        return data
    if type(data).__name__ == "PyCapsule":
        return _Capsule(data)
    raise InvalidArgument(
        f"from_dlpack takes an object with __dlpack__ (numpy, CuPy, torch...) or a DLPack "
        f"capsule, got {type(data).__name__}"
    )


def _as_dtype(element_type: Any) -> np.dtype[Any]:
    if isinstance(element_type, int):
        return np_dtype(element_type)
    if isinstance(element_type, str) and element_type.startswith("tensor("):
        return np_dtype(elem_type_from_string(element_type))
    try:
        return np.dtype(element_type)
    except TypeError:
        raise InvalidArgument(f"unknown element type {element_type!r}") from None


class OrtValue:
    """A tensor (or sequence/map/optional value) and where it lives."""

    def __init__(self, value: Any, provider: ExecutionProvider | None = None) -> None:
        self._value = value
        self._provider = provider

    # -- construction ------------------------------------------------------------------
    @staticmethod
    def ortvalue_from_numpy(
        array: Any, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1
    ) -> OrtValue:
        """Wrap ``array`` (no copy on CPU) or copy it to ``device_type``. ``vendor_id``
        (onnxruntime's, to tell GPU vendors apart) is implied by the device name here."""
        arr = np.asarray(array)
        provider = resolve_device_provider(device_type, device_id)
        if provider is None:
            return OrtValue(arr)
        return OrtValue(provider.data_transfer().copy(arr, _HOST, provider.device), provider)

    @staticmethod
    def ortvalue_from_numpy_with_onnx_type(data: Any, onnx_element_type: int) -> OrtValue:
        """Wrap host ``data`` as a tensor of ONNX element type ``onnx_element_type``
        (e.g. uint16 bits as bfloat16): the bytes are reinterpreted, not converted, so
        the item sizes must match."""
        arr = np.asarray(data)
        try:
            target = np_dtype(int(onnx_element_type))
        except TypeError:
            raise InvalidArgument(f"unknown ONNX element type {onnx_element_type!r}") from None
        if target == arr.dtype:
            return OrtValue(arr)
        if target.itemsize != arr.dtype.itemsize or arr.dtype.kind == "O" or target.kind == "O":
            raise InvalidArgument(
                f"ortvalue_from_numpy_with_onnx_type: {arr.dtype} data ({arr.dtype.itemsize} "
                f"bytes per item) cannot be read as {type_string(int(onnx_element_type))} "
                f"({target.itemsize} bytes per item)"
            )
        return OrtValue(np.ascontiguousarray(arr).view(target))

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Any,
        element_type: Any,
        device_type: str = "cpu",
        device_id: int = 0,
        vendor_id: int = -1,
        memory_info: Any = None,
    ) -> OrtValue:
        """A new uninitialised tensor of ``shape`` and ``element_type`` on the device (or
        where ``memory_info``, an :class:`~onyxrt.memory_info.OrtMemoryInfo`, says)."""
        dtype = _as_dtype(element_type)
        if memory_info is not None:
            device_type, device_id = memory_info.device.name, memory_info.device_id
        host = np.empty(tuple(int(d) for d in shape), dtype=dtype)
        return OrtValue.ortvalue_from_numpy(host, device_type, device_id)

    @staticmethod
    def ort_value_from_sparse_tensor(sparse_tensor: Any) -> OrtValue:
        """An ``OrtValue`` holding a :class:`~onyxrt.SparseTensor` (to feed sparse inputs)."""
        if not isinstance(sparse_tensor, SparseValue):
            raise InvalidArgument(f"ort_value_from_sparse_tensor takes a SparseTensor, got {type(sparse_tensor).__name__}")
        return OrtValue(sparse_tensor)

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> OrtValue:
        """Wrap an object exporting ``__dlpack__`` (or a DLPack capsule) without copying: a
        CPU tensor as a numpy array, a device tensor (a CuPy array, a CUDA torch tensor)
        through the provider whose DLPack device type matches."""
        data = dlpack_importable(data)
        kind, device_id = data.__dlpack_device__() if hasattr(data, "__dlpack_device__") else (1, 0)
        if int(kind) in (1, 3):  # kDLCPU, kDLCUDAHost: host memory
            arr = np.from_dlpack(data)
            if is_bool_tensor and arr.dtype != np.bool_:
                arr = arr.view(np.bool_) if arr.dtype.itemsize == 1 else arr.astype(np.bool_)
            return OrtValue(arr)
        provider = catalog().dlpack_provider(int(kind), int(device_id))
        return OrtValue(provider.from_dlpack(data), provider)

    # onnxruntime's private native handle, which third-party code reaches for
    # (``value._ortvalue``, ``value._get_c_value()``): the value itself.
    @property
    def _ortvalue(self) -> OrtValue:
        return self

    def _get_c_value(self) -> OrtValue:
        return self

    # -- inspection --------------------------------------------------------------------
    @property
    def provider(self) -> ExecutionProvider | None:
        """The provider whose memory holds the value (None: host memory)."""
        return self._provider

    @property
    def value(self) -> Any:
        """The raw value where it lives (numpy on CPU, the provider's value elsewhere)."""
        return self._value

    def device(self) -> Device:
        """The device holding the value."""
        return self._provider.device if self._provider is not None else _HOST

    def device_name(self) -> str:
        """``"cpu"``, or the provider's device name (``"cuda"``, ``"npu"``, ...)."""
        if self._provider is None or self._provider.device.memory_space == HOST_MEMORY:
            return "cpu"
        names = self._provider.device_names
        return names[0] if names else self._provider.device.type

    def is_tensor(self) -> bool:
        """Whether the value is a tensor (not a sequence, map or absent optional)."""
        if self._provider is not None:
            return True
        return isinstance(self._value, np.ndarray)

    def is_sparse_tensor(self) -> bool:
        """Whether the value is a :class:`~onyxrt.SparseTensor`."""
        return isinstance(self._value, SparseValue)

    def as_sparse_tensor(self) -> Any:
        """The :class:`~onyxrt.SparseTensor` this value holds."""
        if not self.is_sparse_tensor():
            raise InvalidArgument("this OrtValue is not a sparse tensor (is_sparse_tensor() is False)")
        return self._value

    def is_tensor_sequence(self) -> bool:
        """Whether the value is a sequence of tensors."""
        return isinstance(self._value, list)

    def has_value(self) -> bool:
        """False for an absent optional."""
        return self._value is not None

    def _shape_dtype(self) -> tuple[tuple[int, ...], np.dtype[Any]]:
        if self._provider is not None:
            return self._provider.describe(self._value)
        arr = np.asarray(self._value)
        return tuple(arr.shape), arr.dtype

    def shape(self) -> list[int]:
        """The tensor's shape."""
        return list(self._shape_dtype()[0])

    def element_type(self) -> int:
        """The tensor's ONNX element type (``onnx.TensorProto.FLOAT`` is 1), as
        onnxruntime returns it; :meth:`numpy_dtype` gives the numpy dtype."""
        return onnx_elem_type(self._shape_dtype()[1])

    def numpy_dtype(self) -> np.dtype[Any]:
        """The tensor's numpy dtype."""
        return self._shape_dtype()[1]

    def data_type(self) -> str:
        """onnxruntime's type string, e.g. ``'tensor(float)'``."""
        return type_string(onnx_elem_type(self._shape_dtype()[1]))

    def tensor_size_in_bytes(self) -> int:
        """Bytes the tensor's elements occupy (elements times item size)."""
        shape, dtype = self._shape_dtype()
        count = 1
        for d in shape:
            count *= int(d)
        return count * dtype.itemsize

    def data_ptr(self) -> int:
        """The address of the tensor's first element: host memory for a CPU value, device
        memory for a device value (from its ``__cuda_array_interface__``)."""
        if self._provider is None or self._provider.device.is_host:
            arr = self._value
            if not isinstance(arr, np.ndarray):
                raise InvalidArgument("data_ptr() needs a tensor; this OrtValue holds a "
                                      f"{type(arr).__name__}")
            return int(arr.__array_interface__["data"][0])
        try:
            return int(self._value.__cuda_array_interface__["data"][0])
        except AttributeError:
            raise InvalidArgument(
                f"data_ptr(): the {self.device_name()} value exposes no address "
                "(no __cuda_array_interface__); use numpy() or DLPack"
            ) from None

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        """``np.asarray(ortvalue)``: the tensor on the host (a copy from a device)."""
        value = self.numpy()
        if not isinstance(value, np.ndarray):
            raise InvalidArgument(f"this OrtValue holds a {type(value).__name__}, not a tensor")
        if dtype is not None and value.dtype != np.dtype(dtype):
            return value.astype(dtype)
        return value.copy() if copy else value

    def numpy(self) -> Any:
        """The value on the host (a copy when it lives on a device); a sparse tensor
        densified."""
        if self._provider is None or self._provider.device.is_host:
            value = self._value
            if isinstance(value, np.ndarray) or not self.is_sparse_tensor():
                return value
            return value.to_dense()
        return self._provider.data_transfer().copy(self._value, self._provider.device, _HOST)

    def update_inplace(self, array: Any) -> None:
        """Overwrite the tensor's contents with ``array`` (same shape and dtype); a device
        tensor keeps its memory where its provider can write into it (the GPU's)."""
        src = np.asarray(array)
        if self._provider is None:
            np.copyto(self._value, src)
        else:
            self.write_from(src, _HOST)

    def write_from(self, value: Any, src: Device) -> None:
        """Overwrite this device tensor with ``value``, which lives on ``src`` (the host or
        this tensor's device; same shape and dtype, checked by the caller). The memory is
        kept (whatever shares it through DLPack sees the result) when the provider's data
        transfer is an :class:`InPlaceTransfer`; otherwise the held value is replaced."""
        provider = self._provider
        if provider is None or provider.device.is_host:
            np.copyto(self._value, value if src.is_host else np.asarray(value))
            return
        transfer = provider.data_transfer()
        dst = provider.device
        if isinstance(transfer, InPlaceTransfer) and transfer.can_copy(src, dst):
            transfer.copy_into(value, self._value, src, dst)
        elif src.memory_space == dst.memory_space:
            self._value = value
        else:
            self._value = transfer.copy(value, src, dst)

    # -- DLPack ------------------------------------------------------------------------
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """Export through DLPack (host arrays and device values that support it). A
        read-only host array (one imported through DLPack itself, say) is exported as a
        copy: DLPack before 1.0 cannot mark data read-only, so numpy refuses to share it."""
        value = self._value
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            value = value.copy()
        if stream is None:
            return value.__dlpack__(**kwargs)
        return value.__dlpack__(stream=stream, **kwargs)

    def __dlpack_device__(self) -> Any:
        """DLPack device tuple of the underlying value."""
        return self._value.__dlpack_device__()

    @property
    def __cuda_array_interface__(self) -> Any:
        """The device value's CUDA array interface (CuPy, Numba, torch read it without a
        copy); absent for host values and devices that have none."""
        try:
            return self._value.__cuda_array_interface__
        except AttributeError:
            raise AttributeError("this OrtValue has no __cuda_array_interface__") from None

    def to_dlpack(self) -> Any:
        """A DLPack capsule (onnxruntime's spelling)."""
        return self.__dlpack__()

    def __repr__(self) -> str:
        if self.is_tensor():
            shape, dtype = self._shape_dtype()
            return f"OrtValue({self.device_name()}, {dtype}, shape={list(shape)})"
        return f"OrtValue({type(self._value).__name__})"


class OrtValueVector:
    """A list of :class:`OrtValue` (onnxruntime's ``C.OrtValueVector``, what
    ``run_with_ortvaluevector`` and ``IOBinding.get_outputs_as_ortvaluevector`` use)."""

    def __init__(self, values: Sequence[OrtValue] = ()) -> None:
        self._values: list[OrtValue] = [_as_ortvalue(v) for v in values]

    def push_back(self, value: Any) -> None:
        """Append an OrtValue (or a host array, wrapped)."""
        self._values.append(_as_ortvalue(value))

    def push_back_batch(self, values: Sequence[Any], *_: Any) -> None:
        """Append several values (onnxruntime's extra arguments, its native pointers and
        shapes, are not needed: the values carry them)."""
        for value in values:
            self.push_back(value)

    def reserve(self, n: int) -> None:
        """Kept for compatibility: a Python list needs no reservation."""

    def shrink_to_fit(self) -> None:
        """Kept for compatibility: a Python list needs no shrinking."""

    def element_type_at(self, index: int) -> int:
        """The ONNX element type of the value at ``index``."""
        return self._values[index].element_type()

    def dlpack_at(self, index: int) -> Any:
        """A DLPack capsule of the value at ``index``."""
        return self._values[index].to_dlpack()

    def to_dlpacks(self, to_tensor: Any = None) -> list[Any]:
        """DLPack capsules of every value, each passed through ``to_tensor`` when given
        (e.g. ``torch.utils.dlpack.from_dlpack``)."""
        capsules = [v.to_dlpack() for v in self._values]
        return [to_tensor(c) for c in capsules] if to_tensor is not None else capsules

    def bool_tensor_indices(self) -> list[int]:
        """Positions of the boolean tensors (DLPack cannot tell them from uint8)."""
        return [i for i, v in enumerate(self._values) if v.is_tensor() and v.numpy_dtype() == np.bool_]

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: int) -> OrtValue:
        return self._values[index]

    def __iter__(self) -> Iterator[OrtValue]:
        return iter(self._values)

    def __repr__(self) -> str:
        return f"OrtValueVector({self._values!r})"


def _as_ortvalue(value: Any) -> OrtValue:
    return value if isinstance(value, OrtValue) else OrtValue(np.asarray(value))


def copy_tensors(src: Sequence[OrtValue], dst: Sequence[OrtValue], stream: Any = None) -> None:
    """Copy each ``src[i]`` into ``dst[i]`` (same shape and type; any devices), as
    onnxruntime's ``copy_tensors``."""
    if len(src) != len(dst):
        raise InvalidArgument(f"copy_tensors: {len(src)} sources but {len(dst)} destinations")
    for i, (a, b) in enumerate(zip(src, dst)):
        if a.shape() != b.shape() or a.numpy_dtype() != b.numpy_dtype():
            raise InvalidArgument(
                f"copy_tensors: source {i} is {a.data_type()} {a.shape()} but destination {i} "
                f"is {b.data_type()} {b.shape()}"
            )
        b.update_inplace(a.numpy())
