"""Keep large temporaries in the heap: glibc ``mallopt`` tuning for numpy kernels.

glibc serves allocations above ``M_MMAP_THRESHOLD`` (128 KiB by default, adapted upward
only in some patterns) with a fresh ``mmap`` and gives them back on free. Every kernel
output of a few hundred KiB therefore costs a round of page faults — the kernel zeroing
each page — on every run: measured here, a 192x32 @ 32x784 GEMM takes 0.09 ms into a
reused buffer and 0.40 ms into a fresh one. onnxruntime avoids this with its arena; onyxrt's
CPU kernels allocate with numpy, so instead the CPU provider raises the mmap threshold (to
glibc's maximum, 32 MiB) and the trim threshold, once per process, when it is first
created. Freed buffers then stay in the heap and the next run reuses them.

The effect is process-wide: memory freed by anything in the process is kept for reuse
rather than returned to the system (the peak is unchanged; the resident size stays near
it). Set ``ONYXRT_MALLOC_TUNING=0`` to keep glibc's defaults. On other C libraries
(macOS, Windows, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from typing import Any

__all__ = ["tune_malloc", "malloc_state", "prefault_heap", "PREFAULT_MAX_BYTES", "ENV_VAR"]

ENV_VAR = "ONYXRT_MALLOC_TUNING"

# mallopt parameters (malloc.h) and values.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
_TRIM_THRESHOLD = 512 << 20

_lock = threading.Lock()
_state = "not applied"
_prefaulted = 0  # the most bytes prefault_heap has faulted in, in this process

#: The most a session's creation faults in ahead of its first run (below the 32 MiB mmap
#: threshold, so that the block is heap the first run's allocations are carved from).
PREFAULT_MAX_BYTES = 16 << 20


def tune_malloc() -> str:
    """Apply the tuning once (thread-safe); return :func:`malloc_state`."""
    global _state
    with _lock:
        if _state != "not applied":
            return _state
        if os.environ.get(ENV_VAR, "1") == "0":
            _state = f"glibc defaults ({ENV_VAR}=0)"
            return _state
        try:
            # the process's own symbols (glibc's among them) first: ctypes.util.find_library
            # runs ldconfig in a subprocess
            mallopt = _symbol("mallopt")
        except (OSError, AttributeError):
            _state = "default (no glibc mallopt)"
            return _state
        mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
        ok = mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD) and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD)
        _state = "tuned (mmap threshold 32 MiB)" if ok else "default (mallopt refused)"
        return _state


def _symbol(name: str) -> Any:
    """The C function ``name`` from the running process (where the C library is loaded),
    else from the C library found by name."""
    try:
        return getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return getattr(ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6"), name)


def malloc_state() -> str:
    """What the tuning did in this process, for ``onyxrt doctor`` and the provider probe."""
    return _state


def prefault_heap(nbytes: int) -> int:
    """Grow the heap by up to ``nbytes`` (at most :data:`PREFAULT_MAX_BYTES`) and touch each
    of its pages, then free it: with the tuning applied glibc keeps freed heap, so a
    session's first run carves its outputs from pages already faulted in instead of
    faulting them in itself (each first touch of a page is a trip into the kernel, which
    zeroes it: a log-mel front end's first run 1.5-2.1 ms against 1.3-1.6 with its heap
    grown ahead). What earlier sessions of the process grew is not grown again. Returns
    the bytes touched (0 where the tuning is not applied: freed memory would go back to
    the system)."""
    global _prefaulted
    if not _state.startswith("tuned"):
        return 0
    want = min(int(nbytes), PREFAULT_MAX_BYTES)
    with _lock:
        if want <= _prefaulted:
            return 0
        _prefaulted = want
    import numpy as np

    try:
        block = np.empty(want, np.uint8)
    except MemoryError:  # a session built under a run's memory limits: skip, it is only ahead-of-time work
        return 0
    block[::4096] = 0
    del block
    return want

