"""Resource limits for one run: the largest tensor, the memory a run may hold, stopping loops.

A few operators turn a handful of bytes into an arbitrarily large tensor — a
``ConstantOfShape`` of ``[1e6, 1e6]``, a broadcasting ``Add`` of ``[1e5, 1]`` and
``[1, 1e5]``, an ``Expand``/``Tile``/``Pad``/``Resize`` with absurd targets, a ``Loop``
stacking a scan output for a billion iterations. Such a model must fail with a clear error
*before* the memory is touched, not be killed by the operating system (numpy's ``zeros``
even "succeeds" on overcommitted pages and the process dies later).

Two limits, both session config entries (a byte count: ``"68719476736"`` or ``"64GiB"``):

* ``session.max_tensor_bytes`` — the largest single tensor (default
  :data:`DEFAULT_MAX_TENSOR_BYTES`: min(4 GiB, a quarter of physical memory));
* ``session.max_run_bytes`` — the bytes one run's tensors may hold at once: outputs,
  intermediates, temporaries, sequences a ``Loop`` grows (default
  :data:`DEFAULT_MAX_RUN_BYTES`: half of physical memory). Weights are not counted.

They are enforced in one place for every kernel: the **memory guard**, a numpy allocator
(NEP 49) that a package with compiled code installs (:func:`install_memory_guard`; the
CPU provider's compiled build does). During a run every numpy allocation passes through
it; a request over either limit fails before any memory is touched, and the kernel's
``MemoryError`` becomes :class:`~onyxrt.errors.ResourceLimitExceeded` naming the node,
the bytes, the limit and the config entry (:func:`memory_error`). Kernels whose output
size comes from data also call :func:`check_allocation` with the shape they are about to
create, for a message that names the shape — and so that the limit holds where no guard
is installed (onyxrt-cpu's pure-Python build).

The session puts the limits (and the run's ``RunOptions``, so a ``Loop`` can honour
``terminate`` between iterations) in a :class:`contextvars.ContextVar` for the duration
of each run, so kernels read them without a parameter. The parallel executor runs each
step in a copy of the caller's context, so pool threads see the same limits and guard.
"""

from __future__ import annotations

import contextvars
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from .errors import InvalidArgument, OutOfMemory, ResourceLimitExceeded, RunTerminated
from .records import record
from .session_options import MAX_RUN_BYTES_KEY, MAX_TENSOR_BYTES_KEY

__all__ = [
    "MAX_TENSOR_BYTES_KEY",
    "MAX_RUN_BYTES_KEY",
    "DEFAULT_MAX_TENSOR_BYTES",
    "DEFAULT_MAX_RUN_BYTES",
    "RunLimits",
    "MemoryGuard",
    "install_memory_guard",
    "memory_error",
    "limits_from_config",
    "run_limits",
    "current_limits",
    "check_allocation",
    "check_bytes",
    "check_terminated",
    "output_of",
]

_TENSOR_CAP = 4 << 30


def _physical_memory() -> int | None:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX (Windows)
        return None
    if pages <= 0 or page <= 0:
        return None
    return int(pages) * int(page)


