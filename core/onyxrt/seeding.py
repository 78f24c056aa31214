"""The process-wide random seed of ``set_seed`` (onnxruntime's ``onnxruntime.set_seed``).

Random operators (RandomNormal, RandomUniform, their ``*Like`` forms, Bernoulli,
Multinomial, Dropout in training mode) seed their generator from the node's ``seed``
attribute when it has one. Without one they draw fresh entropy, unless a program called
:func:`set_seed`: then every such kernel created afterwards is seeded from it, so a
session's outputs repeat from one process to the next (as in onnxruntime, where kernels
take the global seed when they are created).
"""

from __future__ import annotations

import threading

from .errors import InvalidArgument

__all__ = ["set_seed", "default_seed"]

_seed: int | None = None
_lock = threading.Lock()


def set_seed(seed: int) -> None:
    """Seed the random operators of sessions created from now on (see the module doc)."""
    global _seed
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise InvalidArgument(f"set_seed takes an int, got {type(seed).__name__} {seed!r}")
    with _lock:
        _seed = seed & 0xFFFFFFFFFFFFFFFF


def default_seed() -> int | None:
    """The seed for a random kernel whose node has no ``seed`` attribute: the one
    :func:`set_seed` gave, or None (draw fresh entropy)."""
    with _lock:
        return _seed
