"""The NPU's memory: opaque device tensors in an arena with a capacity.

A real NPU's tensors live in memory the host cannot address. Here a region of "device
memory" is a ``bytearray`` handed out by :class:`NpuMemory`; an
:class:`~onyxrt.allocator.ArenaAllocator` carves tensors out of those regions and enforces
the capacity (the ``memory_limit`` option). A :class:`DeviceTensor` is an opaque handle:
it refuses numpy conversion, so a value the core forgets to copy fails loudly instead of
being read silently. Only :class:`SimNPUTransfer` (host ↔ device) and the NPU's own
programs look inside.

Storage precision: float tensors are stored as float16 unless the precision is ``fp32``
(as an fp16 NPU keeps activations; see :func:`~onyxrt_simnpu.ops.to_storage`); integers
keep their type. The *logical* dtype (what the graph says) is kept on the tensor so a
copy back to the host restores it.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from onyxrt.allocator import ArenaAllocator
from onyxrt.devices import Device

from .ops import to_storage

__all__ = ["NPU_MEMORY_SPACE", "NpuMemory", "DeviceTensor", "SimNPUTransfer"]

NPU_MEMORY_SPACE = "simnpu:0"


class NpuMemory:
    """Raw device memory for the arena: each region is a separate ``bytearray``."""

    def reserve(self, nbytes: int) -> bytearray:
        """Reserve a region (the arena enforces the capacity before calling this)."""
        return bytearray(nbytes)

    def release(self, handle: bytearray) -> None:
        """Give a region back (dropping the last reference frees it)."""

    def view(self, handle: bytearray, offset: int, nbytes: int) -> memoryview:
        """The bytes of one block inside a region."""
        return memoryview(handle)[offset : offset + nbytes]


class DeviceTensor:
    """A tensor in NPU memory: shape, logical and storage dtype, and its arena block.

    The block returns to the arena when the tensor is garbage-collected.
    """

    __slots__ = ("shape", "dtype", "storage_dtype", "_buffer", "__weakref__")

    def __init__(self, data: np.ndarray, logical: np.dtype[Any], arena: ArenaAllocator) -> None:
        data = np.ascontiguousarray(data)
        block = arena.allocate(data.nbytes)
        buffer = np.frombuffer(block.buffer, dtype=np.uint8, count=data.nbytes)
        buffer[:] = data.reshape(-1).view(np.uint8)
        self._buffer = buffer
        self.shape: tuple[int, ...] = tuple(data.shape)
        self.dtype: np.dtype[Any] = np.dtype(logical)
        self.storage_dtype: np.dtype[Any] = data.dtype
        weakref.finalize(self, arena.free, block)

    def storage(self) -> np.ndarray:
        """The stored values (read-only view) — for the NPU's own programs and transfers."""
        view = self._buffer.view(self.storage_dtype).reshape(self.shape)
        view.flags.writeable = False
        return view

    @property
    def nbytes(self) -> int:
        """Bytes the tensor occupies in device memory."""
        return int(self._buffer.nbytes)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(
            "a DeviceTensor lives in SimNPU memory; copy it to the host through the "
            "provider's data transfer (session outputs are copied for you)"
        )

    def __repr__(self) -> str:
        return f"DeviceTensor({self.dtype}{list(self.shape)} stored as {self.storage_dtype})"


class SimNPUTransfer:
    """Copies between host memory and NPU memory, converting to and from storage precision."""

    def __init__(self, arena: ArenaAllocator, precision: str) -> None:
        self.arena = arena
        self.precision = precision
        self.to_device_bytes = 0
        self.to_host_bytes = 0
        # Runs from several threads copy at once; `+=` on an attribute is not atomic.
        self._count_lock = threading.Lock()

    def can_copy(self, src: Device, dst: Device) -> bool:
        """Host → NPU and NPU → host."""
        spaces = {src.memory_space, dst.memory_space}
        return spaces == {"cpu", NPU_MEMORY_SPACE}

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        """Move ``value`` across; host arrays become :class:`DeviceTensor` and back."""
        if dst.memory_space == NPU_MEMORY_SPACE:
            return self.to_device(np.asarray(value))
        if not isinstance(value, DeviceTensor):
            raise TypeError(f"expected a DeviceTensor from SimNPU memory, got {type(value).__name__}")
        with self._count_lock:
            self.to_host_bytes += value.nbytes
        return value.storage().astype(value.dtype)

    def to_device(self, array: np.ndarray) -> DeviceTensor:
        """Store a host array in device memory at the provider's precision."""
        tensor = DeviceTensor(to_storage(array, self.precision), array.dtype, self.arena)
        with self._count_lock:
            self.to_device_bytes += tensor.nbytes
        return tensor
