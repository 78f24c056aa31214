"""``OrtValue``: a value with the device it lives on (onnxruntime's class, same methods).

On the CPU an ``OrtValue`` wraps a numpy array without copying. On another device it
holds the provider's own value (a CuPy array, an NPU buffer) and the provider that can
move it; ``numpy()`` copies it to the host through that provider's data transfer.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .devices import HOST_MEMORY, Device
from .dtypes import elem_type_from_string, np_dtype, onnx_elem_type, type_string
from .errors import InvalidArgument, ProviderUnavailable
from .protocol import ExecutionProvider

__all__ = ["OrtValue", "resolve_device_provider"]

_HOST = Device("cpu", "host")
_device_providers: dict[tuple[str, int], ExecutionProvider] = {}
_device_lock = threading.Lock()


def _dlpack_provider(kind: int, device_id: int) -> ExecutionProvider:
    from .discovery import catalog

    cat = catalog()
    for name in cat.available():
        cls = cat.provider_class(name)
        if cls.dlpack_device_type == kind:
            provider = resolve_device_provider(cls.device_names[0] if cls.device_names else name, device_id)
            if provider is not None:
                return provider
    raise ProviderUnavailable(
        f"no usable provider takes DLPack device type {kind} (device {device_id}); "
        "install and check the matching GPU provider (onyxrt providers)"
    )


def forget_device_providers() -> None:
    """Drop the provider instances made for device names (see :func:`reset_catalog`)."""
    with _device_lock:
        _device_providers.clear()


def resolve_device_provider(device_type: str, device_id: int = 0) -> ExecutionProvider | None:
    """The provider instance owning device ``device_type:device_id`` (None for the CPU).

    ``device_type`` is what users write: ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"gpu"``,
    ``"npu"`` or any name a provider lists in ``device_names``.
    """
    kind = str(device_type).lower()
    if kind == "cpu":
        return None
    key = (kind, int(device_id))
    with _device_lock:
        if key in _device_providers:
            return _device_providers[key]
    from .discovery import catalog

    cat = catalog()
    for name in cat.available():
        cls = cat.provider_class(name)
        spec = cat.specs[name]
        if kind in cls.device_names or kind in spec.device_types:
            schema = cls.option_schema
            opts = schema.defaults()
            if "device_id" in schema.options:
                opts["device_id"] = int(device_id)
            provider = cls(opts)
            with _device_lock:
                return _device_providers.setdefault(key, provider)
    raise ProviderUnavailable(
        f"no usable provider for device {device_type!r} (usable providers: "
        f"{', '.join(cat.available())}); run `onyxrt providers` to see why"
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
    def ortvalue_from_numpy(array: Any, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """Wrap ``array`` (no copy on CPU) or copy it to ``device_type``."""
        arr = np.asarray(array)
        provider = resolve_device_provider(device_type, device_id)
        if provider is None:
            return OrtValue(arr)
        return OrtValue(provider.data_transfer().copy(arr, _HOST, provider.device), provider)

    @staticmethod
    def ortvalue_from_shape_and_type(
        shape: Any, element_type: Any, device_type: str = "cpu", device_id: int = 0
    ) -> OrtValue:
        """A new uninitialised tensor of ``shape`` and ``element_type`` on the device."""
        dtype = _as_dtype(element_type)
        host = np.empty(tuple(int(d) for d in shape), dtype=dtype)
        return OrtValue.ortvalue_from_numpy(host, device_type, device_id)

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> OrtValue:
        """Wrap an object exporting ``__dlpack__`` without copying: a CPU tensor as a numpy
        array, a device tensor (a CuPy array, a CUDA torch tensor) through the provider
        whose DLPack device type matches."""
        kind, device_id = data.__dlpack_device__() if hasattr(data, "__dlpack_device__") else (1, 0)
        if int(kind) in (1, 3):  # kDLCPU, kDLCUDAHost: host memory
            arr = np.from_dlpack(data)
            if is_bool_tensor and arr.dtype != np.bool_:
                arr = arr.view(np.bool_) if arr.dtype.itemsize == 1 else arr.astype(np.bool_)
            return OrtValue(arr)
        provider = _dlpack_provider(int(kind), int(device_id))
        return OrtValue(provider.from_dlpack(data), provider)

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

    def element_type(self) -> np.dtype[Any]:
        """The tensor's numpy dtype."""
        return self._shape_dtype()[1]

    def data_type(self) -> str:
        """onnxruntime's type string, e.g. ``'tensor(float)'``."""
        return type_string(onnx_elem_type(self._shape_dtype()[1]))

    def numpy(self) -> Any:
        """The value on the host (a copy when it lives on a device)."""
        if self._provider is None or self._provider.device.is_host:
            return self._value
        return self._provider.data_transfer().copy(self._value, self._provider.device, _HOST)

    def update_inplace(self, array: Any) -> None:
        """Overwrite the tensor's contents with ``array`` (same shape and dtype)."""
        src = np.asarray(array)
        if self._provider is None:
            np.copyto(self._value, src)
        else:
            self._value = self._provider.data_transfer().copy(src, _HOST, self._provider.device)

    # -- DLPack ------------------------------------------------------------------------
    def __dlpack__(self, stream: Any = None, **kwargs: Any) -> Any:
        """Export through DLPack (host arrays and device values that support it)."""
        if stream is None:
            return self._value.__dlpack__(**kwargs)
        return self._value.__dlpack__(stream=stream, **kwargs)

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
