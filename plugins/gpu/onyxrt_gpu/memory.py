"""GPU memory behind the core allocator protocol.

The arena is onyxrt's :class:`~onyxrt.allocator.ArenaAllocator` (best fit, coalescing,
``kNextPowerOfTwo``/``kSameAsRequested``, statistics, ``release_cached``) over raw device
memory from ``cupy.cuda.Memory`` (cudaMalloc/hipMalloc). CuPy itself allocates through
whatever allocator is current, so while a GPU kernel runs the provider installs
:class:`ArenaCupyAllocator` with ``cupy.cuda.using_allocator``: every array a kernel
creates is carved from the arena, ``gpu_mem_limit`` is enforced with onyxrt's typed
:class:`~onyxrt.errors.OutOfMemory`, and a block goes back to the arena when the CuPy array
that owns it is garbage-collected.
"""

from __future__ import annotations

import weakref
from types import ModuleType
from typing import Any

from onyxrt.allocator import Allocation, ArenaAllocator

__all__ = ["CupyDeviceMemory", "ArenaCupyAllocator"]


class CupyDeviceMemory:
    """Raw device memory for the arena: one ``cupy.cuda.Memory`` per region."""

    def __init__(self, cupy: ModuleType, device_id: int) -> None:
        self.cupy = cupy
        self.device_id = device_id

    def reserve(self, nbytes: int) -> Any:
        """cudaMalloc a region; the driver's out-of-memory becomes ``MemoryError``."""
        try:
            with self.cupy.cuda.Device(self.device_id):
                return self.cupy.cuda.Memory(nbytes)
        except MemoryError:
            raise
        except Exception as exc:  # CUDA runtime errors while allocating
            raise MemoryError(f"device {self.device_id}: {exc}") from exc

    def release(self, handle: Any) -> None:
        """Regions are freed when their ``cupy.cuda.Memory`` is dropped."""

    def view(self, handle: Any, offset: int, nbytes: int) -> Any:
        """A ``cupy.cuda.MemoryPointer`` at ``offset`` in the region."""
        return self.cupy.cuda.MemoryPointer(handle, offset)


class _BlockOwner:
    """Keeps an arena block alive while CuPy arrays use it; frees it when they are gone."""

    __slots__ = ("__weakref__",)


class ArenaCupyAllocator:
    """A CuPy allocator (``nbytes -> MemoryPointer``) carving blocks from an arena."""

    def __init__(self, cupy: ModuleType, arena: ArenaAllocator, device_id: int) -> None:
        self.cupy = cupy
        self.arena = arena
        self.device_id = device_id

    def __call__(self, nbytes: int) -> Any:
        block: Allocation = self.arena.allocate(nbytes)  # OutOfMemory past gpu_mem_limit
        owner = _BlockOwner()
        weakref.finalize(owner, self.arena.free, block)
        memory = self.cupy.cuda.UnownedMemory(block.buffer.ptr, block.size, owner, self.device_id)
        return self.cupy.cuda.MemoryPointer(memory, 0)
