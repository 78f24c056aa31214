"""cuBLAS through its C API, with a handle and workspace of onyxrt's own.

CuPy's cuBLAS bindings refuse to run while a stream is being captured into a CUDA graph
(``NotImplementedError: calling cuBLAS API during stream capture is currently
unsupported``, CuPy 13 and 14), so a model's matrix products could never be part of a
captured graph through them. cuBLAS itself captures, given a workspace it does not have
to allocate during the capture (what PyTorch does for its graphs). This module calls the
library CuPy already loaded — the same ``libcublas`` file, found in the process's memory
map — through ``ctypes``:

* one handle per thread and device (a cuBLAS handle is not to be shared between threads
  that call it at the same time), created on first use;
* the handle's default workspace, which cuBLAS allocates when the handle is created
  (outside onyxrt's arena; a few MiB per thread and device), so no call allocates during a
  capture;
* the handle follows the calling thread's current CuPy stream (``cublasSetStream`` only
  when it changes).

:func:`direct_cublas` returns ``None`` where the library cannot be found or its functions
are missing (ROCm, an unusual installation): the GEMM path then keeps CuPy's bindings, and
graph capture of a model with matrix products falls back to plain runs. Under the
simulated CuPy the simulation's stand-in for the library is used, so this code runs in CI.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from typing import Any

__all__ = ["DirectCublas", "direct_cublas", "CublasCallError"]

_c_int, _c_ll, _c_ptr = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
_GEMM_STRIDED_BATCHED_EX = [
    _c_ptr, _c_int, _c_int, _c_int, _c_int, _c_int, _c_ptr,  # handle, ops, m, n, k, alpha
    _c_ptr, _c_int, _c_int, _c_ll,  # A, Atype, lda, strideA
    _c_ptr, _c_int, _c_int, _c_ll,  # B, Btype, ldb, strideB
    _c_ptr, _c_ptr, _c_int, _c_int, _c_ll,  # beta, C, Ctype, ldc, strideC
    _c_int, _c_int, _c_int,  # batchCount, computeType, algo
]

_lock = threading.Lock()
_cache: weakref.WeakKeyDictionary[Any, DirectCublas | None] = weakref.WeakKeyDictionary()


class CublasCallError(RuntimeError):
    """A cuBLAS function returned an error status."""

    def __init__(self, function: str, status: int) -> None:
        self.status = int(status)
        super().__init__(f"{function} returned cuBLAS status {status}")


class _Handle:
    __slots__ = ("handle", "stream")

    def __init__(self, handle: int) -> None:
        self.handle = handle
        self.stream = -1  # the stream last set on it


class DirectCublas:
    """``cublasGemmStridedBatchedEx`` on the current CuPy stream, capturable.

    >>> blas = direct_cublas(cupy)
    >>> blas.gemm_strided_batched_ex(op_n, op_n, m, n, k, alpha, ...)  # as cuBLAS's C API
    """

    def __init__(self, cupy: Any, library: Any) -> None:
        self.cp = cupy
        self.library = library
        self._local = threading.local()

    def _handle(self) -> _Handle:
        cuda = self.cp.cuda
        device = int(cuda.runtime.getDevice())
        handles: dict[int, _Handle] = self._local.__dict__.setdefault("handles", {})
        found = handles.get(device)
        if found is None:
            ref = ctypes.c_void_p()
            _check("cublasCreate_v2", self.library.cublasCreate_v2(ctypes.byref(ref)))
            found = handles[device] = _Handle(int(ref.value or 0))
        return found

    def gemm_strided_batched_ex(self, *args: int) -> None:
        """``cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A, Atype,
        lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
        computeType, algo)`` with this thread's handle on the current stream; ``args`` are
        everything after the handle (pointers as ints). Raises :class:`CublasCallError`."""
        h = self._handle()
        stream = int(self.cp.cuda.get_current_stream().ptr)
        if h.stream != stream:
            _check("cublasSetStream_v2", self.library.cublasSetStream_v2(h.handle, stream))
            h.stream = stream
        _check("cublasGemmStridedBatchedEx", self.library.cublasGemmStridedBatchedEx(h.handle, *args))


def _check(function: str, status: int) -> None:
    if status:
        raise CublasCallError(function, status)


def _loaded_library_path(name: str) -> str | None:
    """The file of the shared library ``name`` (``libcublas.so``) this process has
    loaded, from ``/proc/self/maps`` (Linux), or ``None``."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rstrip("\n").split(maxsplit=5)[-1]
                if f"/{name}" in path:
                    return path
    except OSError:
        pass
    return None


def _open_library(cupy: Any) -> Any:
    if cupy.cuda.runtime.is_hip:
        return None
    simulated = getattr(cupy, "__onyxrt_cublas_library__", None)
    if simulated is not None:
        return simulated
    try:
        cupy.cuda.cublas  # noqa: B018 - reading it makes CuPy load libcublas
    except Exception:
        return None
    path = _loaded_library_path("libcublas.so")
    if path is None:
        return None
    try:
        library = ctypes.CDLL(path)
        gemm = library.cublasGemmStridedBatchedEx
        for name, argtypes in (
            ("cublasCreate_v2", [ctypes.POINTER(_c_ptr)]),
            ("cublasSetStream_v2", [_c_ptr, _c_ptr]),
        ):
            function = getattr(library, name)
            function.argtypes = argtypes
            function.restype = _c_int
        gemm.argtypes = _GEMM_STRIDED_BATCHED_EX
        gemm.restype = _c_int
    except (OSError, AttributeError):
        return None
    return library


def direct_cublas(cupy: Any) -> DirectCublas | None:
    """The process's :class:`DirectCublas` for this CuPy (made once), or ``None`` where
    cuBLAS's C API cannot be reached (see the module's docstring)."""
    with _lock:
        if cupy not in _cache:
            library = _open_library(cupy)
            _cache[cupy] = DirectCublas(cupy, library) if library is not None else None
        return _cache[cupy]
