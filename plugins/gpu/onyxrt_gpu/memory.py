"""GPU memory behind the core allocator protocol.

The arena is onyxrt's :class:`~onyxrt.allocator.ArenaAllocator` (best fit, coalescing,
``kNextPowerOfTwo``/``kSameAsRequested``, statistics, ``release_cached``) over raw device
memory from ``cupy.cuda.Memory`` (cudaMalloc/hipMalloc). CuPy itself allocates through
whatever allocator is current, so while a GPU kernel runs the provider installs
:class:`ArenaCupyAllocator` with ``cupy.cuda.using_allocator``: every array a kernel
creates is carved from the arena, ``gpu_mem_limit`` is enforced with onyxrt's typed
:class:`~onyxrt.errors.OutOfMemory`, and a block goes back to the arena when the CuPy array
that owns it is garbage-collected.

Reuse is stream-ordered, as in CuPy's own pool: Python drops an array as soon as the work
reading it is *queued*, not finished, so a block may only be handed to work that the
device runs after that queued work. A block belongs to the stream that was current when
it was allocated (CuPy's rule: work using an array runs on the stream it was made on, or
is ordered after it by the user). Reuse on the same stream is safe by stream order; when a
block last used on stream S is handed out on another stream T, T first waits on an event
recorded on S (``Stream.wait_event``: the device orders the work, the host never blocks).
While a single stream has ever allocated from the arena — a session's usual case — none of
this costs anything beyond reading the current stream; frees are tracked from the moment
a second stream allocates. See docs/gpu.md, "Streams".
"""

from __future__ import annotations

import bisect
import sys
import threading
import weakref
from collections.abc import Callable
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


_END = (sys.maxsize, sys.maxsize)


def _ref(stream: Any) -> Callable[[], Any]:
    """A weak reference to ``stream`` (a strong one where the type takes none)."""
    try:
        return weakref.ref(stream)
    except TypeError:
        return lambda: stream


