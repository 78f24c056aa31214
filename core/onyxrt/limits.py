"""Resource limits for one run: the largest tensor a kernel may build, and stopping loops.

A few operators turn a handful of bytes into an arbitrarily large tensor — a
``ConstantOfShape`` of ``[1e6, 1e6]``, an ``Expand``/``Tile``/``Pad``/``Resize`` with
absurd targets, a ``Loop`` stacking a scan output for a billion iterations. Such a model
must fail with a clear error *before* the memory is touched, not be killed by the
operating system (numpy's ``zeros`` even "succeeds" on overcommitted pages and the process
dies later). Those kernels call :func:`check_allocation` with the shape they are about to
create; past the limit it raises :class:`~onyxrt.errors.ResourceLimitExceeded`, naming the
node, the shape, the bytes, the limit and the session config entry that raises it.

The limit is the session config entry ``session.max_tensor_bytes`` (a byte count:
``"68719476736"`` or ``"64GiB"``). Its default, :data:`DEFAULT_MAX_TENSOR_BYTES`, is
min(16 GiB, physical memory): no real model's single tensor comes near it, and anything
past it could not be allocated anyway.

The session puts the limit (and the run's ``RunOptions``, so a ``Loop`` can honour
``terminate`` between iterations) in a :class:`contextvars.ContextVar` for the duration
of each run, so kernels read it without a parameter. The parallel executor runs each step
in a copy of the caller's context, so pool threads see the same limit.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidArgument, ResourceLimitExceeded, RunTerminated
from .session_options import MAX_TENSOR_BYTES_KEY

__all__ = [
    "MAX_TENSOR_BYTES_KEY",
    "DEFAULT_MAX_TENSOR_BYTES",
    "RunLimits",
    "limits_from_config",
    "run_limits",
    "current_limits",
    "check_allocation",
    "check_bytes",
    "check_terminated",
    "output_of",
]

_CAP = 16 << 30


def _physical_memory() -> int | None:
    try:
        pages = os.sysconf("SC_PHYS_PAGES")
        page = os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX (Windows)
        return None
    if pages <= 0 or page <= 0:
        return None
    return int(pages) * int(page)


#: The default largest single tensor: min(16 GiB, physical memory).
DEFAULT_MAX_TENSOR_BYTES = min(_CAP, _physical_memory() or _CAP)


@dataclass(frozen=True)
class RunLimits:
    """What bounds the current run: the tensor size limit and the run's ``RunOptions``."""

    max_tensor_bytes: int = DEFAULT_MAX_TENSOR_BYTES
    run_options: Any = None

    def with_run_options(self, run_options: Any) -> RunLimits:
        """These limits for a run using ``run_options``."""
        if run_options is self.run_options:
            return self
        return RunLimits(self.max_tensor_bytes, run_options)


_DEFAULT = RunLimits()
_current: contextvars.ContextVar[RunLimits] = contextvars.ContextVar("onyxrt_run_limits", default=_DEFAULT)


def limits_from_config(entries: Mapping[str, str]) -> RunLimits:
    """The limits a session's config entries ask for (defaults where unset)."""
    raw = entries.get(MAX_TENSOR_BYTES_KEY)
    if raw is None:
        return _DEFAULT
    from .options import parse_size

    try:
        value = parse_size(raw)
    except ValueError as exc:
        raise InvalidArgument(f"session config {MAX_TENSOR_BYTES_KEY}: {exc}") from None
    if value < 1:
        raise InvalidArgument(f"session config {MAX_TENSOR_BYTES_KEY} must be a positive byte count, got {raw!r}")
    return RunLimits(value)


@contextlib.contextmanager
def run_limits(limits: RunLimits) -> Iterator[RunLimits]:
    """Make ``limits`` the current ones in this context (a run, or session creation)."""
    token = _current.set(limits)
    try:
        yield limits
    finally:
        _current.reset(token)


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
