"""``SessionOptions.intra_op_num_threads``: the size of the BLAS thread pool during runs.

onyxrt's kernels parallelise inside the BLAS library numpy links (OpenBLAS, MKL, ...), so
that pool is what onnxruntime's intra-op pool corresponds to (the CPU provider's compiled
kernels split their work over OpenBLAS's thread count too, on OpenBLAS's threads: see
onyxrt_cpu.blas_threads). threadpoolctl sets it for the
duration of each run of a session that asks for a size and restores it afterwards (~8 µs
per run); 0, the default, leaves the library's own setting (all cores). The pool is
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

_controller: Any = None
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


def _blas_controller() -> Any:
    """threadpoolctl's view of the loaded BLAS libraries (scanned once, on first use)."""
    global _controller
    with _lock:
        if _controller is None:
            from threadpoolctl import ThreadpoolController

            _controller = ThreadpoolController()
        return _controller


def intra_op_limit(threads: int) -> contextlib.AbstractContextManager[Any]:
    """A context limiting the BLAS pool to ``threads`` (no-op for 0)."""
    if threads <= 0:
        return contextlib.nullcontext()
    return _blas_controller().limit(limits=threads, user_api="blas")
