"""A strict simulated CuPy, so the GPU providers are tested on machines without a GPU.

:func:`install` puts simulated modules into ``sys.modules`` under ``cupy``, ``cupy.cuda``,
``cupy.cuda.runtime``, ``cupy.cuda.memory``, ``cupy.cuda.device``, ``cupy.cuda.graph``, ``cupy.lib``, ``cupy.lib.stride_tricks``,
``cupy.linalg``, ``cupy.fft``, ``cupyx``, ``cupyx.scipy`` and ``cupyx.scipy.special`` (restoring whatever was there on
exit)::

    with install(hip=False, device_count=1, memory_bytes=1 << 30) as sim:
        import cupy
        x = cupy.asarray(np.ones(4, np.float32))     # one host->device copy, counted
        y = cupy.exp(x)                              # device math, a new device allocation
        y.get()                                      # one device->host copy, counted
        assert (sim.h2d, sim.d2h) == (1, 1)

What it simulates, strictly:

* **Device arrays** (:class:`ndarray`) hold their elements in simulated device memory (a
  numpy byte buffer per allocation, whose host address doubles as the device pointer).
  They refuse implicit conversion to numpy exactly as CuPy does (``np.asarray(dev)``,
  ``float``/``bool`` of a non-scalar), and mixing a numpy array into a cupy function or
  operator raises ``TypeError`` (no silent host math). numpy functions called on device
  arrays raise ``TypeError`` too (real CuPy would dispatch them; kernels must call cupy).
* **Memory**: every device allocation goes through the *current allocator*: the default
  metered :class:`MemoryPool`, one set with ``cupy.cuda.set_allocator`` or a thread-local
  one from ``cupy.cuda.using_allocator(fn)`` (``fn(nbytes) -> MemoryPointer``). Raw
  allocations (:class:`Memory`) are metered per device against the simulated capacity and
  raise :class:`OutOfMemoryError` past it; memory is returned when its last reference
  dies. :class:`UnownedMemory` and ``ndarray(shape, dtype, memptr=...)`` let an external
  arena own the bytes; out-of-bounds and misaligned views are refused.
* **Runtime**: devices (``Device``, ``getDeviceCount``, ``mem_info``), streams, events,
  pinned host memory, ``is_hip`` (the ``hip`` flag); ``device_count=0`` makes
  ``getDeviceCount`` raise ``CUDARuntimeError`` like a machine without a device;
  ``driverGetVersion`` returns ``driver_version``.
* **Missing libraries**: ``missing_libraries=("compiler",)`` (no NVRTC/hiprtc) makes every
  operation that would run a compiled kernel raise CuPy's error, ``("blas",)`` (no
  cuBLAS/hipBLAS) every matmul/dot/einsum: a machine with only the driver.
* **Streams**: the null (legacy default) stream runs everything at once; work issued on
  another stream is queued and runs, reading its inputs then, only when something orders
  it (synchronizing the stream or an event after it, ``wait_event``, a device
  synchronization, a host read on that stream, or — for a blocking stream — work on the
  null stream). An unordered read sees stale data, as on a device (see :class:`Stream`).
* **Graph capture**: ``Stream.begin_capture``/``end_capture``/``is_capturing`` and
  ``cupy.cuda.graph.Graph.launch``. Work issued on a capturing stream is recorded, not
  run; a launch runs the recorded work again, reading its inputs' memory as it is then.
  As on a device, a capturing stream refuses what needs the host: a read back, an upload
  from host memory, a synchronization, an operation whose result's shape depends on data
  (``CUDARuntimeError``; the capture is then invalidated and ``end_capture`` raises), and
  CuPy's own cuBLAS calls (``matmul``, ``dot``, ``einsum``, ``cupy.cuda.cublas``) raise
  CuPy's ``NotImplementedError``. The cuBLAS library itself, called through its C API with
  a handle of one's own (:attr:`SimulatedCupy.cublas_library`), captures.
* **cuBLAS**: ``cupy.cuda.cublas`` (an attribute, as in CuPy) with ``gemmEx`` and
  ``gemmStridedBatchedEx`` computed with numpy on the device buffers (transpose flags,
  leading dimensions, strides, alpha/beta, element and compute types), on the current
  stream; ``cupy.cuda.device.get_cublas_handle``. ``cupy.matmul`` keeps CuPy 14.2's
  element types: batched float16 operands are copied to float32 and back.
* **Math**: the cupy functions the GPU kernels call (and only names real CuPy has),
  computed with numpy on the device buffers under numpy's (NEP 50) dtype rules, results
  written to newly allocated simulated device memory. Functions that return views in
  numpy (reshape, transpose, slicing, ``as_strided``...) return device views sharing the
  memory, as CuPy does.

Test-only statistics live on the :class:`SimulatedCupy` object, outside the cupy
namespace: ``h2d``/``d2h``/``d2d`` copy counts and ``*_bytes``, ``allocations`` (raw
device allocations), ``allocator_calls``, ``launches`` (device operations),
``synchronizations``, ``stream_waits``, ``matmul_upcasts``, ``gemm_calls`` (every GEMM
with its compute type), ``bytes_in_use(device)``, ``peak_bytes(device)``,
``pinned_bytes_in_use`` and :meth:`SimulatedCupy.counters` for a snapshot;
:meth:`SimulatedCupy.record_events` lists copies, launches and synchronizations in order.

The surface test (``plugins/gpu/tests/test_simulated_cupy.py``) checks every public name
defined here against the real ``cupy`` package, so a kernel cannot come to depend on an
attribute real CuPy lacks.
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import ctypes
import functools
import math
import sys
import threading
import time
import types
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from onyxrt.records import record

__all__ = ["SimulatedCupy", "GemmCall", "install", "simulated", "MODULE_NAMES", "SIMULATED_CLASSES"]

#: The modules a :class:`SimulatedCupy` puts into ``sys.modules``.
MODULE_NAMES = (
    "cupy",
    "cupy.cuda",
    "cupy.cuda.runtime",
    "cupy.cuda.memory",
    "cupy.cuda.device",
    "cupy.cuda.graph",
    "cupy.lib",
    "cupy.lib.stride_tricks",
    "cupy.linalg",
    "cupy.fft",
    "cupyx",
    "cupyx.scipy",
    "cupyx.scipy.special",
)

_VERSION = "14.2.0"
_CUDA_RUNTIME_VERSION = 12080  # CUDA 12.8
_HIP_RUNTIME_VERSION = 70051831  # ROCm 7.0
_KDL_CUDA = 2
_KDL_ROCM = 10
_ALIGN = 256  # cudaMalloc alignment
_POOL_UNIT = 512  # CuPy's memory pool rounds requests up to this

_IMPLICIT = (
    "Implicit conversion to a NumPy array is not allowed. Please use `.get()` to construct "
    "a NumPy array explicitly."
)

_ACTIVE: list[SimulatedCupy] = []


class _LibraryNotFoundError(RuntimeError):
    """What CuPy 14 raises when cuda-pathfinder finds no NVRTC
    (``cuda.pathfinder.DynamicLibNotFoundError``, a ``RuntimeError``)."""


#: The error real CuPy raises when a library is missing: library → {is_hip: (type, message)}.
_LIBRARY_ERRORS: dict[str, dict[bool, tuple[type[Exception], str]]] = {
    "compiler": {
        False: (_LibraryNotFoundError,
                'Failure finding "libnvrtc.so.13 or libnvrtc.so.12": No such file: '
                "libnvrtc.so.13 or libnvrtc.so.12\n"),
        True: (ImportError, "libhiprtc.so.7: cannot open shared object file: No such file or directory"),
    },
    "blas": {
        False: (ImportError, "libcublas.so.12: cannot open shared object file: No such file or directory"),
        True: (ImportError, "libhipblas.so.3: cannot open shared object file: No such file or directory"),
    },
}


def _sim() -> SimulatedCupy:
    """The innermost installed simulation."""
    if not _ACTIVE:
        raise RuntimeError(
            "the simulated CuPy is not installed (use onyxrt_gpu.testing.install())"
        )
    return _ACTIVE[-1]


def _fill_doc(name: str) -> str:
    return f"Simulated ``{name}`` (same signature and dtype rules as CuPy/numpy)."


# ======================================================================================
# errors
# ======================================================================================

_CUDA_ERRORS = {
    2: "cudaErrorMemoryAllocation: out of memory",
    35: "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime "
    "version",
    100: "cudaErrorNoDevice: no CUDA-capable device is detected",
    101: "cudaErrorInvalidDevice: invalid device ordinal",
    401: "cudaErrorIllegalState: the operation cannot be performed in the present state",
    900: "cudaErrorStreamCaptureUnsupported: operation not permitted when stream is capturing",
    901: "cudaErrorStreamCaptureInvalidated: operation failed due to a previous error during capture",
}
_HIP_ERRORS = {
    2: "hipErrorOutOfMemory: out of memory",
    35: "hipErrorInsufficientDriver: insufficient driver",
    100: "hipErrorNoDevice: no ROCm-capable device is detected",
    101: "hipErrorInvalidDevice: invalid device ordinal",
    401: "hipErrorIllegalState: the operation cannot be performed in the present state",
    900: "hipErrorStreamCaptureUnsupported: operation not permitted when stream is capturing",
    901: "hipErrorStreamCaptureInvalidated: operation failed due to a previous error during capture",
}


class CUDARuntimeError(RuntimeError):
    """An error status of the (simulated) CUDA/HIP runtime; ``status`` holds the code."""

    def __init__(self, status: int | str) -> None:
        if isinstance(status, str):
            self.status = 0
            super().__init__(status)
            return
        self.status = int(status)
        hip = bool(_ACTIVE and _ACTIVE[-1].hip)
        table = _HIP_ERRORS if hip else _CUDA_ERRORS
        super().__init__(table.get(self.status, f"runtime error {self.status}"))

    def __reduce__(self) -> Any:
        return (type(self), (str(self),))


class OutOfMemoryError(MemoryError):
    """Raised when an allocation exceeds the device capacity or a pool limit."""

    def __init__(self, size: int, total: int, limit: int = 0) -> None:
        msg = f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes"
        if limit:
            msg += f", limit set to: {limit:,} bytes"
        super().__init__(msg + ").")
        self._args = (size, total, limit)

    def __reduce__(self) -> Any:
        return (type(self), self._args)


# ======================================================================================
# devices
# ======================================================================================


class _DeviceState:
    """Bookkeeping of one simulated device (test-only, outside the cupy namespace)."""

    __slots__ = ("id", "capacity", "in_use", "peak")

    def __init__(self, device_id: int, capacity: int) -> None:
        self.id = device_id
        self.capacity = capacity
        self.in_use = 0
        self.peak = 0


class Device:
    """A (simulated) CUDA device; a context manager that makes it current."""

    def __init__(self, device: Any = None) -> None:
        if device is None:
            self._id = _sim()._tls_state().device
        elif isinstance(device, Device):
            self._id = device.id
        else:
            self._id = int(device)
        self._prev: list[int] = []

    @property
    def id(self) -> int:
        """The device ordinal."""
        return self._id

    def _state(self) -> _DeviceState:
        return _sim()._device_state(self._id)

    def use(self) -> None:
        """Make this device current for the calling thread."""
        sim = _sim()
        sim._device_state(self._id)
        sim._tls_state().device = self._id

    def synchronize(self) -> None:
        """Wait for the device's queued work: every stream's queue runs (counted)."""
        sim = _sim()
        sim._device_state(self._id)
        sim._refuse_in_capture("synchronize")
        sim._run_all_streams()
        sim._count("synchronizations")

    @property
    def mem_info(self) -> tuple[int, int]:
        """(free, total) bytes of the device."""
        st = self._state()
        return st.capacity - st.in_use, st.capacity

    @property
    def compute_capability(self) -> str:
        """The compute capability as CuPy spells it (``'90'``)."""
        self._state()
        return "90"

    def __enter__(self) -> Device:
        sim = _sim()
        sim._device_state(self._id)
        tls = sim._tls_state()
        self._prev.append(tls.device)
        tls.device = self._id
        return self

    def __exit__(self, *exc: Any) -> None:
        _sim()._tls_state().device = self._prev.pop()

    def __int__(self) -> int:
        return self._id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Device) and other.id == self._id

    def __hash__(self) -> int:
        return hash(("Device", self._id))

    def __repr__(self) -> str:
        return f"<CUDA Device {self._id}>"


class Stream:
    """A (simulated) CUDA stream.

    The null (legacy default) stream runs work eagerly, as the simulation always has. Work
    issued while another stream is current is *queued* on it and runs, in order, only when
    something orders it: :meth:`synchronize`, an :class:`Event` recorded after it being
    synchronized or waited on (:meth:`wait_event`), a device synchronization, a host read
    (``get``) on this stream, or — for a blocking stream (``non_blocking=False``) — any
    work on the null stream, which waits for blocking streams as the legacy default stream
    does. An unordered read therefore sees stale data, as on a device.
    """

    null: Stream

    def __init__(
        self, null: bool = False, non_blocking: bool = False, ptds: bool = False, priority: Any = None
    ) -> None:
        self.ptr = 0 if null else id(self)
        self.device_id = _sim()._tls_state().device if _ACTIVE else 0
        self._non_blocking = bool(non_blocking)
        self._prev: list[Stream] = []
        self._queue: collections.deque[Callable[[], None]] = collections.deque()
        self._issued = 0  # operations queued on this stream so far
        self._executed = 0  # of which have run
        self._capture: list[Callable[[], None]] | None = None  # recorded while capturing
        self._invalidated: str | None = None  # why the capture in progress is invalid
        if _ACTIVE:
            _sim()._streams[self.ptr] = self

    @property
    def done(self) -> bool:
        """Whether every operation queued on the stream has run."""
        return not self._queue

    @property
    def is_non_blocking(self) -> bool:
        """Whether the stream was created non-blocking."""
        return self._non_blocking

    def synchronize(self) -> None:
        """Wait for the stream's work: run what is queued (counted)."""
        sim = _sim()
        if self._capture is not None:
            self._refuse("synchronize")
        self._run(self._issued)
        sim._count("synchronizations")

    def use(self) -> Stream:
        """Make this stream current for the calling thread."""
        _sim()._tls_state().stream = self
        return self

    def record(self, event: Event | None = None) -> Event:
        """Record an event on this stream."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: Event) -> None:
        """Order later work on this stream after ``event``: the event's stream runs up to
        the event now (counted: ``stream_waits``; ``"wait"`` in
        :meth:`SimulatedCupy.record_events`)."""
        event._complete()
        _sim()._count("stream_waits")

    # -- graph capture ---------------------------------------------------------------------
    def begin_capture(self, mode: Any = None) -> None:
        """Start recording the work issued on this stream into a graph (CUDA refuses it
        on the null stream and on a stream already capturing)."""
        if not self.ptr:
            raise CUDARuntimeError(900)
        if self._capture is not None:
            raise CUDARuntimeError(401)
        self._capture = []
        self._invalidated = None

    def end_capture(self) -> Graph:
        """Stop recording: the recorded work as a :class:`Graph`. A capture that was
        invalidated (a refused operation) raises here, as ``cudaStreamEndCapture`` does."""
        if self._capture is None:
            raise CUDARuntimeError(401)
        ops, why = self._capture, self._invalidated
        self._capture = self._invalidated = None
        if why is not None:
            raise CUDARuntimeError(901)
        return Graph(ops)

    def is_capturing(self) -> bool:
        """Whether the stream is recording a graph."""
        return self._capture is not None

    def _refuse(self, what: str) -> None:
        """An operation a capturing stream cannot record: the capture is invalidated."""
        self._invalidated = what
        raise CUDARuntimeError(900)

    # -- the simulation's queue (not CuPy API) ----------------------------------------
    def _enqueue(self, op: Callable[[], None]) -> None:
        sim = _sim()
        if self._capture is not None:
            self._capture.append(op)
            return
        with sim._lock:
            self._queue.append(op)
            self._issued += 1
            sim._pending_streams.add(self)

    def _run(self, upto: int) -> None:
        """Run queued operations until ``upto`` have run on this stream, in order."""
        sim = _sim()
        while self._executed < upto:
            with sim._lock:
                if not self._queue:
                    return
                op = self._queue.popleft()
                self._executed += 1
                if not self._queue:
                    sim._pending_streams.discard(self)
            op()

    def __enter__(self) -> Stream:
        tls = _sim()._tls_state()
        self._prev.append(tls.stream)
        tls.stream = self
        return self

    def __exit__(self, *exc: Any) -> None:
        _sim()._tls_state().stream = self._prev.pop()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.ptr == self.ptr

    def __hash__(self) -> int:
        return hash(("Stream", self.ptr))

    def __repr__(self) -> str:
        return f"<Stream {self.ptr} (device {self.device_id})>"


Stream.null = Stream(null=True)


class Event:
    """A (simulated) CUDA event: marks a point in a stream's queue (and a host timestamp)."""

    def __init__(
        self, block: bool = False, disable_timing: bool = False, interprocess: bool = False
    ) -> None:
        self.ptr = id(self)
        self._t: float | None = None
        self._stream: Stream | None = None
        self._target = 0

    @property
    def done(self) -> bool:
        """True once recorded and the work before it on its stream has run."""
        if self._t is None:
            return False
        return self._stream is None or self._stream._executed >= self._target

    def record(self, stream: Stream | None = None) -> None:
        """Record the event after the work issued so far on ``stream`` (default: the
        current stream)."""
        if stream is None:
            stream = _sim()._tls_state().stream if _ACTIVE else Stream.null
        self._t = time.perf_counter()
        self._stream = None if stream.ptr == 0 else stream
        self._target = stream._issued

    def synchronize(self) -> None:
        """Wait for the event: its stream runs up to it (counted)."""
        self._complete()
        _sim()._count("synchronizations")

    def _complete(self) -> None:
        if self._stream is not None:
            self._stream._run(self._target)