class ArenaCupyAllocator:
    """A CuPy allocator (``nbytes -> MemoryPointer``) carving blocks from an arena, with
    stream-ordered reuse (see the module's docstring).

    ``stream_waits`` counts the times an allocation made its stream wait for another
    stream's work on the memory it received."""

    def __init__(self, cupy: ModuleType, arena: ArenaAllocator, device_id: int) -> None:
        self.cupy = cupy
        self.arena = arena
        self.device_id = device_id
        self.stream_waits = 0
        # While one stream has allocated here: its handle and object (frees untracked).
        self._first: tuple[int, Any] | None = None
        # Once a second stream allocates: an event on the first stream covering every free
        # made before (untracked), which each stream waits on once, the streams that have
        # (weakly: handles may be reused by new streams), and for every freed range the
        # stream that last used it, until the range is handed out again — region -> sorted,
        # disjoint (start, end, stream handle) byte ranges, with each handle's stream object
        # and number of ranges.
        self._multi = False
        self._horizon: Any = None
        self._seen: dict[int, Callable[[], Any]] = {}
        self._fences: dict[int, list[tuple[int, int, int]]] = {}
        self._fence_streams: dict[int, list[Any]] = {}
        self._lock = threading.Lock()
        # A finalizer run by the garbage collector inside our own locked section (same
        # thread) defers its free to the end of that section, as the arena itself does.
        self._owner = 0
        self._deferred: list[tuple[Allocation, int, Any]] = []
        # While this thread captures a graph: the graph's own arena (see :meth:`private`).
        self._private = threading.local()

    def private(self, arena: ArenaAllocator | None) -> ArenaAllocator | None:
        """Carve this thread's allocations from ``arena`` (``None``: the shared arena
        again); the previous setting is returned. A captured graph's kernels write the
        memory they were given on every launch, so that memory must never reach anyone
        else: while capturing, the graph gets an arena of its own, which lives as long as
        the graph (blocks freed during the capture are reused within it, in stream order)."""
        previous = getattr(self._private, "arena", None)
        self._private.arena = arena
        return previous

    def __call__(self, nbytes: int) -> Any:
        private = getattr(self._private, "arena", None)
        if private is not None:
            return self._pointer(private.allocate(nbytes), private.free)
        stream = self.cupy.cuda.get_current_stream()
        key = int(stream.ptr)
        block: Allocation = self.arena.allocate(nbytes)  # OutOfMemory past gpu_mem_limit
        first = self._first
        if self._multi or first is None or first[0] != key:
            self._order_after_last_use(block, key, stream)
        return self._pointer(block, self._free, key, stream)

    def _pointer(self, block: Allocation, free: Callable[..., None], *args: Any) -> Any:
        """A CuPy pointer to ``block`` whose memory is ``free(block, *args)``-d once the
        last array over it is gone."""
        owner = _BlockOwner()
        weakref.finalize(owner, free, block, *args)
        memory = self.cupy.cuda.UnownedMemory(block.buffer.ptr, block.size, owner, self.device_id)
        return self.cupy.cuda.MemoryPointer(memory, 0)

    # -- stream ordering ---------------------------------------------------------------
    def _order_after_last_use(self, block: Allocation, key: int, stream: Any) -> None:
        """Make ``stream`` wait for the other streams' work on ``block``'s memory."""
        cuda = self.cupy.cuda
        events: list[Any] = []
        others: list[Any] = []
        self._acquire()
        try:
            if not self._multi:
                if self._first is None or self._first[0] == key:
                    self._first = (key, stream)
                    return
                # A second stream: the frees made so far were not tracked.
                first_key, first_stream = self._first
                self._horizon = cuda.Event(disable_timing=True)
                self._horizon.record(first_stream)
                self._seen = {first_key: _ref(first_stream)}
                self._first = None
                self._multi = True
            seen = self._seen.get(key)
            if seen is None or seen() is not stream:
                events.append(self._horizon)
                if len(self._seen) > 64:  # forget streams that are gone
                    self._seen = {k: r for k, r in self._seen.items() if r() is not None}
                self._seen[key] = _ref(stream)
            others = [s for k, s in self._take_fences(block).items() if k != key]
        finally:
            self._release()
        for other in others:
            # An event recorded now covers the last use (issued before the free) and
            # possibly later work on that stream: a wait at most a little longer than
            # needed, with no event recorded at free time (frees run in finalizers).
            event = cuda.Event(disable_timing=True)
            event.record(other)
            events.append(event)
        for event in events:
            stream.wait_event(event)
        self.stream_waits += len(events)

    def _take_fences(self, block: Allocation) -> dict[int, Any]:
        """The streams whose freed ranges overlap ``block``; those ranges are cut out of
        the records (the block's own free will record it again)."""
        fences = self._fences.get(block.region)
        if not fences:
            return {}
        lo, hi = block.offset, block.offset + block.size
        i = bisect.bisect_right(fences, (lo, *_END)) - 1
        if i < 0 or fences[i][1] <= lo:
            i += 1
        j = bisect.bisect_left(fences, (hi, 0, 0))
        if i >= j:
            return {}
        hit = fences[i:j]
        keep = []
        if hit[0][0] < lo:
            keep.append((hit[0][0], lo, hit[0][2]))
        if hit[-1][1] > hi:
            keep.append((hi, hit[-1][1], hit[-1][2]))
        fences[i:j] = keep
        if not fences:
            del self._fences[block.region]
        found = {f[2]: self._fence_streams[f[2]][0] for f in hit}
        for f in keep:
            self._fence_streams[f[2]][1] += 1
        for f in hit:
            entry = self._fence_streams[f[2]]
            entry[1] -= 1
            if not entry[1]:  # no range remembers that stream: let it go
                del self._fence_streams[f[2]]
        return found

    # -- frees ----------------------------------------------------------------------------
    def _free(self, block: Allocation, key: int, stream: Any) -> None:
        if self._owner == threading.get_ident():  # a finalizer inside our locked section
            self._deferred.append((block, key, stream))
            return
        self._acquire()
        try:
            self._record(block, key, stream)
        finally:
            self._release()
        # Outside our lock: the arena takes its own, and a finalizer run while the arena's
        # lock is held elsewhere comes here (locks are never held across the two).
        self.arena.free(block)

    def _record(self, block: Allocation, key: int, stream: Any) -> None:
        if self._multi:
            # Recorded before the block is back in the arena: whoever gets it sees this.
            bisect.insort(self._fences.setdefault(block.region, []),
                          (block.offset, block.offset + block.size, key))
            self._fence_streams.setdefault(key, [stream, 0])[1] += 1

    def _acquire(self) -> None:
        self._lock.acquire()
        self._owner = threading.get_ident()

    def _release(self) -> None:
        freed: list[Allocation] = []
        try:
            while self._deferred:
                block, key, stream = self._deferred.pop()
                self._record(block, key, stream)
                freed.append(block)
        finally:
            self._owner = 0
            self._lock.release()
        for block in freed:
            self.arena.free(block)
