"""Shape specialization: sessions compiled for the sizes a model is actually run with.

Providers that compile static shapes (the simulated NPU, and accelerators like it) refuse
a node whose shape depends on a free dimension (``batch``, ``seq``): such a node gets the
refusal category ``"shape"`` in the placement report, and runs on the CPU. When a session
has such refusals, its first run with given sizes builds a *specialized* session — the
same model, options and providers, with the free dimensions fixed to the feeds' sizes
(``add_free_dimension_override_by_name``), so shape inference and folding make every shape
static and the accelerator takes what it supports — and later runs with the same sizes
reuse it.

Policy (``SessionOptions.add_session_config_entry``):

* ``session.shape_specializations`` — the most specializations a session keeps (default
  4; ``0`` turns specialization off). Sizes beyond the limit run on the session's own,
  shape-generic plan; the first such run logs a warning.
* A run through IOBinding (values bound to a device) uses the generic plan: bound values
  live in the session's own provider instances.
* Feeds whose sizes disagree for one dimension name run on the generic plan (the run
  reports the mismatch as usual).

Each specialization is a session of its own and loads the model's weights again; the
placement report lists them (``PlacementReport.specializations``, ``onyxrt explain``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["SHAPE_SPECIALIZATIONS_KEY", "DEFAULT_LIMIT", "ShapeSpecializer", "signature_of", "describe_sizes"]

SHAPE_SPECIALIZATIONS_KEY = "session.shape_specializations"
DEFAULT_LIMIT = 4

#: Free dimension name → size.
Sizes = tuple[tuple[str, int], ...]


def signature_of(declared: Mapping[str, Sequence[Any]], feeds: Mapping[str, Any]) -> Sizes | None:
    """The free dimensions' sizes in ``feeds`` (``declared``: input name → its declared
    dims, names for free ones), or None when a name gets two sizes or no input has one."""
    sizes: dict[str, int] = {}
    for name, dims in declared.items():
        value = feeds.get(name)
        shape = getattr(value, "shape", None)
        if shape is None or len(shape) != len(dims):
            continue
        for dim, size in zip(dims, shape):
            if isinstance(dim, str) and dim and sizes.setdefault(dim, int(size)) != int(size):
                return None
    return tuple(sorted(sizes.items())) or None


def describe_sizes(sizes: Sizes) -> str:
    """``"batch=1, seq=128"``."""
    return ", ".join(f"{k}={v}" for k, v in sizes)


class ShapeSpecializer:
    """The specialized sessions of one session, built on demand (see the module docstring).

    ``build(sizes)`` makes a session for the sizes; ``limit`` caps how many are kept."""

    def __init__(self, build: Callable[[Sizes], Any], limit: int, warn: Callable[[str], None]) -> None:
        self._build = build
        self.limit = limit
        self._warn = warn
        self._sessions: dict[Sizes, Any] = {}
        self._lock = threading.Lock()
        self._warned = False

    def session_for(self, sizes: Sizes | None) -> Any | None:
        """The specialized session for ``sizes`` (built the first time), or None: no sizes,
        or the limit is reached (the generic plan runs)."""
        if sizes is None:
            return None
        found = self._sessions.get(sizes)
        if found is not None:
            return found
        with self._lock:
            found = self._sessions.get(sizes)
            if found is not None:
                return found
            if len(self._sessions) >= self.limit:
                if not self._warned:
                    self._warned = True
                    self._warn(f"shape specialization: {self.limit} specializations kept "
                               f"({SHAPE_SPECIALIZATIONS_KEY}); {describe_sizes(sizes)} and further new sizes run "
                               "on the shape-generic plan")
                return None
            session = self._build(sizes)
            self._sessions[sizes] = session
            return session

    @property
    def sessions(self) -> dict[str, Any]:
        """Description of the sizes (``"batch=1, seq=128"``) → specialized session."""
        return {describe_sizes(k): v for k, v in self._sessions.items()}