class Graph:
    """A (simulated) CUDA graph: the work recorded by a stream capture, launched as one
    host call (counted as one launch) that runs that work again in order."""

    def __init__(self, ops: list[Callable[[], None]]) -> None:
        self._ops = list(ops)

    def launch(self, stream: Stream | None = None) -> None:
        """Run the recorded work on ``stream`` (default: the current stream): queued on a
        non-default stream, at once on the null stream."""
        sim = _sim()
        stream = sim._tls.stream if stream is None else stream
        if stream._capture is not None:
            stream._refuse("graph launch")
        sim._count("launches")
        sim._count("graph_launches")
        if stream.ptr:
            for op in self._ops:
                stream._enqueue(op)
        else:
            sim._order_eager()
            for op in self._ops:
                op()

    def upload(self, stream: Stream | None = None) -> None:
        """Prepare the graph on the device ahead of its first launch (nothing to do here)."""


def get_elapsed_time(start_event: Event, end_event: Event) -> float:
    """Milliseconds between two recorded events."""
    if start_event._t is None or end_event._t is None:
        raise CUDARuntimeError("cudaErrorInvalidResourceHandle: invalid resource handle")
    return (end_event._t - start_event._t) * 1000.0


def get_current_stream(device_id: int | None = None) -> Stream:
    """The calling thread's current stream (the null stream by default)."""
    return _sim()._tls_state().stream


def get_device_id() -> int:
    """The calling thread's current device ordinal."""
    return _sim()._tls_state().device


def is_available() -> bool:
    """Whether at least one device is usable."""
    return bool(_ACTIVE) and _sim().device_count > 0


# ======================================================================================
# device memory
# ======================================================================================


class BaseMemory:
    """Device memory: ``ptr`` (a device address), ``size`` in bytes, ``device_id``."""

    __slots__ = ("ptr", "size", "device_id", "_buf", "_sim", "__weakref__")
    ptr: int
    size: int
    device_id: int
    _buf: np.ndarray
    _sim: SimulatedCupy

    @property
    def device(self) -> Device:
        """The device holding the memory."""
        return Device(self.device_id)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} 0x{self.ptr:x} size={self.size} device={self.device_id}>"


def _aligned_buffer(size: int) -> np.ndarray:
    raw = np.empty(size + _ALIGN, dtype=np.uint8)
    off = (-raw.ctypes.data) % _ALIGN
    return raw[off : off + size]


class Memory(BaseMemory):
    """A raw allocation on the current device (``cudaMalloc``), metered and freed on death.

    Raises :class:`OutOfMemoryError` when the device's simulated capacity would be exceeded.
    """

    __slots__ = ()

    def __init__(self, size: int) -> None:
        sim = _sim()
        size = int(size)
        if size < 0:
            raise ValueError(f"negative allocation size {size}")
        dev = sim._current_device_state()
        sim._reserve(dev, size)
        try:
            buf = _aligned_buffer(size) if size else np.empty(0, dtype=np.uint8)
        except MemoryError:
            sim._unreserve(dev, size)
            raise OutOfMemoryError(size, dev.in_use) from None
        self.ptr = buf.ctypes.data if size else 0
        self.size = size
        self.device_id = dev.id
        self._buf = buf
        self._sim = sim
        if size:
            sim._register(self)
        weakref.finalize(self, sim._release, dev, size, self.ptr)


class UnownedMemory(BaseMemory):
    """Device memory CuPy does not own (``owner`` keeps it alive), e.g. another arena's.

    ``ptr`` must point into live simulated device memory.
    """

    __slots__ = ("_owner",)

    def __init__(self, ptr: int, size: int, owner: Any, device_id: int = -1) -> None:
        sim = _sim()
        ptr, size = int(ptr), int(size)
        if size == 0:
            buf = np.empty(0, dtype=np.uint8)
            dev = sim._tls_state().device if device_id < 0 else device_id
        else:
            raw = sim._lookup(ptr, size)
            start = ptr - raw.ptr
            buf = raw._buf[start : start + size]
            dev = raw.device_id
            if device_id >= 0 and device_id != dev:
                raise ValueError(
                    f"pointer 0x{ptr:x} is on device {dev}, not device {device_id}"
                )
        self.ptr = ptr
        self.size = size
        self.device_id = int(dev)
        self._buf = buf
        self._sim = sim
        self._owner = owner


class PooledMemory(BaseMemory):
    """A block handed out by a :class:`MemoryPool`; it returns to the pool when it dies."""

    __slots__ = ("_chunk", "_pool", "_freed")

    def __init__(self, chunk: MemoryPointer, pool: MemoryPool) -> None:
        self._chunk = chunk
        self._pool = weakref.ref(pool)
        self._freed = [False]
        self.ptr = chunk.ptr
        self.size = chunk.mem.size - chunk._offset
        self.device_id = chunk.device_id
        self._buf = chunk.mem._buf[chunk._offset :]
        self._sim = chunk.mem._sim
        weakref.finalize(self, MemoryPool._give_back, self._pool, chunk, self._freed)

    @property
    def pool(self) -> MemoryPool | None:
        """The pool the block belongs to."""
        return self._pool()

    def free(self) -> None:
        """Return the block to its pool now."""
        MemoryPool._give_back(self._pool, self._chunk, self._freed)


class MemoryPointer:
    """A pointer into device memory: ``mem`` plus an ``offset``; ``ptr`` is the address."""

    __slots__ = ("mem", "ptr", "device_id", "_offset", "__weakref__")

    def __init__(self, mem: BaseMemory, offset: int) -> None:
        if not isinstance(mem, BaseMemory):
            raise TypeError(f"mem must be a cupy.cuda.BaseMemory, not {type(mem).__name__}")
        offset = int(offset)
        if mem.size and not 0 <= offset <= mem.size:
            raise ValueError(f"offset {offset} is outside the {mem.size}-byte allocation")
        self.mem = mem
        self._offset = offset
        self.ptr = mem.ptr + offset if mem.ptr else 0
        self.device_id = mem.device_id

    @property
    def device(self) -> Device:
        """The device holding the memory."""
        return Device(self.device_id)

    def _bytes(self, size: int) -> np.ndarray:
        size = int(size)
        if self._offset + size > self.mem.size:
            raise ValueError(
                f"{size} bytes at offset {self._offset} run past the end of the "
                f"{self.mem.size}-byte allocation (out-of-bounds device access)"
            )
        return self.mem._buf[self._offset : self._offset + size]

    def copy_from_device(self, src: MemoryPointer, size: int) -> None:
        """Copy ``size`` bytes from device memory ``src`` (cross-device copies are counted)."""
        self.mem._sim._order_eager()
        dst = self._bytes(size)
        dst[...] = src._bytes(size)
        sim = self.mem._sim
        if src.device_id != self.device_id:
            sim._transfer("d2d", size)
        else:
            sim._count("launches")

    def copy_from_device_async(self, src: MemoryPointer, size: int, stream: Any = None) -> None:
        """Asynchronous :meth:`copy_from_device` (eager here)."""
        self.copy_from_device(src, size)

    def copy_from_host(self, mem: Any, size: int) -> None:
        """Copy ``size`` bytes from host address ``mem`` (an int or ctypes pointer); counted."""
        self.mem._sim._order_eager()
        dst = self._bytes(size)
        ctypes.memmove(dst.ctypes.data, _host_address(mem), int(size))
        self.mem._sim._transfer("h2d", size)

    def copy_from_host_async(self, mem: Any, size: int, stream: Any = None) -> None:
        """Asynchronous :meth:`copy_from_host` (eager here)."""
        self.copy_from_host(mem, size)

    def copy_to_host(self, mem: Any, size: int) -> None:
        """Copy ``size`` bytes to host address ``mem`` (an int or ctypes pointer); counted."""
        self.mem._sim._order_eager()
        src = self._bytes(size)
        ctypes.memmove(_host_address(mem), src.ctypes.data, int(size))
        self.mem._sim._transfer("d2h", size)

    def copy_to_host_async(self, mem: Any, size: int, stream: Any = None) -> None:
        """Asynchronous :meth:`copy_to_host` (eager here)."""
        self.copy_to_host(mem, size)

    def memset(self, value: int, size: int) -> None:
        """Set ``size`` bytes to ``value``."""
        self.mem._sim._order_eager()
        self._bytes(size)[...] = int(value) & 0xFF
        self.mem._sim._count("launches")

    def memset_async(self, value: int, size: int, stream: Any = None) -> None:
        """Asynchronous :meth:`memset` (eager here)."""
        self.memset(value, size)

    def __add__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.mem, self._offset + int(offset))

    def __sub__(self, offset: int) -> MemoryPointer:
        return MemoryPointer(self.mem, self._offset - int(offset))

    def __int__(self) -> int:
        return self.ptr

    def __repr__(self) -> str:
        return f"<MemoryPointer 0x{self.ptr:x} device={self.device_id}>"


def _host_address(mem: Any) -> int:
    if isinstance(mem, int):
        return mem
    if isinstance(mem, ctypes.c_void_p):
        return int(mem.value or 0)
    try:
        return ctypes.cast(mem, ctypes.c_void_p).value or 0
    except (TypeError, ctypes.ArgumentError):
        raise TypeError(f"not a host pointer: {type(mem).__name__}") from None


