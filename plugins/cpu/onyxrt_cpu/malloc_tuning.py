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

__all__ = ["tune_malloc", "malloc_state", "ENV_VAR"]

ENV_VAR = "ONYXRT_MALLOC_TUNING"

# mallopt parameters (malloc.h) and values.
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD = 32 << 20  # glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit systems
_TRIM_THRESHOLD = 512 << 20

_lock = threading.Lock()
_state = "not applied"


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
