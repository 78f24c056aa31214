"""CUDA graphs for the GPU provider: what onyxrt's graph replay asks of it.

With the provider option ``enable_cuda_graph=1`` (onnxruntime's key), a session whose
plan qualifies (see :mod:`onyxrt.graph_replay`) records a run's kernels once per input
signature and replays them with one launch. :class:`CudaGraphCapture` supplies the
mechanism over CuPy:

* a non-blocking capture stream of the provider's own (the legacy default stream cannot
  be captured, and a blocking stream would tie the capture to other threads' work on
  the default stream); :meth:`~CudaGraphCapture.scope` orders it after the caller's
  stream on entry and the caller's stream after it on exit, with events (no host wait);
* memory of the graph's own: an arena made for each capture (``ArenaCupyAllocator.
  private``), kept with the graph — the recorded kernels write their intermediates there
  on every launch, so no other array may ever get that memory;
* uploads of host values the graph reads (shapes computed on the host) made on a side
  stream outside the recording and waited for (:meth:`~CudaGraphCapture.stage`), into
  shared-arena memory kept with the graph;
* matrix products through cuBLAS's C API with onyxrt's own handle
  (:mod:`onyxrt_gpu.cublas_direct`), since CuPy's bindings refuse to be captured.

CuPy's capture mode is relaxed (``cudaStreamCaptureModeRelaxed``), so other threads may
use the device meanwhile. A kernel that reads back on the host or makes a
data-dependent shape fails the capture (CUDA refuses it); that input signature then runs
without graph replay, with a warning.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from onyxrt.allocator import ArenaAllocator
from onyxrt.devices import Device

from .memory import CupyDeviceMemory

if TYPE_CHECKING:
    from .provider import GPUExecutionProvider

__all__ = ["CudaGraphCapture", "CapturedGraph"]

_T = TypeVar("_T")
_HOST = Device("cpu", "host")


class CapturedGraph:
    """A recorded graph and the arena holding the memory its kernels use."""

    __slots__ = ("graph", "arena")

    def __init__(self, graph: Any, arena: ArenaAllocator) -> None:
        self.graph = graph
        self.arena = arena  # alive as long as the graph: its kernels write there


class CudaGraphCapture:
    """The GPU provider's :class:`onyxrt.graph_replay.GraphCapture` (see the module)."""

    def __init__(self, provider: GPUExecutionProvider) -> None:
        self.provider = provider
        self.cp = provider.cupy
        self.device_id = provider.device_id
        with self.cp.cuda.Device(self.device_id):
            self.stream = self.cp.cuda.Stream(non_blocking=True)
            self._side = self.cp.cuda.Stream(non_blocking=True)
        self._arena: ArenaAllocator | None = None
        self._previous: ArenaAllocator | None = None

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """The capture stream current (and the provider's device and arena), ordered after
        the caller's stream on entry; the caller's stream ordered after it on exit."""
        cuda = self.cp.cuda
        with self.provider.allocation_scope():
            caller = cuda.get_current_stream()
            self.stream.wait_event(caller.record())
            try:
                with self.stream:
                    yield
            finally:
                caller.wait_event(self.stream.record())

    def begin(self) -> None:
        """Give this thread's allocations a new arena of the graph's own, then record."""
        provider = self.provider
        self._arena = ArenaAllocator(
            CupyDeviceMemory(self.cp, self.device_id),
            strategy=provider.options["arena_extend_strategy"],
            name=f"{provider.name} device {self.device_id} graph",
        )
        self._previous = provider.cupy_allocator.private(self._arena)
        self.stream.begin_capture()

    def end(self) -> CapturedGraph:
        """The recorded graph (raises when the capture was invalidated)."""
        arena, self._arena = self._arena, None
        try:
            graph = self.stream.end_capture()
        finally:
            self.provider.cupy_allocator.private(self._previous)
        assert arena is not None
        return CapturedGraph(graph, arena)

    def abort(self) -> None:
        """End a failed capture and drop what it recorded and allocated."""
        try:
            if self.stream.is_capturing():
                self.stream.end_capture()
        except Exception:  # an invalidated capture raises as it ends: that is the point
            pass
        finally:
            self.provider.cupy_allocator.private(self._previous)
            self._arena = None

    @contextlib.contextmanager
    def _shared_arena(self) -> Iterator[None]:
        """This thread's allocations from the shared arena meanwhile (not the graph's)."""
        allocator = self.provider.cupy_allocator
        private = allocator.private(None)
        try:
            yield
        finally:
            allocator.private(private)

    def stage(self, fn: Callable[[], _T]) -> _T:
        """``fn`` (an upload) on the side stream, outside the recording, in shared-arena
        memory, waited for."""
        with self._shared_arena():
            with self._side:
                result = fn()
            self._side.synchronize()
        return result

    def launch(self, graph: CapturedGraph) -> None:
        """Replay ``graph`` on the capture stream."""
        graph.graph.launch(self.stream)

    def upload_into(self, value: Any, target: Any) -> None:
        """Copy a host array or a device array into ``target`` (the provider's transfer)."""
        device = self.provider.device
        src = device if isinstance(value, self.cp.ndarray) else _HOST
        self.provider.transfer.copy_into(value, target, src, device)

    def copy(self, value: Any) -> Any:
        """A new device array with ``value``'s contents (shared arena, current stream)."""
        with self._shared_arena():
            return value.copy()
