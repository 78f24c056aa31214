"""``SessionOptions.intra_op_num_threads``: the size of the BLAS thread pool during runs.

onyxrt's kernels parallelise inside the BLAS library numpy links (OpenBLAS, MKL, ...), so
that pool is what onnxruntime's intra-op pool corresponds to (the CPU provider's compiled
kernels split their work over OpenBLAS's thread count too, on OpenBLAS's threads: see
onyxrt_cpu.blas_threads). threadpoolctl sets it for the
duration of each run of a session that asks for a size and restores it afterwards: one
``get_num_threads`` call per library when the size is already the library's (~1 µs), a
set and a restore when it is not (~3 µs; threadpoolctl's ``limit`` context took 15-25 µs
a run, which doubled a small model's latency); 0, the default, leaves the library's own
setting (all cores). The pool is
process-wide: concurrent runs of sessions asking for different sizes share it, and the
last one to start wins until it ends.

``set_global_thread_pool_sizes`` (onnxruntime's global pools) gives the sizes sessions use
when they set ``SessionOptions.use_per_session_threads = False``.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

__all__ = ["intra_op_limit", "set_global_thread_pool_sizes", "global_thread_pool_sizes"]

_libraries: tuple[Any, ...] | None = None  # threadpoolctl's BLAS controllers, once scanned
_lock = threading.Lock()
_global_sizes: tuple[int, int] | None = None


def set_global_thread_pool_sizes(intra_op_num_threads: int = 0, inter_op_num_threads: int = 0) -> None:
    """The intra- and inter-op thread counts of sessions created with
    ``use_per_session_threads = False`` (0: the library's own default)."""
    global _global_sizes
    for name, value in (("intra_op_num_threads", intra_op_num_threads),
                        ("inter_op_num_threads", inter_op_num_threads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            from .errors import InvalidArgument

            raise InvalidArgument(f"set_global_thread_pool_sizes: {name} must be an int >= 0, got {value!r}")
    with _lock:
        _global_sizes = (intra_op_num_threads, inter_op_num_threads)


def global_thread_pool_sizes() -> tuple[int, int] | None:
    """What :func:`set_global_thread_pool_sizes` set, or None."""
    with _lock:
        return _global_sizes


def _blas_libraries() -> tuple[Any, ...]:
    """threadpoolctl's controllers of the loaded BLAS libraries (scanned once, on first use)."""
    global _libraries
    with _lock:
        if _libraries is None:
            from threadpoolctl import ThreadpoolController

            _libraries = tuple(ThreadpoolController().select(user_api="blas").lib_controllers)
        return _libraries


class _BlasThreadLimit:
    """One run's BLAS thread count: set on entry where it differs, restored on exit.

    Straight to each library controller's ``get_num_threads``/``set_num_threads`` (which
    keep threadpoolctl's rule that one Python thread at a time controls OpenBLAS) instead
    of ``ThreadpoolController.limit``, whose info scan and context stack are the 15-25 µs."""

    __slots__ = ("_threads", "_restore")

    def __init__(self, threads: int) -> None:
        self._threads = threads
        self._restore: list[tuple[Any, int]] = []

    def __enter__(self) -> None:
        for library in _blas_libraries():
            current = library.get_num_threads()
            if current is not None and current != self._threads:
                library.set_num_threads(self._threads)
                self._restore.append((library, current))

    def __exit__(self, *exc_info: object) -> None:
        for library, previous in reversed(self._restore):
            library.set_num_threads(previous)
        self._restore.clear()


def intra_op_limit(threads: int) -> contextlib.AbstractContextManager[Any]:
    """A context limiting the BLAS pool to ``threads`` (no-op for 0)."""
    if threads <= 0:
        return contextlib.nullcontext()
    return _BlasThreadLimit(threads)