_MEMORY = _physical_memory() or 16 << 30
#: The default largest single tensor: min(4 GiB, a quarter of physical memory). No
#: layer of a model that fits a server comes near it; a feed that asks for more (a shape
#: fed to ConstantOfShape, a broadcast of two long vectors) is refused at once.
DEFAULT_MAX_TENSOR_BYTES = min(_TENSOR_CAP, _MEMORY // 4)
#: The default memory one run may hold: half of physical memory. One request cannot
#: take the machine; a server running runs side by side sets ``session.max_run_bytes``.
DEFAULT_MAX_RUN_BYTES = _MEMORY // 2


@record(frozen=True)
class RunLimits:
    """What bounds the current run: the tensor and run memory limits and the run's
    ``RunOptions``."""

    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    max_run_bytes: int = DEFAULT_MAX_RUN_BYTES
    run_options: Any = None

    def with_run_options(self, run_options: Any) -> RunLimits:
        """These limits for a run using ``run_options``."""
        if run_options is self.run_options:
            return self
        return RunLimits(self.max_tensor_bytes, self.max_run_bytes, run_options)


_DEFAULT = RunLimits()
_current: contextvars.ContextVar[RunLimits] = contextvars.ContextVar("onyxrt_run_limits", default=_DEFAULT)


def limits_from_config(entries: Mapping[str, str]) -> RunLimits:
    """The limits a session's config entries ask for (defaults where unset)."""
    if MAX_TENSOR_BYTES_KEY not in entries and MAX_RUN_BYTES_KEY not in entries:
        return _DEFAULT
    return RunLimits(
        _size_entry(entries, MAX_TENSOR_BYTES_KEY, DEFAULT_MAX_TENSOR_BYTES),
        _size_entry(entries, MAX_RUN_BYTES_KEY, DEFAULT_MAX_RUN_BYTES),
    )


def _size_entry(entries: Mapping[str, str], key: str, default: int) -> int:
    raw = entries.get(key)
    if raw is None:
        return default
    from .options import parse_size

    try:
        value = parse_size(raw)
    except ValueError as exc:
        raise InvalidArgument(f"session config {key}: {exc}") from None
    if value < 1:
        raise InvalidArgument(f"session config {key} must be a positive byte count, got {raw!r}")
    return value


class MemoryGuard(Protocol):
    """An allocator that enforces a run's limits on every numpy allocation.

    Installed by a package with compiled code (:func:`install_memory_guard`); the session
    starts one guard per run and stops it when the run ends.
    """

    def start(self, max_tensor_bytes: int, max_run_bytes: int) -> Any:
        """Make a new guard numpy's allocator in the current context; return its token."""
        ...

    def stop(self, token: Any) -> None:
        """Disarm the guard of ``token`` and restore the allocator it replaced."""
        ...

    def refusal(self, token: Any) -> tuple[str, int, int] | None:
        """The last request the guard refused: (which limit — ``"tensor"`` or ``"run"`` —,
        bytes asked, bytes live then), or None."""
        ...


_guard: MemoryGuard | None = None
_guard_token: contextvars.ContextVar[Any] = contextvars.ContextVar("onyxrt_memory_guard", default=None)


def install_memory_guard(guard: MemoryGuard | None) -> None:
    """Use ``guard`` for every later run (None: no guard)."""
    global _guard
    _guard = guard


class run_limits:  # noqa: N801 - used as a function: ``with run_limits(limits):``
    """Make ``limits`` the current ones in this context (a run, or session creation);
    with ``guard_memory`` (a run), enforce the memory limits through the installed guard.

    A class rather than a generator context manager: it is entered once per run, and a
    tiny model's whole run takes a few microseconds.
    """

    __slots__ = ("_limits", "_guard", "_started", "_token", "_guard_token")

    def __init__(self, limits: RunLimits, guard_memory: bool = False) -> None:
        self._limits = limits
        self._guard = _guard if guard_memory else None

    def __enter__(self) -> RunLimits:
        limits = self._limits
        guard = self._guard
        self._started = started = (
            guard.start(limits.max_tensor_bytes, limits.max_run_bytes) if guard is not None else None
        )
        self._guard_token = _guard_token.set(started) if started is not None else None
        self._token = _current.set(limits)
        return limits

    def __exit__(self, *exc_info: object) -> None:
        started = self._started
        try:
            if started is not None:
                assert self._guard is not None and self._guard_token is not None
                _guard_token.reset(self._guard_token)
                self._guard.stop(started)
        finally:
            _current.reset(self._token)


def memory_error(what: str, exc: MemoryError) -> OutOfMemory:
    """The typed error for a ``MemoryError`` raised while ``what`` (``"node 'n' (Op) on
    CPU"``) ran: :class:`ResourceLimitExceeded` when the memory guard refused the request
    (which limit, the bytes, and the config entry that raises it), else
    :class:`OutOfMemory` (the system had no memory to give)."""
    token = _guard_token.get()
    refusal = _guard.refusal(token) if (_guard is not None and token is not None) else None
    detail = str(exc) or "out of memory"
    if refusal is None:
        return OutOfMemory(f"{what} ran out of memory: {detail}")
    kind, requested, live = refusal
    limits = _current.get()
    if kind == "tensor":
        key, limit = MAX_TENSOR_BYTES_KEY, limits.max_tensor_bytes
        why = f"a tensor of {requested:,} bytes is over the limit of {limit:,} bytes per tensor"
    else:
        key, limit = MAX_RUN_BYTES_KEY, limits.max_run_bytes
        why = (
            f"{requested:,} more bytes on top of the {live:,} this run holds would pass the "
            f"limit of {limit:,} bytes per run"
        )
    return ResourceLimitExceeded(
        f"{what} was refused memory ({detail}): {why}. If the model really needs it, raise "
        f"the limit: sess_options.add_session_config_entry({key!r}, '<bytes>'); otherwise "
        "check the inputs that decide these shapes.",
        requested=requested,
        limit=limit,
    )


def current_limits() -> RunLimits:
    """The limits in force here (the defaults outside a session run)."""
    return _current.get()


def output_of(info: Any, what: str = "output") -> str:
    """``"node 'n' (Op) output"``: how :func:`check_allocation` names a kernel's tensor.

    ``info`` is the kernel's :class:`~onyxrt.kernels.KernelInfo`.
    """
    return f"node {info.node_name!r} ({info.op_type}) {what}"


def check_allocation(shape: Sequence[int], dtype: Any, what: str) -> int:
    """Raise :class:`ResourceLimitExceeded` when a tensor of ``shape`` and ``dtype`` would
    pass the current limit; return its size in bytes.

    Call it before allocating. ``what`` names the tensor, starting with its node (see
    :func:`output_of`). Sizes are computed with Python integers, so dims whose product
    overflows int64 are caught too; negative dims count as 0 (the kernel rejects them).
    """
    itemsize = np.dtype(dtype).itemsize or 1
    elements = math.prod(max(int(d), 0) for d in shape)
    nbytes = elements * itemsize
    limit = _current.get().max_tensor_bytes
    if nbytes > limit:
        dims = [int(d) for d in shape]
        raise ResourceLimitExceeded(
            f"{what} would be a tensor of shape {dims} ({np.dtype(dtype)}), {nbytes:,} bytes, "
            f"over the limit of {limit:,} bytes per tensor. If the model really needs it, raise "
            f"the limit: sess_options.add_session_config_entry({MAX_TENSOR_BYTES_KEY!r}, "
            f"'<bytes>'); otherwise check the inputs that decide this shape.",
            requested=nbytes,
            limit=limit,
        )
    return nbytes


def check_bytes(nbytes: int, what: str) -> None:
    """Like :func:`check_allocation` for a size already in bytes (growing results such
    as a Loop's scan outputs, accumulated over iterations)."""
    limit = _current.get().max_tensor_bytes
    if nbytes > limit:
        raise ResourceLimitExceeded(
            f"{what} would exceed {nbytes:,} bytes, over the limit of {limit:,} bytes per "
            f"tensor. If the model really needs it, raise the limit: "
            f"sess_options.add_session_config_entry({MAX_TENSOR_BYTES_KEY!r}, '<bytes>'); "
            "otherwise check the inputs that decide how long it runs.",
            requested=nbytes,
            limit=limit,
        )


def check_terminated(node: str) -> None:
    """Raise :class:`RunTerminated` when the current run's ``RunOptions.terminate`` is set
    (long-running kernels such as Loop call it between iterations)."""
    run_options = _current.get().run_options
    if run_options is not None and run_options.terminate:
        raise RunTerminated(f"run terminated by RunOptions.terminate inside node {node!r}")
