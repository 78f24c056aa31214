"""The memory guard of the compiled build: enforces a run's memory limits on every
numpy allocation (``csrc/guard.c``, a NEP 49 allocator), for :mod:`onyxrt.limits`.

Installed when the CPU provider is imported. Without the compiled module (the pure-Python
build) nothing is installed, and the limits hold where kernels check them explicitly
(:func:`onyxrt.limits.check_allocation`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from onyxrt.limits import MemoryGuard, install_memory_guard

from . import native

__all__ = ["NumpyMemoryGuard", "install"]

_REFUSED = {1: "tensor", 2: "run"}


class NumpyMemoryGuard:
    """A :class:`~onyxrt.limits.MemoryGuard` over numpy's allocator API: each
    ``start(max_tensor_bytes, max_run_bytes)`` makes a new guard (its own counters) numpy's
    allocator in the current context and returns its token; ``stop(token)`` disarms it and
    restores the allocator it replaced. Both are the compiled functions themselves: every
    run starts and stops a guard, and two Python frames around them were ~0.3 µs of a tiny
    model's ~5 µs run."""

    start: Callable[[int, int], Any]
    stop: Callable[[Any], None]

    def __init__(self, module: Any) -> None:
        self._native = module
        self.start = module.guard_start
        self.stop = module.guard_stop

    def refusal(self, token: Any) -> tuple[str, int, int] | None:
        """The last request the guard refused: (limit, bytes asked, bytes live then)."""
        _, _, kind, requested, live = self._native.guard_state(token[0])
        return (_REFUSED[kind], requested, live) if kind else None

    def usage(self, token: Any) -> tuple[int, int]:
        """(bytes live now, the most live at once) under the guard of ``token``."""
        live, peak, *_ = self._native.guard_state(token[0])
        return live, peak


def install() -> MemoryGuard | None:
    """Install the guard if the compiled module has it; return it (None: not built)."""
    module = native.compiled_module()
    if module is None or not hasattr(module, "guard_start"):
        return None
    guard = NumpyMemoryGuard(module)
    install_memory_guard(guard)
    return guard
