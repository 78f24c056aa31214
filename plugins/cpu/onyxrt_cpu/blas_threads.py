"""One thread pool for OpenBLAS's GEMMs and the compiled kernels (``csrc/threads.c``).

numpy's OpenBLAS runs a parallel GEMM on its own worker threads, which keep spinning for
about 2^28 cycles after each call. A compiled kernel that splits its work over threads
of its own right after a GEMM then shares a core with a spinning OpenBLAS thread and
loses far more than it gains (measured: ResNet-50's conv epilogues went from 2 to 16 ms
per run on 2 cores). OpenBLAS 0.3.27 and later let the program supply the threads it runs
a parallel call on (``openblas_set_threads_callback_function``): the CPU provider, when
first created, hands it the compiled module's pool, so GEMMs and kernels run on the same
workers, which poll briefly between calls and then sleep.

The kernels then split over OpenBLAS's current thread count, so
``SessionOptions.intra_op_num_threads`` (applied through threadpoolctl) and
``OPENBLAS_NUM_THREADS`` govern both. Without a pthreads OpenBLAS that has the callback
(MKL, BLIS, an older OpenBLAS, an OpenMP build), the kernels stay on the calling thread as
before. The change is process-wide, like OpenBLAS's own pool: numpy's other BLAS calls run
on the shared pool too. ``ONYXRT_BLAS_POOL=0`` leaves OpenBLAS's threading alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import os
import threading
from collections.abc import Iterator
from typing import Any

from . import native

__all__ = ["share_pool", "pool_state", "ENV_VAR"]

ENV_VAR = "ONYXRT_BLAS_POOL"

# How OpenBLAS builds name their symbols: numpy's wheels use scipy-openblas's
# ``scipy_<name>64_``; a system OpenBLAS has none of it.
_PREFIXES = ("", "scipy_")
_SUFFIXES = ("", "64_", "_64")

_lock = threading.RLock()
_state: str | None = None  # what _plan() found, once computed
_applied = False
# (OpenBLAS's callback setter, the callback address) for each library given the pool.
_installed: list[tuple[Any, int]] = []


def _symbol(library: ctypes.CDLL, name: str) -> Any:
    for prefix, suffix in itertools.product(_PREFIXES, _SUFFIXES):
        function = getattr(library, f"{prefix}{name}{suffix}", None)
        if function is not None:
            return function
    return None


def _openblas_libraries() -> list[tuple[str, str | None, ctypes.CDLL]]:
    """(path, version, the library opened) of each pthreads OpenBLAS loaded in the process.

    On Linux, found in the process's own memory map: ~0.3 ms, where threadpoolctl's
    import and scan of every loaded library cost 3-5 ms of the first session's creation.
    Elsewhere (no /proc), threadpoolctl's record."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = sorted({line[line.index("/"):].rstrip("\n") for line in maps
                            if "/" in line and "openblas" in line.rsplit("/", 1)[-1].lower()})
    except OSError:
        from threadpoolctl import threadpool_info

        paths = [info["filepath"] for info in threadpool_info() if info.get("internal_api") == "openblas"]
    found = []
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        parallel = _symbol(library, "openblas_get_parallel")  # 1: pthreads, 2: OpenMP, 0: none
        if parallel is None or parallel() != 1:
            continue
        found.append((path, _openblas_version(library), library))
    return found


def _openblas_version(library: ctypes.CDLL) -> str | None:
    """The version in ``openblas_get_config()`` ("OpenBLAS 0.3.29 ..."), or None."""
    config = _symbol(library, "openblas_get_config")
    if config is None:
        return None
    config.restype = ctypes.c_char_p
    words = (config() or b"").split()
    return words[1].decode() if len(words) > 1 and words[0] == b"OpenBLAS" else None


def _libraries() -> list[tuple[str, Any, Any]]:
    """(name, callback setter, thread-count getter) for each OpenBLAS that takes the pool."""
    found = []
    for path, version, library in _openblas_libraries():
        set_callback = _symbol(library, "openblas_set_threads_callback_function")
        get_threads = _symbol(library, "openblas_get_num_threads")
        if set_callback is not None and get_threads is not None:
            set_callback.argtypes = [ctypes.c_void_p]
            set_callback.restype = None
            name = f"{os.path.basename(path)} {version}"
            found.append((name, set_callback, get_threads))
    return found


def _plan() -> tuple[str, list[tuple[str, Any, Any]]]:
    """What share_pool does in this process: its description and the libraries."""
    if os.environ.get(ENV_VAR, "1") == "0":
        return (f"OpenBLAS keeps its own threads ({ENV_VAR}=0); compiled kernels "
                "single-threaded"), []
    if not native.ENABLED:
        return "OpenBLAS keeps its own threads (no compiled kernels)", []
    libraries = _libraries()
    if not libraries:
        return ("OpenBLAS keeps its own threads (no pthreads OpenBLAS >= 0.3.27 loaded); "
                "compiled kernels single-threaded"), []
    names = ", ".join(name for name, _, _ in libraries)
    return f"one pool for OpenBLAS and the compiled kernels ({names})", libraries


def share_pool() -> str:
    """Install the compiled pool as OpenBLAS's threads, once per process (thread-safe);
    return :func:`pool_state`."""
    global _state, _applied
    with _lock:
        if not _applied:
            _state, libraries = _plan()
            for _, set_callback, get_threads in libraries:
                # The kernels follow this library's thread count; the last one found wins
                # (in practice there is one: numpy's).
                address = ctypes.cast(get_threads, ctypes.c_void_p).value or 0
                callback = native.share_with_blas(address)
                set_callback(callback)
                _installed.append((set_callback, callback))
            _applied = True
            if libraries:
                # Off the creating thread: the warm-up is thread and buffer start-up, which
                # a session's own creation work (graph passes, packing) overlaps.
                threading.Thread(target=_warm_up, name="onyxrt-blas-warm-up", daemon=True).start()
        assert _state is not None
        return _state


def _warm_up() -> None:
    """One GEMM large enough for OpenBLAS to split, at the provider's creation: the first
    parallel GEMM of a process starts the pool's workers and OpenBLAS's per-thread
    buffers, which cost a first run up to ~10 ms more (a GRU encoder's first run 20 ms
    against 8-9 after it; 9-11 ms with this, over alternating fresh processes). Once per
    process, on a thread of its own: ~11 ms of creation on the creating thread before."""
    import numpy as np

    a = np.ones((192, 128), np.float32)
    b = np.ones((128, 768), np.float32)
    a @ b


def pool_state() -> str:
    """What :func:`share_pool` does (or did) in this process, for ``onyxrt providers``:
    the same text before and after the CPU provider is created."""
    global _state
    with _lock:
        if _state is None:
            _state = _plan()[0]
        return _state


@contextlib.contextmanager
def openblas_own_threads() -> Iterator[None]:
    """OpenBLAS back on its own threads inside the block (for comparisons: the tests check
    that the pool computes what OpenBLAS computes alone). Not for use while other
    threads call BLAS."""
    with _lock:
        for set_callback, _ in _installed:
            set_callback(None)
        try:
            yield
        finally:
            for set_callback, callback in _installed:
                set_callback(callback)