class MemoryPool:
    """CuPy's device memory pool, simulated: blocks rounded up to 512 bytes are cached
    after use and reused for requests of the same size; per-device limits.

    ``allocator`` (the base allocator for new blocks) defaults to raw :class:`Memory`.
    """

    def __init__(self, allocator: Callable[[int], MemoryPointer] | None = None) -> None:
        self._base = allocator
        self._lock = threading.Lock()
        self._free: dict[int, dict[int, list[MemoryPointer]]] = {}
        self._used: dict[int, int] = {}
        self._total: dict[int, int] = {}
        self._limit: dict[int, int] = {}

    @staticmethod
    def _give_back(pool_ref: Any, chunk: MemoryPointer, freed: list[bool]) -> None:
        if freed[0]:
            return
        freed[0] = True
        pool = pool_ref()
        if pool is None:
            return
        size = chunk.mem.size - chunk._offset
        with pool._lock:
            dev = chunk.device_id
            pool._used[dev] = pool._used.get(dev, 0) - size
            pool._free.setdefault(dev, {}).setdefault(size, []).append(chunk)

    def _new_chunk(self, size: int) -> MemoryPointer:
        if self._base is not None:
            return self._base(size)
        return MemoryPointer(Memory(size), 0)

    def malloc(self, size: int) -> MemoryPointer:
        """Allocate ``size`` bytes, from the pool's cached blocks when one fits exactly."""
        sim = _sim()
        dev = sim._current_device_state().id
        size = int(size)
        if size == 0:
            return MemoryPointer(Memory(0), 0)
        rounded = -(-size // _POOL_UNIT) * _POOL_UNIT
        chunk = None
        with self._lock:
            bucket = self._free.get(dev, {}).get(rounded)
            if bucket:
                chunk = bucket.pop()
        if chunk is None:
            limit = self._limit.get(dev, 0)
            if limit and self._total.get(dev, 0) + rounded > limit:
                self.free_all_blocks()
                if self._total.get(dev, 0) + rounded > limit:
                    raise OutOfMemoryError(size, self._total.get(dev, 0), limit)
            try:
                chunk = self._new_chunk(rounded)
            except OutOfMemoryError:
                self.free_all_blocks()
                try:
                    chunk = self._new_chunk(rounded)
                except OutOfMemoryError:
                    raise OutOfMemoryError(size, self._total.get(dev, 0), limit) from None
            with self._lock:
                self._total[dev] = self._total.get(dev, 0) + rounded
        with self._lock:
            self._used[dev] = self._used.get(dev, 0) + rounded
        return MemoryPointer(PooledMemory(chunk, self), 0)

    def used_bytes(self) -> int:
        """Bytes of the current device's blocks in use."""
        return self._used.get(_sim()._tls_state().device, 0)

    def total_bytes(self) -> int:
        """Bytes the pool holds on the current device (in use and cached)."""
        return self._total.get(_sim()._tls_state().device, 0)

    def free_bytes(self) -> int:
        """Bytes cached (held but unused) on the current device."""
        return self.total_bytes() - self.used_bytes()

    def n_free_blocks(self) -> int:
        """Number of cached blocks on the current device."""
        dev = _sim()._tls_state().device
        with self._lock:
            return sum(len(v) for v in self._free.get(dev, {}).values())

    def free_all_blocks(self, stream: Any = None) -> None:
        """Give the cached blocks of the current device back to the device."""
        dev = _sim()._tls_state().device
        with self._lock:
            buckets = self._free.pop(dev, {})
            released = sum(size * len(v) for size, v in buckets.items())
            self._total[dev] = self._total.get(dev, 0) - released
        buckets.clear()  # drop the chunks: their Memory is freed here

    def free_all_free(self) -> None:
        """Deprecated alias of :meth:`free_all_blocks`."""
        self.free_all_blocks()

    def set_limit(self, size: int | None = None, fraction: float | None = None) -> None:
        """Cap the pool's bytes on the current device (0 or nothing: no limit)."""
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at the same time")
        sim = _sim()
        dev = sim._current_device_state()
        if fraction is not None:
            if not 0 <= fraction <= 1:
                raise ValueError(f"fraction must be in [0, 1], got {fraction}")
            size = int(dev.capacity * fraction)
        self._limit[dev.id] = int(size or 0)

    def get_limit(self) -> int:
        """The current device's limit in bytes (0: none)."""
        return self._limit.get(_sim()._tls_state().device, 0)


def alloc(size: int) -> MemoryPointer:
    """Allocate ``size`` bytes with the current allocator."""
    return _sim()._alloc(int(size))


def set_allocator(allocator: Callable[[int], MemoryPointer] | None = None) -> None:
    """Set the process-wide allocator (``None``: raw ``Memory`` allocations)."""
    _sim()._allocator = allocator


def get_allocator() -> Callable[[int], MemoryPointer] | None:
    """The current allocator function."""
    sim = _sim()
    stack = sim._tls_state().allocators
    return stack[-1] if stack else sim._allocator


@contextlib.contextmanager
def using_allocator(allocator: Callable[[int], MemoryPointer] | None = None) -> Iterator[None]:
    """Use ``allocator`` for the calling thread inside the block (``None``: raw memory)."""
    stack = _sim()._tls_state().allocators
    stack.append(allocator)
    try:
        yield
    finally:
        stack.pop()


def get_default_memory_pool() -> MemoryPool:
    """The pool behind the default allocator."""
    return _sim()._pool


# ======================================================================================
# pinned host memory
# ======================================================================================


class PinnedMemory:
    """Page-locked host memory (simulated with ordinary host memory, metered)."""

    def __init__(self, size: int, flags: int = 0) -> None:
        sim = _sim()
        self._size = int(size)
        self._raw = (ctypes.c_ubyte * max(self._size, 1))()
        self._ptr = ctypes.addressof(self._raw)
        sim._pinned(self._size)
        weakref.finalize(self, sim._pinned, -self._size)


class PinnedMemoryPointer:
    """A pointer into pinned memory; supports the buffer protocol (``np.frombuffer``)."""

    __slots__ = ()

    def size(self) -> int:
        """Bytes from the pointer to the end of the allocation."""
        return ctypes.sizeof(self)  # type: ignore[arg-type]


@functools.lru_cache(maxsize=512)
def _pinned_pointer_class(size: int) -> type:
    # A ctypes array type of this size mixed with PinnedMemoryPointer: instances export the
    # buffer protocol (numpy can wrap them) and are PinnedMemoryPointer instances.
    return type(
        "PinnedMemoryPointer",
        (ctypes.c_ubyte * size, PinnedMemoryPointer),
        {"__slots__": ("mem", "ptr"), "__module__": __name__},
    )


def _pinned_pointer(mem: PinnedMemory, offset: int) -> PinnedMemoryPointer:
    size = mem._size - offset
    ptr = _pinned_pointer_class(size).from_address(mem._ptr + offset)
    ptr.mem = mem
    ptr.ptr = mem._ptr + offset
    return ptr


class PinnedMemoryPool:
    """Pinned memory allocator (no caching in the simulation)."""

    def malloc(self, size: int) -> PinnedMemoryPointer:
        """Allocate ``size`` bytes of pinned memory."""
        return _pinned_pointer(PinnedMemory(size), 0)

    def free_all_blocks(self) -> None:
        """Nothing is cached."""

    def n_free_blocks(self) -> int:
        """Nothing is cached: 0."""
        return 0


def alloc_pinned_memory(size: int) -> PinnedMemoryPointer:
    """Allocate ``size`` bytes of pinned host memory (wrap it with ``np.frombuffer``)."""
    return _sim()._pinned_pool.malloc(size)


def get_default_pinned_memory_pool() -> PinnedMemoryPool:
    """The pinned memory pool."""
    return _sim()._pinned_pool


def empty_pinned(shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
    """A numpy array in pinned host memory (contents undefined)."""
    dt = np.dtype(dtype)
    shape = _as_shape(shape)
    nbytes = math.prod(shape) * dt.itemsize
    mem = alloc_pinned_memory(nbytes)
    return np.ndarray(shape, dt, buffer=mem, order=order)


def zeros_pinned(shape: Any, dtype: Any = float, order: str = "C") -> np.ndarray:
    """A zero-filled numpy array in pinned host memory."""
    out = empty_pinned(shape, dtype, order)
    out[...] = 0
    return out


def empty_like_pinned(a: np.ndarray, dtype: Any = None, order: str = "K") -> np.ndarray:
    """A pinned numpy array shaped like ``a``."""
    return empty_pinned(a.shape, a.dtype if dtype is None else dtype)


def zeros_like_pinned(a: np.ndarray, dtype: Any = None, order: str = "K") -> np.ndarray:
    """A zero-filled pinned numpy array shaped like ``a``."""
    return zeros_pinned(a.shape, a.dtype if dtype is None else dtype)


# ======================================================================================
# device arrays
# ======================================================================================


def _as_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(s) for s in shape)


def _check_extent(memptr: MemoryPointer, a: np.ndarray) -> None:
    """Refuse a view reaching outside its allocation, or misaligned for its dtype."""
    if a.size == 0:
        return
    lo = hi = 0
    for n, st in zip(a.shape, a.strides):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    hi += a.itemsize
    mem = memptr.mem
    start = memptr.ptr + lo - mem.ptr
    end = memptr.ptr + hi - mem.ptr
    if start < 0 or end > mem.size:
        raise ValueError(
            f"array of shape {a.shape}, strides {a.strides} at 0x{memptr.ptr:x} reaches "
            f"outside its {mem.size}-byte allocation at 0x{mem.ptr:x} (out-of-bounds device "
            "access)"
        )
    if memptr.ptr % a.dtype.alignment:
        raise ValueError(
            f"device pointer 0x{memptr.ptr:x} is not aligned for {a.dtype} "
            f"({a.dtype.alignment}-byte alignment)"
        )


_BAD_KINDS = frozenset("OUSVMm")


def _check_dtype(dt: np.dtype[Any]) -> None:
    if dt.kind in _BAD_KINDS:
        raise TypeError(f"Unsupported dtype {dt}")


class _Flags:
    """Memory layout flags of a device array."""

    __slots__ = ("c_contiguous", "f_contiguous", "owndata")

    def __init__(self, a: ndarray) -> None:
        self.c_contiguous = bool(a._a.flags.c_contiguous)
        self.f_contiguous = bool(a._a.flags.f_contiguous)
        self.owndata = a._base is None

    def __getitem__(self, key: str) -> bool:
        return {
            "C_CONTIGUOUS": self.c_contiguous,
            "F_CONTIGUOUS": self.f_contiguous,
            "OWNDATA": self.owndata,
        }[key]

    def __repr__(self) -> str:
        return (
            f"  C_CONTIGUOUS : {self.c_contiguous}\n  F_CONTIGUOUS : {self.f_contiguous}\n"
            f"  OWNDATA : {self.owndata}"
        )


def _wrap(a: np.ndarray, memptr: MemoryPointer, base: ndarray | None) -> ndarray:
    obj = ndarray.__new__(ndarray)
    obj._a = a
    obj._ptr = memptr
    obj._base = base
    return obj


def _new_device_array(sim: SimulatedCupy, r: Any) -> ndarray:
    """Copy a numpy result into newly allocated device memory (no transfer counted)."""
    r = np.asarray(r)
    _check_dtype(r.dtype)
    memptr = sim._alloc(r.nbytes)
    a = np.ndarray(r.shape, r.dtype, buffer=memptr.mem._buf, offset=memptr._offset)
    if r.size:
        a[...] = r
    return _wrap(a, memptr, None)


def _wrap_result(sim: SimulatedCupy, r: Any, srcs: list[ndarray]) -> Any:
    """Turn a numpy result into device arrays: views of an input stay views."""
    if isinstance(r, (tuple, list)):
        return type(r)(_wrap_result(sim, v, srcs) for v in r)
    if isinstance(r, np.generic):
        r = np.asarray(r)
    elif not isinstance(r, np.ndarray):
        return r
    for s in srcs:
        if r is s._a:
            return s
    addr = r.__array_interface__["data"][0]
    for s in srcs:
        mem = s._ptr.mem
        if mem.size and mem.ptr <= addr < mem.ptr + mem.size:
            return _wrap(r, MemoryPointer(mem, addr - mem.ptr), s if s._base is None else s._base)
    return _new_device_array(sim, r)


def _check_device(sim: SimulatedCupy, x: ndarray) -> None:
    cur = sim._tls_state().device
    if x._ptr.device_id != cur:
        raise ValueError(
            "Array device must be same as the current device: array device = "
            f"{x._ptr.device_id} while current = {cur}"
        )


def _unwrap(sim: SimulatedCupy, x: Any, srcs: list[ndarray]) -> Any:
    if isinstance(x, ndarray):
        _check_device(sim, x)
        srcs.append(x)
        return x._a
    if isinstance(x, np.ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    if type(x) in (list, tuple):
        return type(x)(_unwrap(sim, v, srcs) for v in x)
    return x


#: Operations real CuPy runs through cuBLAS/hipBLAS (the others that compute run a kernel
#: compiled with NVRTC/hiprtc).
_BLAS_OPS = frozenset({"matmul", "dot", "einsum"})
#: Operations that only allocate or zero memory (cudaMalloc/cudaMemset: nothing compiled).
_NO_KERNEL_OPS = frozenset({"empty", "zeros", "empty_like", "zeros_like"})
#: Operations writing into an existing array (a kernel, though the result is an input).
_IN_PLACE_OPS = frozenset({"_setitem", "fill", "copyto"})


def _is_view(r: Any, srcs: list[ndarray]) -> bool:
    """Whether a numpy result only looks at the inputs' memory (no kernel ran)."""
    if isinstance(r, (tuple, list)):
        return bool(r) and all(_is_view(v, srcs) for v in r)
    if not isinstance(r, np.ndarray):
        return False
    if r.size == 0:
        return True
    addr = r.__array_interface__["data"][0]
    mems: list[Any] = [s._ptr.mem for s in srcs]
    return any(m.size and m.ptr <= addr < m.ptr + m.size for m in mems)


#: Operations whose result's shape depends on the data (or that read data on the host):
#: on a non-default stream they first run the stream's queue, as CuPy synchronizes there.
_DATA_SHAPED_OPS = frozenset({
    "nonzero", "unique_values", "unique_counts", "unique_inverse", "unique_all", "det", "inv",
    "repeat",
})


def _call(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``func`` (a numpy function) as a device operation.

    As in CuPy, an operation needing a library the simulation lacks (``missing_libraries``)
    fails before it writes anything: matmul-like operations need the BLAS library, every
    other operation that computes (not a view, not a bare allocation) a compiled kernel.

    On a non-default stream an operation producing a new array is queued (see
    :class:`Stream`): its output is allocated now, on the calling thread, and written when
    the stream runs, from the inputs' contents at that time.
    """
    sim = _sim()
    srcs: list[ndarray] = []
    a = [_unwrap(sim, v, srcs) for v in args]
    k = {key: _unwrap(sim, v, srcs) for key, v in kwargs.items()}
    name = getattr(func, "__name__", "")
    if name in _BLAS_OPS:
        sim._require("blas")
    elif name in _IN_PLACE_OPS or "out" in kwargs:
        sim._require("compiler")
    stream = sim._tls.stream
    if stream._capture is not None:
        return _capture_call(sim, stream, func, name, a, k, srcs, kwargs)
    if stream.ptr and name not in _IN_PLACE_OPS and "out" not in kwargs \
            and name not in _DATA_SHAPED_OPS and not (name == "_getitem" and len(srcs) > 1) \
            and not (name == "where" and len(args) == 1):
        queued = _queue_call(sim, stream, func, name, a, k, srcs)
        if queued is not None:
            return queued
    sim._order_eager()
    with np.errstate(all="ignore"):
        r = func(*a, **k)
    if name not in _BLAS_OPS | _NO_KERNEL_OPS | _IN_PLACE_OPS and "out" not in kwargs \
            and not _is_view(r, srcs):
        sim._require("compiler")
    sim._count("launches")
    return _wrap_result(sim, r, srcs)


#: What CuPy raises for a cuBLAS call on a capturing stream (its own bindings refuse it).
_CUBLAS_IN_CAPTURE = "calling cuBLAS API during stream capture is currently unsupported"


def _capture_call(
    sim: SimulatedCupy, stream: Stream, func: Callable[..., Any], name: str, a: list[Any],
    k: dict[str, Any], srcs: list[ndarray], kwargs: dict[str, Any],
) -> Any:
    """``func`` issued on a capturing stream: recorded, never run now."""
    if name in _BLAS_OPS:
        raise NotImplementedError(_CUBLAS_IN_CAPTURE)
    if name in _IN_PLACE_OPS or "out" in kwargs:
        def run() -> None:
            with np.errstate(all="ignore"):
                func(*a, **k)

        stream._enqueue(run)
        sim._count("launches")
        out = kwargs.get("out")
        return out if out is not None else None
    if name in _DATA_SHAPED_OPS or (name == "where" and len(a) == 1):
        stream._refuse(f"{name}: a result whose shape depends on data")
    queued = _queue_call(sim, stream, func, name, a, k, srcs)
    if queued is None:
        # The inputs' memory holds what the recorded work has not written yet (stale
        # indices may be out of range): learn the result's form from zeros instead.
        zeroed = [np.zeros_like(v) if isinstance(v, np.ndarray) else v for v in a]
        queued = _queue_call(sim, stream, func, name, a, k, srcs, probe_args=zeroed)
    if queued is None:
        stream._refuse(f"{name}: not one new array")
    return queued


def _queue_call(
    sim: SimulatedCupy, stream: Stream, func: Callable[..., Any], name: str, a: list[Any],
    k: dict[str, Any], srcs: list[ndarray], probe_args: list[Any] | None = None,
) -> Any:
    """Queue ``func`` on ``stream`` when it makes one new array; ``None``: run it in order
    now instead (its result is not one new array, or it fails on data not yet written).
    ``probe_args`` stand in for the inputs while learning the result's form."""
    try:
        with np.errstate(all="ignore"):
            # on the current contents: only to learn the result's form
            probe = func(*(a if probe_args is None else probe_args), **k)
    except Exception:
        return None
    if isinstance(probe, np.generic):
        probe = np.asarray(probe)
    if not isinstance(probe, np.ndarray):
        return None
    if _is_view(probe, srcs):  # no kernel: a view of an input, valid at once
        sim._count("launches")
        return _wrap_result(sim, probe, srcs)
    if name not in _BLAS_OPS | _NO_KERNEL_OPS:
        sim._require("compiler")
    _check_dtype(probe.dtype)
    memptr = sim._alloc(probe.nbytes)
    dst = np.ndarray(probe.shape, probe.dtype, buffer=memptr.mem._buf, offset=memptr._offset)

    def run() -> None:
        with np.errstate(all="ignore"):
            value = np.asarray(func(*a, **k))
        if value.shape != dst.shape:
            raise RuntimeError(
                f"simulated CuPy: {name} queued on a stream gave shape {value.shape} when it "
                f"ran but {dst.shape} when issued (its shape depends on data)"
            )
        if dst.size:
            dst[...] = value

    stream._enqueue(run)
    sim._count("launches")
    return _wrap(dst, memptr, None)


def _op(name: str, func: Callable[..., Any]) -> Callable[..., Any]:
    """A cupy function computing like numpy's ``func`` on device arrays."""

    def op(*args: Any, **kwargs: Any) -> Any:
        return _call(func, *args, **kwargs)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = _fill_doc(f"cupy.{name}")
    return op


def _method(name: str) -> Any:
    func = getattr(np.ndarray, name)

    def method(self: ndarray, *args: Any, **kwargs: Any) -> Any:
        return _call(func, self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = _fill_doc(f"cupy.ndarray.{name}")
    return method


def _binop(func: Callable[..., Any], reflected: bool = False) -> Any:
    if reflected:

        def op(self: ndarray, other: Any) -> Any:
            return _call(func, other, self)

    else:

        def op(self: ndarray, other: Any) -> Any:
            return _call(func, self, other)

    return op


def _inplace(func: Callable[..., Any]) -> Any:
    def op(self: ndarray, other: Any) -> ndarray:
        _call(func, self, other, out=self)
        return self

    return op


def _unary(func: Callable[..., Any]) -> Any:
    def op(self: ndarray) -> Any:
        return _call(func, self)

    return op


def _to_host_scalar(x: ndarray, kind: Callable[[Any], Any]) -> Any:
    if x.size != 1:
        raise TypeError("only length-1 arrays can be converted to Python scalars")
    x._ptr.mem._sim._order_eager()
    x._ptr.mem._sim._transfer("d2h", x.nbytes)
    return kind(x._a.reshape(-1)[0])


class ndarray:  # noqa: N801 - CuPy's name
    """A multi-dimensional array in (simulated) device memory.

    ``ndarray(shape, dtype=float, memptr=None, strides=None, order='C')`` allocates through
    the current allocator, or lays the array over ``memptr`` (so an external arena can own
    the bytes). Implicit conversion to numpy is refused; use :meth:`get`.
    """

    __slots__ = ("_a", "_ptr", "_base", "__weakref__")

    def __init__(
        self,
        shape: Any,
        dtype: Any = float,
        memptr: MemoryPointer | None = None,
        strides: Any = None,
        order: str = "C",
    ) -> None:
        sim = _sim()
        shape = _as_shape(shape)
        dt = np.dtype(dtype)
        _check_dtype(dt)
        if memptr is None:
            memptr = sim._alloc(math.prod(shape) * dt.itemsize)
        elif not isinstance(memptr, MemoryPointer):
            raise TypeError(f"memptr must be a cupy.cuda.MemoryPointer, not {type(memptr).__name__}")
        view = _layout(memptr, shape, dt, strides, order)
        self._a = view
        self._ptr = memptr
        self._base = None

    # ------------------------------------------------------------------ attributes
    @property
    def shape(self) -> tuple[int, ...]:
        """Lengths of the axes."""
        return self._a.shape

    @property
    def dtype(self) -> np.dtype[Any]:
        """Element type."""
        return self._a.dtype

    @property
    def ndim(self) -> int:
        """Number of axes."""
        return self._a.ndim

    @property
    def size(self) -> int:
        """Number of elements."""
        return self._a.size

    @property
    def nbytes(self) -> int:
        """Bytes of the elements."""
        return self._a.nbytes

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._a.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        """Bytes to step along each axis."""
        return self._a.strides

    @property
    def data(self) -> MemoryPointer:
        """Pointer to the first element's memory."""
        return self._ptr

    @property
    def base(self) -> ndarray | None:
        """The array this one is a view of, or ``None``."""
        return self._base

    @property
    def device(self) -> Device:
        """The device holding the array."""
        return Device(self._ptr.device_id)

    @property
    def flags(self) -> _Flags:
        """Memory layout flags (``c_contiguous``, ``f_contiguous``, ``owndata``)."""
        return _Flags(self)

    @property
    def T(self) -> ndarray:  # noqa: N802 - numpy's name
        """The transposed view."""
        return _call(np.transpose, self)

    @property
    def mT(self) -> ndarray:  # noqa: N802 - numpy's name
        """The view with the last two axes swapped."""
        return _call(np.swapaxes, self, -1, -2)

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        a = self._a
        return {
            "shape": a.shape,
            "typestr": a.dtype.str,
            "descr": a.dtype.descr,
            "data": (a.__array_interface__["data"][0] if a.size else 0, False),
            "strides": None if a.flags.c_contiguous else a.strides,
            "version": 3,
        }

    # ------------------------------------------------------------------ conversion
    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise TypeError(_IMPLICIT)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        raise TypeError(
            f"numpy.{getattr(ufunc, '__name__', ufunc)} was called on a (simulated) CuPy "
            "array; call the cupy function instead"
        )

    def __array_function__(self, func: Any, types_: Any, args: Any, kwargs: Any) -> Any:
        raise TypeError(
            f"numpy.{getattr(func, '__name__', func)} was called on a (simulated) CuPy "
            "array; call the cupy function instead"
        )

    def get(
        self, stream: Any = None, order: str = "C", out: np.ndarray | None = None,
        blocking: bool = True,
    ) -> np.ndarray:
        """Copy to host memory (a device→host transfer, counted); waits for the current
        stream first, as CuPy's blocking copy does."""
        sim = self._ptr.mem._sim
        sim._order_eager()
        if out is not None:
            if not isinstance(out, np.ndarray):
                raise TypeError("Only numpy.ndarray can be obtained from cupy.ndarray")
            if out.shape != self.shape or out.dtype != self.dtype:
                raise ValueError(
                    f"Shape/dtype mismatch: out {out.shape} {out.dtype}, array "
                    f"{self.shape} {self.dtype}"
                )
            out[...] = self._a
            sim._transfer("d2h", self.nbytes)
            return out
        sim._transfer("d2h", self.nbytes)
        if order == "A":
            order = "F" if self._a.flags.f_contiguous and not self._a.flags.c_contiguous else "C"
        return np.array(self._a, order=order, copy=True)

    def set(self, arr: np.ndarray, stream: Any = None) -> None:
        """Copy host array ``arr`` into this array (a host→device transfer, counted)."""
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"Only numpy.ndarray can be set to cupy.ndarray, not {type(arr)}")
        if arr.shape != self.shape:
            raise ValueError(f"Shape mismatch. Old shape: {self.shape}, new shape: {arr.shape}")
        if arr.dtype != self.dtype:
            raise TypeError(f"{arr.dtype} array cannot be set to {self.dtype} array")
        self._ptr.mem._sim._order_eager()
        self._a[...] = arr
        self._ptr.mem._sim._transfer("h2d", self.nbytes)

    def item(self) -> Any:
        """The single element as a Python scalar (a device→host transfer)."""
        if self.size != 1:
            raise ValueError("can only convert an array of size 1 to a Python scalar")
        self._ptr.mem._sim._order_eager()
        self._ptr.mem._sim._transfer("d2h", self.nbytes)
        return self._a.reshape(-1)[0].item()

    def tolist(self) -> Any:
        """The elements as nested Python lists (a device→host transfer)."""
        self._ptr.mem._sim._order_eager()
        self._ptr.mem._sim._transfer("d2h", self.nbytes)
        return self._a.tolist()

    def tobytes(self, order: str = "C") -> bytes:
        """The raw bytes (a device→host transfer)."""
        self._ptr.mem._sim._order_eager()
        self._ptr.mem._sim._transfer("d2h", self.nbytes)
        return self._a.tobytes(order=order)

    def __float__(self) -> float:
        return _to_host_scalar(self, float)

    def __int__(self) -> int:
        return _to_host_scalar(self, int)

    def __complex__(self) -> complex:
        return _to_host_scalar(self, complex)

    def __bool__(self) -> bool:
        if self.size == 0:
            raise ValueError("The truth value of an empty array is ambiguous.")
        if self.size > 1:
            raise ValueError(
                "The truth value of an array with more than one element is ambiguous."
            )
        return _to_host_scalar(self, bool)

    def __len__(self) -> int:
        if not self.ndim:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __iter__(self) -> Iterator[ndarray]:
        if not self.ndim:
            raise TypeError("iteration over a 0-d array")
        for i in range(self.shape[0]):
            yield self[i]

    def __repr__(self) -> str:
        self._ptr.mem._sim._transfer("d2h", self.nbytes)
        return repr(self._a)

    def __str__(self) -> str:
        self._ptr.mem._sim._transfer("d2h", self.nbytes)
        return str(self._a)

    def __dlpack_device__(self) -> tuple[int, int]:
        hip = self._ptr.mem._sim.hip
        return (_KDL_ROCM if hip else _KDL_CUDA, self._ptr.device_id)

    def __dlpack__(
        self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
        copy: Any = None,
    ) -> Any:
        if dl_device is not None and tuple(dl_device)[0] == 1 and copy:
            self._ptr.mem._sim._transfer("d2h", self.nbytes)
            return np.array(self._a).__dlpack__()
        raise BufferError(
            "simulated CuPy: device memory can only be shared through DLPack with "
            "cupy.from_dlpack (a host consumer must ask for a copy, or use .get())"
        )

    def toDlpack(self) -> Any:  # noqa: N802 - CuPy's name
        """A DLPack handle of this array (only :func:`from_dlpack` of the simulation reads it)."""
        return _SimCapsule(self)

    # ------------------------------------------------------------------ copies
    def copy(self, order: str = "C") -> ndarray:
        """A copy on the current device (a device→device transfer if it lives elsewhere)."""
        sim = _sim()
        if self._ptr.device_id != sim._tls_state().device:
            sim._device_state(sim._tls_state().device)
            sim._order_eager()
            out = _new_device_array(sim, np.array(self._a, order=order))
            sim._transfer("d2d", self.nbytes)
            return out
        return _call(np.array, self, order=order, copy=True)

    def astype(
        self, dtype: Any, order: str = "K", casting: Any = None, subok: Any = None,
        copy: bool = True,
    ) -> ndarray:
        """The array cast to ``dtype`` (itself when ``copy=False`` and nothing changes)."""
        dt = np.dtype(dtype)
        if not copy and dt == self.dtype:
            return self
        _check_dtype(dt)
        kw = {} if casting is None else {"casting": casting}
        return _call(np.ndarray.astype, self, dt, order=order, **kw)

    def view(self, dtype: Any = None) -> ndarray:
        """A view with another dtype (or the same)."""
        if dtype is None:
            return _call(np.ndarray.view, self)
        return _call(np.ndarray.view, self, np.dtype(dtype))

    def fill(self, value: Any) -> None:
        """Set every element to ``value``."""
        _call(np.ndarray.fill, self, value)

    # ------------------------------------------------------------------ indexing
    def __getitem__(self, key: Any) -> Any:
        return _call(_getitem, self, _index_key(key))

    def __setitem__(self, key: Any, value: Any) -> None:
        _call(_setitem, self, _index_key(key), value)

    # ------------------------------------------------------------------ operators
    __add__ = _binop(np.add)
    __radd__ = _binop(np.add, True)
    __sub__ = _binop(np.subtract)
    __rsub__ = _binop(np.subtract, True)
    __mul__ = _binop(np.multiply)
    __rmul__ = _binop(np.multiply, True)
    __truediv__ = _binop(np.true_divide)
    __rtruediv__ = _binop(np.true_divide, True)
    __floordiv__ = _binop(np.floor_divide)
    __rfloordiv__ = _binop(np.floor_divide, True)
    __mod__ = _binop(np.remainder)
    __rmod__ = _binop(np.remainder, True)
    __pow__ = _binop(np.power)
    __rpow__ = _binop(np.power, True)
    def __matmul__(self, other: Any) -> Any:
        return _matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return _matmul(other, self)

    __and__ = _binop(np.bitwise_and)
    __rand__ = _binop(np.bitwise_and, True)
    __or__ = _binop(np.bitwise_or)
    __ror__ = _binop(np.bitwise_or, True)
    __xor__ = _binop(np.bitwise_xor)
    __rxor__ = _binop(np.bitwise_xor, True)
    __lshift__ = _binop(np.left_shift)
    __rshift__ = _binop(np.right_shift)
    __eq__ = _binop(np.equal)  # type: ignore[assignment]
    __ne__ = _binop(np.not_equal)  # type: ignore[assignment]
    __lt__ = _binop(np.less)
    __le__ = _binop(np.less_equal)
    __gt__ = _binop(np.greater)
    __ge__ = _binop(np.greater_equal)
    __iadd__ = _inplace(np.add)
    __isub__ = _inplace(np.subtract)
    __imul__ = _inplace(np.multiply)
    __itruediv__ = _inplace(np.true_divide)
    __ifloordiv__ = _inplace(np.floor_divide)
    __imod__ = _inplace(np.remainder)
    __ipow__ = _inplace(np.power)
    __iand__ = _inplace(np.bitwise_and)
    __ior__ = _inplace(np.bitwise_or)
    __ixor__ = _inplace(np.bitwise_xor)
    __neg__ = _unary(np.negative)
    __pos__ = _unary(np.positive)
    __abs__ = _unary(np.absolute)
    __invert__ = _unary(np.invert)
    __hash__ = None  # type: ignore[assignment]

    # ------------------------------------------------------------------ methods
    reshape = _method("reshape")
    transpose = _method("transpose")
    swapaxes = _method("swapaxes")
    ravel = _method("ravel")
    flatten = _method("flatten")
    squeeze = _method("squeeze")
    repeat = _method("repeat")
    sum = _method("sum")
    prod = _method("prod")
    mean = _method("mean")
    var = _method("var")
    std = _method("std")
    max = _method("max")
    min = _method("min")
    argmax = _method("argmax")
    argmin = _method("argmin")
    all = _method("all")
    any = _method("any")
    cumsum = _method("cumsum")
    clip = _method("clip")
    dot = _method("dot")
    nonzero = _method("nonzero")
    round = _method("round")

    def take(self, indices: Any, axis: int | None = None, out: Any = None) -> ndarray:
        """Elements at ``indices`` along ``axis``; like CuPy, indices wrap around."""
        if out is not None:
            return _call(_take, self, indices, axis, out=out)
        return _call(_take, self, indices, axis)


def _layout(
    memptr: MemoryPointer, shape: tuple[int, ...], dt: np.dtype[Any], strides: Any, order: str
) -> np.ndarray:
    """The numpy view of ``shape``/``dt`` laid over ``memptr``, bounds- and alignment-checked."""
    if strides is None:
        if order not in ("C", "F"):
            raise ValueError(f"order must be 'C' or 'F', not {order!r}")
        strides = _default_strides(shape, dt.itemsize, order)
    strides = tuple(int(s) for s in strides)
    if len(strides) != len(shape):
        raise ValueError(f"strides {strides} do not match shape {shape}")
    # Checked before numpy sees the buffer, for a clearer message than numpy's.
    _check_extent(memptr, _Extent(shape, strides, dt))  # type: ignore[arg-type]
    return np.ndarray(shape, dt, buffer=memptr.mem._buf, offset=memptr._offset, strides=strides)


class _Extent:
    """Shape/strides/dtype stand-in for :func:`_check_extent` before a view exists."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...], dt: np.dtype[Any]) -> None:
        self.shape = shape
        self.strides = strides
        self.dtype = dt
        self.itemsize = dt.itemsize
        self.size = math.prod(shape)


def _default_strides(shape: tuple[int, ...], itemsize: int, order: str) -> tuple[int, ...]:
    strides = [0] * len(shape)
    step = itemsize
    axes = range(len(shape) - 1, -1, -1) if order == "C" else range(len(shape))
    for i in axes:
        strides[i] = step
        step *= max(shape[i], 1)
    return tuple(strides)


class _SimCapsule:
    """The handle :meth:`ndarray.toDlpack` returns; only :func:`from_dlpack` reads it."""

    def __init__(self, array: ndarray) -> None:
        self._array = array


def _index_key(key: Any) -> Any:
    """Refuse host (numpy) index arrays: CuPy kernels must index with device arrays."""
    if isinstance(key, np.ndarray):
        raise TypeError(f"Unsupported type {type(key)} as an index: upload it first")
    if isinstance(key, tuple):
        for k in key:
            if isinstance(k, np.ndarray):
                raise TypeError(f"Unsupported type {type(k)} as an index: upload it first")
    return key


def _getitem(a: np.ndarray, key: Any) -> Any:
    return a[key]


def _setitem(a: np.ndarray, key: Any, value: Any) -> None:
    a[key] = value


def _take(a: np.ndarray, indices: Any, axis: int | None = None, out: Any = None) -> np.ndarray:
    # Wrapped by a remainder: numpy's mode="wrap" steps a far-out index back one length
    # at a time, which takes forever on an index array a queued kernel has not written yet.
    n = a.size if axis is None else a.shape[axis]
    if n:
        indices = np.remainder(indices, n)
    return np.take(a, indices, axis=axis, out=out)


# ======================================================================================
# array creation and host <-> device
# ======================================================================================


def _upload(sim: SimulatedCupy, host: Any, dtype: Any = None, order: Any = None) -> ndarray:
    arr = np.asarray(host, dtype=dtype, order=order)
    _check_dtype(arr.dtype)
    sim._current_device_state()
    sim._order_eager()
    out = _new_device_array(sim, arr)
    sim._transfer("h2d", arr.nbytes)
    return out


def _from_interface(sim: SimulatedCupy, obj: Any) -> ndarray:
    iface = obj.__cuda_array_interface__
    shape = tuple(iface["shape"])
    dt = np.dtype(iface["typestr"])
    ptr = int(iface["data"][0])
    strides = iface.get("strides")
    if strides is None:
        strides = _default_strides(shape, dt.itemsize, "C")
    size = math.prod(shape)
    if size == 0:
        return ndarray(shape, dt)
    hi = sum((n - 1) * st for n, st in zip(shape, strides) if st > 0) + dt.itemsize
    lo = sum((n - 1) * st for n, st in zip(shape, strides) if st < 0)
    mem = UnownedMemory(ptr + lo, hi - lo, obj)
    return ndarray(shape, dt, MemoryPointer(mem, -lo), strides)


def asarray(a: Any, dtype: Any = None, order: Any = None, *, blocking: bool = False) -> ndarray:
    """A device array of ``a``: device arrays pass through (cast if asked), host data is
    copied to the current device (a host→device transfer, counted)."""
    sim = _sim()
    if isinstance(a, ndarray):
        if a._ptr.device_id != sim._tls_state().device:
            a = a.copy()
        return a if dtype is None else a.astype(dtype, copy=False)
    if hasattr(a, "__cuda_array_interface__"):
        out = _from_interface(sim, a)
        return out if dtype is None else out.astype(dtype, copy=False)
    return _upload(sim, a, dtype, order)


def asanyarray(a: Any, dtype: Any = None, order: Any = None, *, blocking: bool = False) -> ndarray:
    """Same as :func:`asarray`."""
    return asarray(a, dtype, order, blocking=blocking)


def array(
    obj: Any, dtype: Any = None, copy: bool = True, order: str = "K", subok: bool = False,
    ndmin: int = 0, *, blocking: bool = False,
) -> ndarray:
    """A new device array of ``obj`` (host data is transferred, counted)."""
    sim = _sim()
    if isinstance(obj, ndarray):
        if not copy and (dtype is None or np.dtype(dtype) == obj.dtype) and obj.ndim >= ndmin:
            return asarray(obj)
        out = obj.copy() if dtype is None else obj.astype(dtype)
        if out is obj:
            out = obj.copy()
        if out.ndim < ndmin:
            out = out.reshape((1,) * (ndmin - out.ndim) + out.shape)
        return out
    host = np.array(obj, dtype=dtype, ndmin=ndmin)
    return _upload(sim, host)


def ascontiguousarray(a: Any, dtype: Any = None) -> ndarray:
    """``a`` as a C-contiguous device array (host data is transferred, counted)."""
    if not isinstance(a, ndarray):
        return _upload(_sim(), np.ascontiguousarray(a, dtype=dtype))
    return _call(np.ascontiguousarray, a, dtype=dtype)


def asnumpy(
    a: Any, stream: Any = None, order: str = "C", out: np.ndarray | None = None,
    *, blocking: bool = True,
) -> np.ndarray:
    """A host (numpy) array of ``a``: device arrays are copied back (counted)."""
    if isinstance(a, ndarray):
        return a.get(stream=stream, order=order, out=out, blocking=blocking)
    if out is not None:
        out[...] = a
        return out
    return np.asarray(a, order=order)


def from_dlpack(array: Any, *, device: Any = None, copy: Any = None) -> ndarray:
    """A device array sharing memory with a DLPack producer on this (simulated) device."""
    if isinstance(array, _SimCapsule):
        array = array._array
    if isinstance(array, ndarray):
        return array[...]
    if hasattr(array, "__cuda_array_interface__"):
        return _from_interface(_sim(), array)
    dev = array.__dlpack_device__() if hasattr(array, "__dlpack_device__") else None
    raise BufferError(
        f"simulated CuPy: cannot import DLPack device {dev} without a copy; only device "
        "memory of the simulation can be shared"
    )


def get_array_module(*args: Any) -> types.ModuleType:
    """The simulated cupy module if any argument is a device array, else numpy."""
    for a in args:
        if isinstance(a, ndarray):
            return _sim().modules["cupy"]
    return np


def _take_fn(a: Any, indices: Any, axis: int | None = None, out: Any = None) -> ndarray:
    """Elements of ``a`` at ``indices`` along ``axis``; like CuPy, indices wrap around."""
    if out is not None:
        return _call(_take, a, indices, axis, out=out)
    return _call(_take, a, indices, axis)


def _byte_span(a: np.ndarray) -> tuple[int, int]:
    """Host addresses [first byte, past the last byte) that ``a``'s elements occupy."""
    addr = a.__array_interface__["data"][0]
    lo = sum((n - 1) * st for n, st in zip(a.shape, a.strides) if st < 0)
    hi = sum((n - 1) * st for n, st in zip(a.shape, a.strides) if st > 0) + a.itemsize
    return addr + lo, addr + hi


def _as_strided(x: Any, shape: Any = None, strides: Any = None) -> ndarray:
    """A strided view of ``x``, refused if it reaches outside the elements of ``x``'s base
    array (a read past an array is a bug even where the allocation is larger)."""
    if not isinstance(x, ndarray):
        raise TypeError(f"Unsupported type {type(x)}")
    sim = _sim()
    _check_device(sim, x)
    shape = x.shape if shape is None else _as_shape(shape)
    strides = x.strides if strides is None else tuple(int(s) for s in strides)
    base = x if x._base is None else x._base
    r = np.lib.stride_tricks.as_strided(x._a, shape=shape, strides=strides)
    if r.size:
        lo, hi = _byte_span(r)
        blo, bhi = _byte_span(base._a) if base.size else (0, 0)
        if lo < blo or hi > bhi:
            raise ValueError(
                f"as_strided view of shape {shape}, strides {strides} reaches outside its "
                f"base array of shape {base.shape} (out-of-bounds device access)"
            )
    sim._count("launches")
    return _wrap_result(sim, r, [x])


def _special_ufunc(name: str, fn: Callable[[float], float]) -> Callable[..., Any]:
    """A ``cupyx.scipy.special`` ufunc with CuPy's ``f->f``/``d->d`` loops (float16 and
    small integers compute in float32), evaluated exactly with ``math.<fn>``."""
    exact = np.frompyfunc(fn, 1, 1)

    def compute(a: Any, out: Any = None) -> np.ndarray:
        a = np.asarray(a)
        dt = a.dtype if a.dtype.kind == "f" else np.result_type(a.dtype, np.float32)
        if dt == np.float16:
            dt = np.dtype(np.float32)
        r = np.asarray(exact(a.astype(np.float64)), dtype=np.float64).reshape(a.shape)
        r = r.astype(dt)
        if out is not None:
            out[...] = r
            return out
        return r

    def ufunc(x: Any, out: Any = None) -> ndarray:
        if isinstance(x, np.ndarray):
            raise TypeError(f"Unsupported type {type(x)}")
        return _call(compute, x, out=out) if out is not None else _call(compute, x)

    ufunc.__name__ = ufunc.__qualname__ = name
    ufunc.__doc__ = f"Simulated ``cupyx.scipy.special.{name}`` (exact, via math.{name})."
    return ufunc


_erf = _special_ufunc("erf", math.erf)
_erfc = _special_ufunc("erfc", math.erfc)


class _Fused:
    """What :func:`fuse` returns: runs the function on device arrays as one launch."""

    def __init__(self, func: Callable[..., Any], kernel_name: str | None = None) -> None:
        self._func = func
        self.__name__ = kernel_name or getattr(func, "__name__", "fused")
        self.__doc__ = getattr(func, "__doc__", None)

    def __call__(self, *args: Any) -> Any:
        for a in args:
            if isinstance(a, np.ndarray):
                raise TypeError(f"Unsupported type {type(a)}")
        sim = _sim()
        tls = sim._tls_state()
        tls.fusing += 1
        try:
            r = self._func(*args)
        finally:
            tls.fusing -= 1
        sim._count("launches")
        return r


def fuse(*args: Any, **kwargs: Any) -> Any:
    """Decorator fusing an elementwise function (run op by op in the simulation)."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return _Fused(args[0])

    def decorator(func: Callable[..., Any]) -> _Fused:
        return _Fused(func, kwargs.get("kernel_name"))

    return decorator


# ======================================================================================
# matrix products: cupy.matmul's element types, and cupy.cuda.cublas
# ======================================================================================


@record(frozen=True)
class GemmCall:
    """One GEMM the simulated device ran (test-only, in :attr:`SimulatedCupy.gemm_calls`).

    ``api``: ``"cupy.matmul"``, ``"gemmEx"`` or ``"gemmStridedBatchedEx"``; ``data_type``:
    the element type the GEMM read; ``compute_type``: how it accumulated — ``"32F"``,
    ``"32F_FAST_TF32"``, ``"32F_PEDANTIC"``, ``"16F"``, ``"64F"``, or ``"default"`` for a
    float32 ``cupy.matmul`` (CuPy's own setting, ``CUPY_TF32``); ``batch``, ``m``, ``n``,
    ``k``: the problem's size (``m x k`` times ``k x n``, ``batch`` times) — for
    ``cupy.matmul`` in the row-major terms of its operands, for the cuBLAS functions their
    own column-major arguments (a row-major ``A @ B`` is called as ``B^T @ A^T``).
    """

    api: str
    data_type: np.dtype[Any]
    compute_type: str
    batch: int
    m: int
    n: int
    k: int


def _matmul_sizes(x1: ndarray, x2: ndarray) -> tuple[int, int, int, int]:
    m = x1.shape[-2] if x1.ndim > 1 else 1
    n = x2.shape[-1] if x2.ndim > 1 else 1
    batch = math.prod(np.broadcast_shapes(x1.shape[:-2], x2.shape[:-2]))
    return batch, m, n, x1.shape[-1]


def _matmul(x1: Any, x2: Any, out: Any = None) -> Any:
    """``cupy.matmul`` with CuPy 14.2's element types: a batched product (an operand of
    rank > 2) of float16 operands copies both to float32, multiplies in float32 and
    copies the result back to float16 (counted: ``matmul_upcasts``); a 2-D float16 product
    reads float16 and accumulates in float32 (``gemmEx``)."""
    sim = _sim()
    if not (isinstance(x1, ndarray) and isinstance(x2, ndarray) and x1.ndim and x2.ndim):
        return _call(np.matmul, x1, x2) if out is None else _call(np.matmul, x1, x2, out=out)
    dt = np.result_type(x1.dtype, x2.dtype)
    if dt == np.float16 and max(x1.ndim, x2.ndim) > 2:
        sim._require("blas")
        single = np.dtype(np.float32)
        product = _call(np.matmul, x1.astype(single), x2.astype(single))
        sim._count("matmul_upcasts")
        sim._gemm(GemmCall("cupy.matmul", single, "default", *_matmul_sizes(x1, x2)))
        result = product.astype(np.float16)
        if out is None:
            return result
        _call(np.copyto, out, result)
        return out
    result = _call(np.matmul, x1, x2) if out is None else _call(np.matmul, x1, x2, out=out)
    if dt.kind == "f":
        compute = {2: "32F", 4: "default", 8: "64F"}[dt.itemsize]
        sim._gemm(GemmCall("cupy.matmul", dt, compute, *_matmul_sizes(x1, x2)))
    return result


_matmul.__name__ = _matmul.__qualname__ = "matmul"


class CUBLASError(RuntimeError):
    """A cuBLAS error status (``status``), as ``cupy_backends.cuda.libs.cublas`` raises."""

    _NAMES = {7: "CUBLAS_STATUS_INVALID_VALUE", 15: "CUBLAS_STATUS_NOT_SUPPORTED"}

    def __init__(self, status: int) -> None:
        self.status = int(status)
        super().__init__(self._NAMES.get(self.status, f"CUBLAS_STATUS_{self.status}"))

    def __reduce__(self) -> Any:
        return (type(self), (self.status,))


# cuBLAS's and CUDA's enumeration values (cublas_api.h, library_types.h).
_OP_N, _OP_T = 0, 1
_COMPUTE_TYPES = {64: "16F", 68: "32F", 69: "32F_PEDANTIC", 77: "32F_FAST_TF32", 70: "64F"}
_CUDA_DATA_TYPES: dict[int, np.dtype[Any]] = {
    2: np.dtype(np.float16), 0: np.dtype(np.float32), 1: np.dtype(np.float64),
}
_GEMM_DEFAULT = -1
_GEMM_DEFAULT_TENSOR_OP = 99


def get_cublas_handle() -> int:
    """The calling thread's cuBLAS handle for the current device (needs cuBLAS)."""
    sim = _sim()
    sim._require("blas")
    return 0x10000 + sim._current_device_state().id


def _round_to_tf32(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to TF32's 10-bit mantissa, as tensor cores read them."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _host_scalar(ptr: int, dt: np.dtype[Any]) -> float:
    return float(np.frombuffer(ctypes.string_at(int(ptr), dt.itemsize), dt)[0])


def _blas_matrices(
    sim: SimulatedCupy, ptr: int, dt: np.dtype[Any], trans: int, rows: int, cols: int,
    ld: int, stride: int, batch: int,
) -> np.ndarray:
    """``op(X)`` as a (batch, rows, cols) view of column-major device memory."""
    if trans not in (_OP_N, _OP_T) or stride < 0:
        raise CUBLASError(7)
    stored_rows, stored_cols = (rows, cols) if trans == _OP_N else (cols, rows)
    if ld < max(1, stored_rows):
        raise CUBLASError(7)
    isz = dt.itemsize
    extent = ((batch - 1) * stride + (stored_cols - 1) * ld + stored_rows) * isz
    mem = sim._lookup(int(ptr), extent)
    view = np.ndarray((batch, stored_rows, stored_cols), dt, buffer=mem._buf,
                      offset=int(ptr) - mem.ptr, strides=(stride * isz, isz, ld * isz))
    return view if trans == _OP_N else view.transpose(0, 2, 1)


def _gemm_strided(
    api: str, handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int,
    a: int, a_type: int, lda: int, stride_a: int, b: int, b_type: int, ldb: int, stride_b: int,
    beta: int, c: int, c_type: int, ldc: int, stride_c: int, batch: int, compute_type: int,
    stream: Stream | None = None,
) -> None:
    """One (strided-batched) GEMM on ``stream`` — the current stream through CuPy's
    bindings (``stream=None``), which refuse a capturing stream as CuPy does; the handle's
    stream through :class:`CublasLibrary`."""
    sim = _sim()
    sim._require("blas")
    if stream is None and sim._tls.stream._capture is not None:
        raise NotImplementedError(_CUBLAS_IN_CAPTURE)
    compute = _COMPUTE_TYPES.get(int(compute_type))
    data = _CUDA_DATA_TYPES.get(int(a_type))
    c_dt = _CUDA_DATA_TYPES.get(int(c_type))
    if compute is None or data is None or c_dt is None or int(b_type) != int(a_type):
        raise CUBLASError(15)
    allowed = {"16F": {"float16"}, "32F": {"float16", "float32"},
               "32F_PEDANTIC": {"float16", "float32"}, "32F_FAST_TF32": {"float32"},
               "64F": {"float64"}}[compute]
    if data.name not in allowed or min(m, n, k, batch) < 0:
        raise CUBLASError(15 if data.name not in allowed else 7)
    if m == 0 or n == 0 or batch == 0:
        return
    acc = np.dtype({"16F": np.float16, "64F": np.float64}.get(compute, np.float32))
    alpha_v, beta_v = _host_scalar(alpha, acc), _host_scalar(beta, acc)
    if k == 0:
        opa = np.zeros((batch, m, 0), data)
        opb = np.zeros((batch, 0, n), data)
    else:
        opa = _blas_matrices(sim, a, data, transa, m, k, lda, stride_a, batch)
        opb = _blas_matrices(sim, b, data, transb, k, n, ldb, stride_b, batch)
    out = _blas_matrices(sim, c, c_dt, _OP_N, m, n, ldc, stride_c, batch)

    def run() -> None:
        x, y = opa.astype(acc), opb.astype(acc)
        if compute == "32F_FAST_TF32" and sim.emulate_tf32:
            x, y = _round_to_tf32(x), _round_to_tf32(y)
        with np.errstate(all="ignore"):
            r = np.matmul(x, y) * acc.type(alpha_v)
            if beta_v != 0.0:  # cuBLAS does not read C when beta is 0
                r = r + out.astype(acc) * acc.type(beta_v)
        out[...] = r.astype(c_dt)

    sim._gemm(GemmCall(api, data, compute, int(batch), int(m), int(n), int(k)))
    sim._count("launches")
    sim._issue(run, stream)


def _gemm_ex(
    handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, A: int,
    Atype: int, lda: int, B: int, Btype: int, ldb: int, beta: int, C: int, Ctype: int,
    ldc: int, computeType: int, algo: int,
) -> None:
    """``cublasGemmEx`` (column-major): ``C = alpha * op(A) @ op(B) + beta * C``, on the
    current stream, element and compute types as given."""
    _gemm_strided("gemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                  Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType)


def _gemm_strided_batched_ex(
    handle: int, transa: int, transb: int, m: int, n: int, k: int, alpha: int, A: int,
    Atype: int, lda: int, strideA: int, B: int, Btype: int, ldb: int, strideB: int,
    beta: int, C: int, Ctype: int, ldc: int, strideC: int, batchCount: int,
    computeType: int, algo: int,
) -> None:
    """``cublasGemmStridedBatchedEx``: ``batchCount`` GEMMs whose matrices are
    ``strideA``/``strideB``/``strideC`` elements apart (0: the same matrix for all)."""
    _gemm_strided("gemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype,
                  lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC,
                  batchCount, computeType)


_gemm_ex.__name__ = _gemm_ex.__qualname__ = "gemmEx"
_gemm_strided_batched_ex.__name__ = _gemm_strided_batched_ex.__qualname__ = "gemmStridedBatchedEx"


class CublasLibrary:
    """The cuBLAS shared library's C API as ``ctypes`` sees it (what
    ``onyxrt_gpu.cublas_direct`` loads on a real machine), over the simulated device: a
    handle of one's own, its stream, and ``cublasGemmStridedBatchedEx`` —
    which, unlike CuPy's bindings, a capturing stream records. Functions return cuBLAS
    status codes (0: success). Reach it as :attr:`SimulatedCupy.cublas_library`."""

    def __init__(self, sim: SimulatedCupy) -> None:
        self._sim = sim
        self._handles: dict[int, dict[str, int]] = {}
        self._next = 1

    def cublasCreate_v2(self, handle: Any) -> int:  # noqa: N802 - the C name
        """Create a handle, written through the pointer ``handle`` (``ctypes.byref``)."""
        self._sim._require("blas")
        value = 0x20000 + self._next
        self._next += 1
        self._handles[value] = {"stream": 0}
        handle._obj.value = value
        return 0

    def cublasDestroy_v2(self, handle: Any) -> int:  # noqa: N802
        """Destroy a handle."""
        return 0 if self._handles.pop(_c_int(handle), None) is not None else 1

    def cublasSetStream_v2(self, handle: Any, stream: Any) -> int:  # noqa: N802
        """Put the handle's later calls on the stream whose pointer is ``stream``."""
        state = self._handles.get(_c_int(handle))
        if state is None:
            return 1  # CUBLAS_STATUS_NOT_INITIALIZED
        state["stream"] = _c_int(stream)
        return 0

    def cublasGemmStridedBatchedEx(self, handle: Any, *args: Any) -> int:  # noqa: N802
        """``cublasGemmStridedBatchedEx`` on the handle's stream (see ``gemmStridedBatchedEx``)."""
        state = self._handles.get(_c_int(handle))
        if state is None:
            return 1
        values = [_c_int(v) for v in args]
        stream = self._sim._streams.get(state["stream"]) if state["stream"] else Stream.null
        if stream is None:
            return 7  # a stream that no longer exists
        try:
            _gemm_strided("gemmStridedBatchedEx", _c_int(handle), *values[:-1], stream=stream)
        except CUBLASError as exc:
            return exc.status
        return 0

    def handle_state(self, handle: int) -> dict[str, int]:
        """A handle's state: its stream's handle (test-only)."""
        return dict(self._handles[int(handle)])


def _c_int(value: Any) -> int:
    """A ctypes scalar, pointer or Python int as an int (a null pointer's ``value`` is None)."""
    if hasattr(value, "value"):
        return int(value.value or 0)
    return int(value)


# ======================================================================================
# the function tables: every name must exist in real CuPy (the surface test checks it)
# ======================================================================================

#: cupy functions computed by the numpy function of the same name.
_NUMPY_FUNCTIONS = (
    # elementwise arithmetic and math
    "add", "subtract", "multiply", "divide", "true_divide", "floor_divide", "remainder",
    "mod", "fmod", "power", "sqrt", "square", "negative", "reciprocal", "abs", "absolute",
    "exp", "expm1", "log", "log1p", "tanh", "sign", "floor", "ceil", "trunc", "rint",
    "minimum", "maximum", "fmin", "fmax", "clip", "copysign", "real", "imag", "conj",
    # trigonometric and hyperbolic (CuPy's ufuncs of the same names)
    "sin", "cos", "tan", "arcsin", "arccos", "arctan", "sinh", "cosh", "arcsinh", "arccosh",
    "arctanh",
    # bitwise
    "bitwise_and", "bitwise_or", "bitwise_xor", "invert", "left_shift", "right_shift",
    # comparisons and logic
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal",
    "logical_not", "logical_and", "logical_or", "logical_xor", "isnan", "isinf", "isfinite",
    "where",
    # linear algebra
    "matmul", "dot", "einsum",
    # reductions
    "sum", "prod", "mean", "var", "std", "max", "min", "amax", "amin", "argmax", "argmin",
    "all", "any", "cumsum", "count_nonzero",
    # shapes and data movement
    "reshape", "transpose", "moveaxis", "swapaxes", "expand_dims", "squeeze", "ravel",
    "flip", "broadcast_to", "concatenate", "stack", "split", "tile", "repeat", "pad",
    "triu", "tril", "take_along_axis", "copyto",
    # creation (computed on the device: no transfer)
    "empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like",
    "arange",
    # sorting, searching and indexing
    "sort", "argsort", "nonzero", "searchsorted", "roll",
)  # fmt: skip

#: The array API standard's names that CuPy 14 has beside numpy's (numpy 2 has them too;
#: an older numpy leaves them out, as an older CuPy would lack them).
_STANDARD_FUNCTIONS = tuple(
    name for name in (
        "concat", "permute_dims", "matrix_transpose", "cumulative_sum", "cumulative_prod",
        "unique_values", "unique_counts", "unique_inverse", "unique_all",
    ) if hasattr(np, name)
)  # fmt: skip

#: Metadata helpers that touch no device data.
_PLAIN = {
    "result_type": np.result_type,
    "can_cast": np.can_cast,
    "promote_types": np.promote_types,
    "broadcast_shapes": np.broadcast_shapes,
    "finfo": np.finfo,
    "iinfo": np.iinfo,
    "dtype": np.dtype,
}

_SCALAR_TYPES = (
    "bool_", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
)  # fmt: skip


def _result_type(*arrays_and_dtypes: Any) -> np.dtype[Any]:
    """numpy's result_type; device arrays count by their dtype and rank."""
    conv = [a._a if isinstance(a, ndarray) else a for a in arrays_and_dtypes]
    for a in conv:
        if isinstance(a, np.ndarray) and not any(a is x._a for x in arrays_and_dtypes
                                                 if isinstance(x, ndarray)):
            raise TypeError(f"Unsupported type {type(a)}")
    return np.result_type(*conv)


def _module(name: str, doc: str, attrs: dict[str, Any]) -> types.ModuleType:
    mod = types.ModuleType(name, doc)
    for key, value in attrs.items():
        setattr(mod, key, value)
    return mod


def _build_modules(sim: SimulatedCupy) -> dict[str, types.ModuleType]:
    runtime = _module(
        "cupy.cuda.runtime",
        "Simulated cupy.cuda.runtime.",
        {
            "CUDARuntimeError": CUDARuntimeError,
            "is_hip": sim.hip,
            "getDeviceCount": sim._get_device_count,
            "getDevice": get_device_id,
            "setDevice": sim._set_device,
            "deviceSynchronize": sim._device_synchronize,
            "runtimeGetVersion": sim._runtime_version,
            "driverGetVersion": sim._driver_version,
            "memGetInfo": sim._mem_get_info,
            "getDeviceProperties": sim._device_properties,
            "CUDA_R_16F": 2,
            "CUDA_R_32F": 0,
            "CUDA_R_64F": 1,
        },
    )
    cublas = _module(
        "cupy_backends.cuda.libs.cublas",
        "Simulated cuBLAS bindings (``cupy.cuda.cublas``): GEMMs computed with numpy on the "
        "device buffers, on the current stream.",
        {
            "CUBLASError": CUBLASError,
            "CUBLAS_OP_N": _OP_N,
            "CUBLAS_OP_T": _OP_T,
            "CUBLAS_COMPUTE_16F": 64,
            "CUBLAS_COMPUTE_32F": 68,
            "CUBLAS_COMPUTE_32F_PEDANTIC": 69,
            "CUBLAS_COMPUTE_32F_FAST_TF32": 77,
            "CUBLAS_COMPUTE_64F": 70,
            "CUBLAS_GEMM_DEFAULT": _GEMM_DEFAULT,
            "CUBLAS_GEMM_DEFAULT_TENSOR_OP": _GEMM_DEFAULT_TENSOR_OP,
            "gemmEx": _gemm_ex,
            "gemmStridedBatchedEx": _gemm_strided_batched_ex,
        },
    )
    device = _module(
        "cupy.cuda.device",
        "Simulated cupy.cuda.device.",
        {"Device": Device, "get_cublas_handle": get_cublas_handle, "get_device_id": get_device_id},
    )
    memory = _module(
        "cupy.cuda.memory",
        "Simulated cupy.cuda.memory.",
        {
            "BaseMemory": BaseMemory,
            "Memory": Memory,
            "UnownedMemory": UnownedMemory,
            "PooledMemory": PooledMemory,
            "MemoryPointer": MemoryPointer,
            "MemoryPool": MemoryPool,
            "OutOfMemoryError": OutOfMemoryError,
            "CUDARuntimeError": CUDARuntimeError,
            "alloc": alloc,
            "set_allocator": set_allocator,
            "get_allocator": get_allocator,
        },
    )
    graph = _module("cupy.cuda.graph", "Simulated cupy.cuda.graph.", {"Graph": Graph})
    cuda = _module(
        "cupy.cuda",
        "Simulated cupy.cuda.",
        {
            "runtime": runtime,
            "memory": memory,
            "device": device,
            "graph": graph,
            # Real CuPy loads cuBLAS when this attribute is first read (ImportError where it
            # is missing); here the functions themselves raise that error (no module
            # __getattr__: a misspelt name must stay an AttributeError).
            "cublas": cublas,
            "get_cublas_handle": get_cublas_handle,
            "Device": Device,
            "Stream": Stream,
            "Event": Event,
            "BaseMemory": BaseMemory,
            "Memory": Memory,
            "UnownedMemory": UnownedMemory,
            "MemoryPointer": MemoryPointer,
            "MemoryPool": MemoryPool,
            "PinnedMemory": PinnedMemory,
            "PinnedMemoryPointer": PinnedMemoryPointer,
            "PinnedMemoryPool": PinnedMemoryPool,
            "alloc": alloc,
            "alloc_pinned_memory": alloc_pinned_memory,
            "set_allocator": set_allocator,
            "get_allocator": get_allocator,
            "using_allocator": using_allocator,
            "get_current_stream": get_current_stream,
            "get_device_id": get_device_id,
            "get_elapsed_time": get_elapsed_time,
            "is_available": is_available,
        },
    )
    stride_tricks = _module(
        "cupy.lib.stride_tricks",
        "Simulated cupy.lib.stride_tricks.",
        {
            "as_strided": _as_strided,
            "sliding_window_view": _op("sliding_window_view",
                                       np.lib.stride_tricks.sliding_window_view),
        },
    )
    lib = _module("cupy.lib", "Simulated cupy.lib.", {"stride_tricks": stride_tricks})
    linalg = _module("cupy.linalg", "Simulated cupy.linalg.",
                     {name: _op(name, getattr(np.linalg, name)) for name in ("det", "inv", "norm")})
    fft = _module("cupy.fft", "Simulated cupy.fft.",
                  {name: _op(name, getattr(np.fft, name)) for name in ("fft", "ifft", "rfft", "irfft")})
    special = _module(
        "cupyx.scipy.special", "Simulated cupyx.scipy.special.", {"erf": _erf, "erfc": _erfc}
    )
    scipy = _module("cupyx.scipy", "Simulated cupyx.scipy.", {"special": special})
    cupyx = _module(
        "cupyx",
        "Simulated cupyx.",
        {
            "scipy": scipy,
            "empty_pinned": empty_pinned,
            "zeros_pinned": zeros_pinned,
            "empty_like_pinned": empty_like_pinned,
            "zeros_like_pinned": zeros_like_pinned,
        },
    )
    attrs: dict[str, Any] = {name: _op(name, getattr(np, name)) for name in _NUMPY_FUNCTIONS + _STANDARD_FUNCTIONS}
    attrs.update(_PLAIN)
    attrs["matmul"] = _matmul
    attrs["result_type"] = _result_type
    attrs.update({name: getattr(np, name) for name in _SCALAR_TYPES})
    attrs.update(
        {
            "__version__": _VERSION,
            "__onyxrt_simulated__": True,
            # What onyxrt_gpu.cublas_direct loads in place of the libcublas shared library.
            "__onyxrt_cublas_library__": sim.cublas_library,
            "cuda": cuda,
            "lib": lib,
            "linalg": linalg,
            "fft": fft,
            "ndarray": ndarray,
            "asarray": asarray,
            "asanyarray": asanyarray,
            "array": array,
            "ascontiguousarray": ascontiguousarray,
            "asnumpy": asnumpy,
            "from_dlpack": from_dlpack,
            "get_array_module": get_array_module,
            "get_default_memory_pool": get_default_memory_pool,
            "get_default_pinned_memory_pool": get_default_pinned_memory_pool,
            "is_available": is_available,
            "take": _take_fn,
            "fuse": fuse,
            "inf": np.inf,
            "nan": np.nan,
            "pi": np.pi,
            "e": np.e,
            "newaxis": None,
        }
    )
    attrs["take"].__name__ = "take"
    cupy = _module("cupy", "Simulated CuPy (onyxrt_gpu.testing.simulated_cupy).", attrs)
    return {
        "cupy": cupy,
        "cupy.cuda": cuda,
        "cupy.cuda.runtime": runtime,
        "cupy.cuda.memory": memory,
        "cupy.cuda.device": device,
        "cupy.cuda.graph": graph,
        "cupy.cuda.cublas": cublas,
        "cupy.lib": lib,
        "cupy.lib.stride_tricks": stride_tricks,
        "cupy.linalg": linalg,
        "cupy.fft": fft,
        "cupyx": cupyx,
        "cupyx.scipy": scipy,
        "cupyx.scipy.special": special,
    }


#: Simulated classes whose public attributes the surface test compares with real CuPy's,
#: as (module, class name) pairs.
SIMULATED_CLASSES = (
    ("cupy", "ndarray"),
    ("cupy.cuda", "Device"),
    ("cupy.cuda", "Stream"),
    ("cupy.cuda", "Event"),
    ("cupy.cuda", "MemoryPointer"),
    ("cupy.cuda", "Memory"),
    ("cupy.cuda", "UnownedMemory"),
    ("cupy.cuda", "BaseMemory"),
    ("cupy.cuda", "MemoryPool"),
    ("cupy.cuda", "PinnedMemory"),
    ("cupy.cuda", "PinnedMemoryPointer"),
    ("cupy.cuda", "PinnedMemoryPool"),
    ("cupy.cuda.memory", "PooledMemory"),
    ("cupy.cuda.graph", "Graph"),
)


# ======================================================================================
# the simulation object: state and test-only statistics
# ======================================================================================


class _ThreadState(threading.local):
    def __init__(self) -> None:
        self.device = 0
        self.allocators: list[Any] = []
        self.stream: Stream = Stream.null
        self.fusing = 0


_COUNTERS = (
    "h2d", "h2d_bytes", "d2h", "d2h_bytes", "d2d", "d2d_bytes", "allocations",
    "allocated_bytes", "frees", "allocator_calls", "launches", "synchronizations",
    "stream_waits", "pinned_allocations", "matmul_upcasts", "graph_launches",
)  # fmt: skip


#: The counters :meth:`SimulatedCupy.record_events` records, and their event names.
_EVENT_NAMES = {"launches": "launch", "synchronizations": "synchronize", "stream_waits": "wait"}


class SimulatedCupy:
    """One simulated CuPy installation: its modules, devices and test-only statistics.

    Use it as a context manager (``with install() as sim:``). Statistics (plain attributes,
    reset by :meth:`reset_counters`):

    * ``h2d``/``d2h``/``d2d`` and ``h2d_bytes``/``d2h_bytes``/``d2d_bytes``: copies between
      host and device and between devices, and their bytes;
    * ``allocations``/``allocated_bytes``/``frees``: raw device allocations (``Memory``);
    * ``allocator_calls``: requests through the current allocator (pool hits included);
    * ``launches``: device operations (each cupy math call, a fused function counts once);
    * ``synchronizations``: stream/device/event synchronizations;
    * ``stream_waits``: ``Stream.wait_event`` calls (one stream ordered after another's work);
    * ``graph_launches``: ``Graph.launch`` calls (each also counts as one launch);
    * ``matmul_upcasts``: ``cupy.matmul`` calls that, as CuPy 14 does for batched float16
      operands, copied both operands to float32 and the result back to float16;
    * ``gemm_calls``: a list of :class:`GemmCall`, one per GEMM, with its element and
      compute types (``cupy.matmul`` and ``cupy.cuda.cublas`` alike).

    Memory: :meth:`bytes_in_use`, :meth:`peak_bytes`, :meth:`reset_peak`,
    ``pinned_bytes_in_use``; :meth:`counters` returns everything as a dict. Order:
    :meth:`record_events`.
    """

    def __init__(
        self, *, hip: bool = False, device_count: int = 1, memory_bytes: int = 8 << 30,
        missing_libraries: Iterable[str] = (), driver_version: int | None = None,
        emulate_tf32: bool = False,
    ) -> None:
        if device_count < 0:
            raise ValueError("device_count must be >= 0")
        unknown = set(missing_libraries) - set(_LIBRARY_ERRORS)
        if unknown:
            raise ValueError(f"unknown libraries {sorted(unknown)}; known: {sorted(_LIBRARY_ERRORS)}")
        self.hip = bool(hip)
        #: Libraries this "machine" lacks: ``"compiler"`` (NVRTC/hiprtc: every computing
        #: operation fails) and ``"blas"`` (cuBLAS/hipBLAS: matmul, dot, einsum fail),
        #: with the errors real CuPy raises. A plain attribute: tests may change it.
        self.missing_libraries = frozenset(missing_libraries)
        #: What ``driverGetVersion`` returns (default: the runtime's version; 0: no driver).
        self.driver_version = (_HIP_RUNTIME_VERSION if hip else _CUDA_RUNTIME_VERSION) \
            if driver_version is None else int(driver_version)
        self.device_count = int(device_count)
        self.memory_bytes = int(memory_bytes)
        #: Whether a GEMM asked for ``CUBLAS_COMPUTE_32F_FAST_TF32`` rounds its operands to
        #: TF32's 10-bit mantissa, as tensor cores do. Off by default: the compute type is
        #: recorded (``gemm_calls``) and the product stays float32, so float32 tests keep
        #: their tolerances. A plain attribute: tests may change it.
        self.emulate_tf32 = bool(emulate_tf32)
        self._lock = threading.RLock()
        self._devices = [_DeviceState(i, self.memory_bytes) for i in range(self.device_count)]
        self._tls = _ThreadState()
        self._starts: list[int] = []
        self._raw: dict[int, weakref.ref[Memory]] = {}
        self._pool = MemoryPool()
        self._allocator: Callable[[int], MemoryPointer] | None = self._pool.malloc
        self._pinned_pool = PinnedMemoryPool()
        self.pinned_bytes_in_use = 0
        self._events: list[str] | None = None
        #: Streams with queued work (see :class:`Stream`).
        self._pending_streams: set[Stream] = set()
        #: Streams by handle (``Stream.ptr``), for the cuBLAS library's ``cublasSetStream``.
        self._streams: weakref.WeakValueDictionary[int, Stream] = weakref.WeakValueDictionary()
        #: The cuBLAS shared library's C API over this simulation (what a real machine's
        #: ``libcublas`` gives ``ctypes``): see :class:`CublasLibrary`.
        self.cublas_library = CublasLibrary(self)
        #: Every GEMM the device ran, in order (``cupy.matmul`` and the cuBLAS functions):
        #: what it read and how it accumulated. Cleared by :meth:`reset_counters`.
        self.gemm_calls: list[GemmCall] = []
        #: Whether GEMMs are logged in ``gemm_calls`` (a long run may turn the log off: it
        #: grows by one entry per GEMM until ``reset_counters``).
        self.record_gemms = True
        self.reset_counters()
        self.modules = _build_modules(self)
        self._saved: dict[str, types.ModuleType | None] | None = None

    # ------------------------------------------------------------------ install
    @property
    def cupy(self) -> types.ModuleType:
        """The simulated ``cupy`` module."""
        return self.modules["cupy"]

    def __enter__(self) -> SimulatedCupy:
        if self._saved is not None:
            raise RuntimeError("this simulated CuPy is already installed")
        self._saved = {name: sys.modules.get(name) for name in MODULE_NAMES}
        # cupy.cuda.cublas is an attribute of cupy.cuda only, as in CuPy (not importable).
        sys.modules.update({name: self.modules[name] for name in MODULE_NAMES})
        _ACTIVE.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        saved, self._saved = self._saved, None
        if self in _ACTIVE:
            _ACTIVE.remove(self)
        for name, module in (saved or {}).items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module

    # ------------------------------------------------------------------ statistics
    def reset_counters(self) -> None:
        """Set every counter to 0 (memory in use and peaks are kept)."""
        with self._lock:
            for name in _COUNTERS:
                setattr(self, name, 0)
            self.gemm_calls = []

    def bytes_in_use(self, device_id: int = 0) -> int:
        """Bytes of raw device memory allocated on ``device_id`` (pool caches included)."""
        return self._devices[device_id].in_use

    def peak_bytes(self, device_id: int = 0) -> int:
        """The most bytes in use on ``device_id`` since creation or :meth:`reset_peak`."""
        return self._devices[device_id].peak

    def reset_peak(self) -> None:
        """Start measuring peaks from the current use."""
        with self._lock:
            for d in self._devices:
                d.peak = d.in_use

    def capacity(self, device_id: int = 0) -> int:
        """The simulated memory size of ``device_id``."""
        return self._devices[device_id].capacity

    def counters(self) -> dict[str, int]:
        """A snapshot of the counters and of the memory in use (per device)."""
        with self._lock:
            out = {name: getattr(self, name) for name in _COUNTERS}
            for d in self._devices:
                out[f"bytes_in_use[{d.id}]"] = d.in_use
                out[f"peak_bytes[{d.id}]"] = d.peak
            out["pinned_bytes_in_use"] = self.pinned_bytes_in_use
        return out

    @contextlib.contextmanager
    def record_events(self) -> Iterator[list[str]]:
        """Record, in order, what the counters only count: each copy (``"h2d"``,
        ``"d2h"``, ``"d2d"``), ``"launch"`` and ``"synchronize"``, while the block runs
        (ordering checks: weights uploaded, then one synchronization)::

            with sim.record_events() as events:
                ...
            assert events.index("synchronize") > max(i for i, e in enumerate(events) if e == "h2d")
        """
        with self._lock:
            if self._events is not None:
                raise RuntimeError("record_events is already recording")
            events: list[str] = []
            self._events = events
        try:
            yield events
        finally:
            with self._lock:
                self._events = None

    @property
    def default_pool(self) -> MemoryPool:
        """The pool behind the default allocator."""
        return self._pool

    # ------------------------------------------------------------------ internals
    def _count(self, name: str, n: int = 1) -> None:
        if name == "launches" and self._tls.fusing:
            return
        with self._lock:
            setattr(self, name, getattr(self, name) + n)
            if self._events is not None and name in _EVENT_NAMES:
                self._events.extend([_EVENT_NAMES[name]] * n)

    def _transfer(self, kind: str, nbytes: int) -> None:
        with self._lock:
            setattr(self, kind, getattr(self, kind) + 1)
            if self._events is not None:
                self._events.append(kind)
            setattr(self, kind + "_bytes", getattr(self, kind + "_bytes") + int(nbytes))

    def _pinned(self, nbytes: int) -> None:
        with self._lock:
            self.pinned_bytes_in_use += nbytes
            if nbytes > 0:
                self.pinned_allocations += 1

    def _tls_state(self) -> _ThreadState:
        return self._tls

    def _order_eager(self) -> None:
        """Before work runs at once on the current stream: another stream first runs what
        it has queued (work on one stream stays in order); the null stream first waits for
        the blocking streams, as CUDA's legacy default stream does."""
        stream = self._tls.stream
        if stream._capture is not None:
            # Something that runs now or reads on the host: a capture cannot record it.
            stream._refuse("an operation that runs at once or reads on the host")
        if stream.ptr:
            if stream._queue:
                stream._run(stream._issued)
        elif self._pending_streams:
            with self._lock:
                pending = list(self._pending_streams)
            for other in pending:
                if not other._non_blocking:
                    other._run(other._issued)

    def _refuse_in_capture(self, what: str) -> None:
        stream = self._tls.stream
        if stream._capture is not None:
            stream._refuse(what)

    def _run_all_streams(self) -> None:
        with self._lock:
            pending = list(self._pending_streams)
        for stream in pending:
            stream._run(stream._issued)

    def _issue(self, op: Callable[[], None], stream: Stream | None = None) -> None:
        """Run a device operation's effect in stream order (default: the current stream):
        now on the null stream, queued on any other."""
        stream = self._tls.stream if stream is None else stream
        if stream.ptr:
            stream._enqueue(op)
        else:
            self._order_eager()
            op()

    def _gemm(self, call: GemmCall) -> None:
        if not self.record_gemms:
            return
        with self._lock:
            self.gemm_calls.append(call)

    def _no_device(self) -> CUDARuntimeError:
        return CUDARuntimeError(100)

    def _device_state(self, device_id: int) -> _DeviceState:
        if not self._devices:
            raise self._no_device()
        if not 0 <= device_id < len(self._devices):
            raise CUDARuntimeError(101)
        return self._devices[device_id]

    def _current_device_state(self) -> _DeviceState:
        return self._device_state(self._tls.device)

    def _reserve(self, dev: _DeviceState, size: int) -> None:
        with self._lock:
            if dev.in_use + size > dev.capacity:
                raise OutOfMemoryError(size, dev.in_use)
            dev.in_use += size
            dev.peak = max(dev.peak, dev.in_use)
            self.allocations += 1
            self.allocated_bytes += size

    def _unreserve(self, dev: _DeviceState, size: int) -> None:
        with self._lock:
            dev.in_use -= size
            self.allocations -= 1
            self.allocated_bytes -= size

    def _release(self, dev: _DeviceState, size: int, ptr: int) -> None:
        with self._lock:
            dev.in_use -= size
            self.frees += 1
            if size:
                i = bisect.bisect_left(self._starts, ptr)
                if i < len(self._starts) and self._starts[i] == ptr:
                    del self._starts[i]
                self._raw.pop(ptr, None)

    def _register(self, mem: Memory) -> None:
        with self._lock:
            bisect.insort(self._starts, mem.ptr)
            self._raw[mem.ptr] = weakref.ref(mem)

    def _lookup(self, ptr: int, size: int) -> Memory:
        with self._lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            mem = self._raw[self._starts[i]]() if i >= 0 else None
        if mem is None or not (mem.ptr <= ptr and ptr + size <= mem.ptr + mem.size):
            raise ValueError(
                f"0x{ptr:x} (+{size} bytes) is not inside live simulated device memory"
            )
        return mem

    def _alloc(self, nbytes: int) -> MemoryPointer:
        self._current_device_state()
        self._count("allocator_calls")
        stack = self._tls.allocators
        fn = stack[-1] if stack else self._allocator
        if fn is None:
            return MemoryPointer(Memory(nbytes), 0)
        p = fn(nbytes)
        if not isinstance(p, MemoryPointer):
            raise TypeError(
                f"the allocator {fn!r} returned {type(p).__name__}, not a cupy.cuda.MemoryPointer"
            )
        if nbytes and p.mem.size - p._offset < nbytes:
            raise ValueError(
                f"the allocator {fn!r} returned {p.mem.size - p._offset} bytes for a request "
                f"of {nbytes}"
            )
        return p

    def _require(self, library: str) -> None:
        """Raise what real CuPy raises when ``library`` cannot be loaded."""
        if library in self.missing_libraries:
            exc_type, message = _LIBRARY_ERRORS[library][self.hip]
            raise exc_type(message)

    # runtime functions bound to this simulation
    def _get_device_count(self) -> int:
        if not self._devices:
            raise self._no_device()
        return len(self._devices)

    def _set_device(self, device: int) -> None:
        self._device_state(int(device))
        self._tls.device = int(device)

    def _device_synchronize(self) -> None:
        self._current_device_state()
        self._refuse_in_capture("synchronize")
        self._run_all_streams()
        self._count("synchronizations")

    def _runtime_version(self) -> int:
        return _HIP_RUNTIME_VERSION if self.hip else _CUDA_RUNTIME_VERSION

    def _driver_version(self) -> int:
        return self.driver_version

    def _mem_get_info(self) -> tuple[int, int]:
        st = self._current_device_state()
        return st.capacity - st.in_use, st.capacity

    def _device_properties(self, device: int) -> dict[str, Any]:
        st = self._device_state(int(device))
        name = b"Simulated AMD Instinct (HIP)" if self.hip else b"Simulated NVIDIA GPU"
        props: dict[str, Any] = {
            "name": name,
            "totalGlobalMem": st.capacity,
            "major": 9,
            "minor": 0,
            "multiProcessorCount": 132,
            "pciBusID": st.id + 1,
            "pciDeviceID": 0,
            "pciDomainID": 0,
        }
        if self.hip:
            props["gcnArchName"] = b"gfx942"
        return props


def install(
    *, hip: bool = False, device_count: int = 1, memory_bytes: int = 8 << 30,
    missing_libraries: Iterable[str] = (), driver_version: int | None = None,
    emulate_tf32: bool = False,
) -> SimulatedCupy:
    """A simulated CuPy, installed into ``sys.modules`` while used as a context manager.

    ``hip`` simulates CuPy's ROCm build (``cupy.cuda.runtime.is_hip``); ``device_count``
    devices of ``memory_bytes`` each (0 devices: ``getDeviceCount`` raises
    ``CUDARuntimeError`` as on a machine without a GPU). ``missing_libraries``
    (``"compiler"``, ``"blas"``) simulates a machine with only the driver: kernels or
    matmuls then fail as in real CuPy. ``driver_version`` is what ``driverGetVersion``
    returns (``13000`` for a CUDA 13 driver; default: the runtime's version).
    ``emulate_tf32`` makes TF32 GEMMs round their operands as tensor cores do.
    """
    return SimulatedCupy(hip=hip, device_count=device_count, memory_bytes=memory_bytes,
                         missing_libraries=missing_libraries, driver_version=driver_version,
                         emulate_tf32=emulate_tf32)


def simulated(**kwargs: Any) -> Iterator[SimulatedCupy]:
    """For pytest fixtures: ``yield from simulated(hip=True)`` installs for one test."""
    with install(**kwargs) as sim:
        yield sim
