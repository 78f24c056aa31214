"""Allocators: a best-fit arena with coalescing over any provider's raw memory.

A provider hands the arena a :class:`RawMemory` (how to reserve and release one region of
its device memory and how to view part of it); the arena carves allocations out of those
regions, merges neighbouring free blocks, grows by the extend strategy, enforces the
memory limit and keeps statistics. ``release_cached()`` gives wholly free regions back to
the device, like ``torch.cuda.empty_cache()``.

Extend strategies (onnxruntime's names):

* ``kNextPowerOfTwo`` — each new region is twice the previous one (at least the request),
  so few regions are made at the cost of unused reserve.
* ``kSameAsRequested`` — each new region is exactly the (aligned) request: no waste,
  more regions.
"""

from __future__ import annotations

import bisect
import threading
from typing import Any, Protocol

from .errors import InvalidProviderOption, OutOfMemory
from .records import record

__all__ = [
    "RawMemory",
    "HostMemory",
    "Allocation",
    "AllocatorStats",
    "Allocator",
    "ArenaAllocator",
    "EXTEND_STRATEGIES",
]

EXTEND_STRATEGIES = ("kNextPowerOfTwo", "kSameAsRequested")
_ALIGN = 256


def _align(n: int) -> int:
    return max(_ALIGN, (n + _ALIGN - 1) // _ALIGN * _ALIGN)


class RawMemory(Protocol):
    """A device's memory as the arena sees it."""

    def reserve(self, nbytes: int) -> Any:
        """Reserve one region of ``nbytes``; return a handle. Raise MemoryError on failure."""
        ...

    def release(self, handle: Any) -> None:
        """Give a region back to the device."""
        ...

    def view(self, handle: Any, offset: int, nbytes: int) -> Any:
        """A buffer for ``nbytes`` at ``offset`` inside the region ``handle``."""
        ...


class HostMemory:
    """Host RAM as raw memory: regions are numpy byte arrays."""

    def reserve(self, nbytes: int) -> Any:
        """Reserve ``nbytes`` of host memory."""
        import numpy as np

        return np.empty(nbytes, dtype=np.uint8)

    def release(self, handle: Any) -> None:
        """Drop the region (the garbage collector frees it once no view remains)."""

    def view(self, handle: Any, offset: int, nbytes: int) -> Any:
        """A ``uint8`` view of part of the region."""
        return handle[offset : offset + nbytes]


@record(frozen=True)
class AllocatorStats:
    """A snapshot of an allocator's bookkeeping, in bytes."""

    in_use: int
    peak_in_use: int
    reserved: int
    regions: int
    allocations: int
    frees: int
    limit: int | None
    largest_free_block: int

    def as_dict(self) -> dict[str, int | None]:
        """The statistics as a plain dict (for reports and JSON)."""
        return dict(self.__dict__)


@record(eq=False)
class Allocation:
    """A block handed out by an allocator; ``buffer`` is the provider's view of it."""

    region: int
    offset: int
    size: int
    requested: int
    buffer: Any
    arena: int = 0  # id of the arena that handed it out


class Allocator(Protocol):
    """What the core needs from a provider's allocator."""

    def allocate(self, nbytes: int) -> Allocation:
        """Allocate at least ``nbytes``; raise :class:`~onyxrt.errors.OutOfMemory` past the limit."""
        ...

    def free(self, allocation: Allocation) -> None:
        """Return a block."""
        ...

    def stats(self) -> AllocatorStats:
        """Current statistics."""
        ...

    def release_cached(self) -> int:
        """Give cached but unused memory back to the device; return the bytes released."""
        ...


class _Region:
    __slots__ = ("handle", "size", "free_blocks", "used")

    def __init__(self, handle: Any, size: int) -> None:
        self.handle = handle
        self.size = size
        # Sorted list of (offset, size) of free blocks; adjacent blocks are always merged.
        self.free_blocks: list[tuple[int, int]] = [(0, size)]
        self.used = 0


class ArenaAllocator:
    """Best-fit arena with coalescing, an extend strategy and an optional limit.

    >>> arena = ArenaAllocator(HostMemory(), strategy="kSameAsRequested", limit=1 << 20)
    >>> block = arena.allocate(1000)
    >>> arena.stats().in_use
    1024
    >>> arena.free(block); arena.release_cached()
    1024
    """

    def __init__(
        self,
        memory: RawMemory,
        *,
        strategy: str = "kNextPowerOfTwo",
        limit: int | None = None,
        initial_region: int = 1 << 20,
        name: str = "arena",
    ) -> None:
        if strategy not in EXTEND_STRATEGIES:
            raise InvalidProviderOption(
                f"{name}: arena_extend_strategy must be one of {EXTEND_STRATEGIES}, got {strategy!r}"
            )
        if limit is not None and limit <= 0:
            limit = None  # 0 means "no limit", as in onnxruntime's gpu_mem_limit default
        self.memory = memory
        self.strategy = strategy
        self.limit = limit
        self.name = name
        self._next_region = _align(initial_region)
        self._regions: dict[int, _Region] = {}
        self._region_ids = 0
        self._lock = threading.Lock()
        # Buffers are freed by weakref finalizers, which the garbage collector may run in
        # the middle of allocate() on the thread holding the lock (a cycle collected when a
        # tuple is created): such a free is deferred until the holder lets go, instead of
        # re-locking (a deadlock) or editing the free lists under the holder's feet.
        self._owner = 0
        self._deferred: list[Allocation] = []
        self._in_use = 0
        self._peak = 0
        self._allocs = 0
        self._frees = 0

    # -- allocation ----------------------------------------------------------------
    def allocate(self, nbytes: int) -> Allocation:
        """Best-fit block of at least ``nbytes`` (aligned to 256 bytes)."""
        if nbytes < 0:
            raise ValueError(f"{self.name}: cannot allocate a negative size ({nbytes})")
        size = _align(nbytes)
        self._acquire()
        try:
            found = self._best_fit(size)
            if found is None:
                rid = self._extend(size, nbytes)
                found = (rid, 0)
            rid, idx = found
            region = self._regions[rid]
            offset, block = region.free_blocks[idx]
            if block == size:
                del region.free_blocks[idx]
            else:
                region.free_blocks[idx] = (offset + size, block - size)
            region.used += size
            self._in_use += size
            self._peak = max(self._peak, self._in_use)
            self._allocs += 1
            view = self.memory.view(region.handle, offset, size)
            return Allocation(rid, offset, size, nbytes, view, id(self))
        finally:
            self._release()

    def _acquire(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()

    def _release(self) -> None:
        try:
            while self._deferred:
                self._free_locked(self._deferred.pop())
        finally:
            self._owner = 0
            self._lock.release()

    def _best_fit(self, size: int) -> tuple[int, int] | None:
        best: tuple[int, int] | None = None
        best_size = 0
        for rid, region in self._regions.items():
            for idx, (_, block) in enumerate(region.free_blocks):
                if block >= size and (best is None or block < best_size):
                    best, best_size = (rid, idx), block
                    if block == size:
                        return best
        return best

    def _extend(self, size: int, requested: int) -> int:
        reserved = sum(r.size for r in self._regions.values())
        if self.strategy == "kNextPowerOfTwo":
            want = max(size, self._next_region)
        else:
            want = size
        if self.limit is not None and reserved + want > self.limit:
            # Growing by the strategy's size would pass the limit: fall back to exactly
            # the request, as onnxruntime's arena does, before reporting out-of-memory.
            want = size
            if reserved + want > self.limit:
                raise OutOfMemory(
                    f"{self.name}: out of memory: requested {requested} bytes, limit "
                    f"{self.limit} bytes ({self._in_use} in use, {reserved} reserved). "
                    "Raise the provider's memory limit, use a smaller batch, or call "
                    "release_cached() to return unused reserve."
                )
        try:
            handle = self.memory.reserve(want)
        except MemoryError as exc:
            raise OutOfMemory(
                f"{self.name}: the device refused {want} bytes for a request of {requested} "
                f"bytes ({reserved} already reserved): {exc}"
            ) from exc
        if self.strategy == "kNextPowerOfTwo":
            self._next_region = max(self._next_region, want) * 2
        self._region_ids += 1
        self._regions[self._region_ids] = _Region(handle, want)
        return self._region_ids

    def free(self, allocation: Allocation) -> None:
        """Return a block, merging it with free neighbours."""
        if self._owner == threading.get_ident():  # a finalizer run inside our own locked section
            self._deferred.append(allocation)
            return
        self._acquire()
        try:
            self._free_locked(allocation)
        finally:
            self._release()

    def _free_locked(self, allocation: Allocation) -> None:
        region = self._regions.get(allocation.region)
        if region is None or allocation.arena != id(self):
            raise ValueError(f"{self.name}: block does not belong to this arena")
        blocks = region.free_blocks
        start, size = allocation.offset, allocation.size
        i = bisect.bisect_left(blocks, (start, 0))
        if i < len(blocks) and blocks[i][0] < start + size or (
            i > 0 and blocks[i - 1][0] + blocks[i - 1][1] > start
        ):
            raise ValueError(f"{self.name}: block at offset {start} freed twice")
        if i < len(blocks) and blocks[i][0] == start + size:
            size += blocks[i][1]
            del blocks[i]
        if i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == start:
            start = blocks[i - 1][0]
            size += blocks[i - 1][1]
            del blocks[i - 1]
            i -= 1
        blocks.insert(i, (start, size))
        region.used -= allocation.size
        self._in_use -= allocation.size
        self._frees += 1

    # -- bookkeeping ---------------------------------------------------------------
    def release_cached(self) -> int:
        """Give every wholly free region back to the device; return the bytes released."""
        released = 0
        self._acquire()
        try:
            for rid in [rid for rid, r in self._regions.items() if r.used == 0]:
                region = self._regions.pop(rid)
                self.memory.release(region.handle)
                released += region.size
        finally:
            self._release()
        return released

    def stats(self) -> AllocatorStats:
        """Current statistics."""
        self._acquire()
        try:
            largest = max(
                (b for r in self._regions.values() for _, b in r.free_blocks), default=0
            )
            return AllocatorStats(
                in_use=self._in_use,
                peak_in_use=self._peak,
                reserved=sum(r.size for r in self._regions.values()),
                regions=len(self._regions),
                allocations=self._allocs,
                frees=self._frees,
                limit=self.limit,
                largest_free_block=largest,
            )
        finally:
            self._release()
