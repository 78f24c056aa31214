"""Copies between host memory and a GPU, and between GPUs of the same runtime.

Every copy is counted (``host_to_device``, ``device_to_host``, ``device_to_device`` and
their bytes) so tests and users can check that a run moved exactly what the placement
report predicts. Device allocations made by a copy come from the provider's arena.
``do_copy_in_default_stream=False`` puts copies on a stream of their own, one per thread
and device, as onnxruntime's option does: each copy first waits for an event recorded on
the compute (current) stream, so a download never reads an output before the kernels that
write it have finished and an upload never overwrites memory a queued kernel still reads,
and the copy stream is synchronised before the value is used. :meth:`CupyTransfer.copy_into`
writes into an existing device array (a preallocated IOBinding output), so whatever
shares its memory (a torch tensor or CuPy array through DLPack) sees the result.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from types import ModuleType
from typing import Any

import numpy as np

from onyxrt.devices import Device

__all__ = ["CupyTransfer", "TransferCounts"]


class TransferCounts:
    """How many copies went each way, and how many bytes (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.host_to_device = 0
        self.device_to_host = 0
        self.device_to_device = 0
        self.bytes_to_device = 0
        self.bytes_to_host = 0

    def add(self, kind: str, nbytes: int) -> None:
        """Count one copy of ``nbytes`` (``kind``: h2d, d2h or d2d)."""
        with self._lock:
            if kind == "h2d":
                self.host_to_device += 1
                self.bytes_to_device += nbytes
            elif kind == "d2h":
                self.device_to_host += 1
                self.bytes_to_host += nbytes
            else:
                self.device_to_device += 1

    @property
    def host_device_copies(self) -> int:
        """Copies that crossed between host and device, either way."""
        return self.host_to_device + self.device_to_host


class CupyTransfer:
    """Host ↔ GPU and GPU ↔ GPU copies for one provider instance."""

    def __init__(
        self,
        cupy: ModuleType,
        memory_prefix: str,
        allocation_scope: Callable[[], AbstractContextManager[Any]],
        copy_in_default_stream: bool,
    ) -> None:
        self.cupy = cupy
        self.prefix = memory_prefix
        self.scope = allocation_scope
        self.default_stream = copy_in_default_stream
        self.counts = TransferCounts()
        self._copy_streams = threading.local()

    def _is_ours(self, device: Device) -> bool:
        return device.memory_space.startswith(f"{self.prefix}:")

    def can_copy(self, src: Device, dst: Device) -> bool:
        """Host ↔ any of our GPUs, and between our GPUs."""
        return (src.is_host and self._is_ours(dst)) or (self._is_ours(src) and (dst.is_host or self._is_ours(dst)))

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        """Move ``value`` from ``src`` to ``dst``."""
        cp = self.cupy
        if dst.is_host:
            self.counts.add("d2h", int(value.nbytes))
            with cp.cuda.Device(src.device_id):
                return self._on_copy_stream(lambda: value.get())
        array = np.asarray(value) if src.is_host else value
        self.counts.add("h2d" if src.is_host else "d2d", int(array.nbytes))
        with cp.cuda.Device(dst.device_id), self.scope():
            return self._on_copy_stream(lambda: cp.asarray(array))

    def copy_into(self, value: Any, target: Any, src: Device, dst: Device) -> None:
        """Write ``value`` (on ``src``: the host or one of our GPUs) into the existing
        device array ``target`` on ``dst``, in place: a host→device copy into it, or a
        device→device copy (``cupy.copyto``). The caller checks that shape and dtype
        match; ``target`` keeps its memory, so its DLPack views see the new contents."""
        cp = self.cupy
        if src.is_host:
            array = np.ascontiguousarray(value)
            self.counts.add("h2d", int(array.nbytes))
            with cp.cuda.Device(dst.device_id):
                self._on_copy_stream(lambda: target.set(array))
            return
        self.counts.add("d2d", int(value.nbytes))
        with cp.cuda.Device(dst.device_id):
            self._on_copy_stream(lambda: cp.copyto(target, value))

    def _on_copy_stream(self, fn: Callable[[], Any]) -> Any:
        if self.default_stream:
            return fn()
        cuda = self.cupy.cuda
        compute = cuda.get_current_stream()
        stream = self._copy_stream(cuda)
        # Ordered after everything queued on the compute stream so far (a non-blocking
        # stream is not ordered with the default stream by itself).
        stream.wait_event(compute.record())
        with stream:
            result = fn()
        stream.synchronize()
        return result

    def _copy_stream(self, cuda: Any) -> Any:
        """This thread's copy stream on the current device (made once, not per copy)."""
        streams = self._copy_streams.__dict__.setdefault("by_device", {})
        device = cuda.get_device_id()
        stream = streams.get(device)
        if stream is None:
            stream = streams[device] = cuda.Stream(non_blocking=True)
        return stream
