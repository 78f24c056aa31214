"""Floating-point exceptions as results: ``np.errstate(all="ignore")``, cheaply.

Overflow, division by zero and invalid operations give inf and nan in onnxruntime, not
warnings, so a run executes with every numpy floating-point error ignored (and kernels
run outside a session, such as constant folding, ignore them where they compute). Entering
``np.errstate`` costs about a microsecond, a sixth of a tiny model's whole run; numpy 2
keeps the state in a context variable, so this module sets that variable to a state made
once instead, and a kernel's :class:`quiet_float_errors` inside a run is a no-op.

With numpy 1.x (no context variable) both fall back to ``np.errstate`` itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["ignore_float_errors", "restore_float_errors", "quiet_float_errors", "float_errors_ignored",
           "extobj_variable"]

_extobj_contextvar: Any = None
_make_extobj: Any = None
try:  # numpy >= 2: np.errstate's settings are a context variable holding an "extobj"
    from numpy._core import umath as _umath

    _extobj_contextvar, _make_extobj = _umath._extobj_contextvar, _umath._make_extobj
except (ImportError, AttributeError):  # numpy 1.x
    pass

#: (the state in force before, the same with every error ignored): the last pair made.
#: Keyed by identity, so np.setbufsize/seterrcall in force outside still hold inside, as
#: under np.errstate; a race between threads at worst makes the pair again.
_pair: tuple[Any, Any] = (None, None)


def ignore_float_errors() -> Any:
    """Ignore every floating-point error in this context until
    :func:`restore_float_errors` is given the returned token."""
    global _pair
    if _extobj_contextvar is None:
        state = np.errstate(all="ignore")
        state.__enter__()
        return state
    current = _extobj_contextvar.get()
    before, ignoring = _pair
    if current is ignoring:  # already ignoring: a token that restores the same state
        return _extobj_contextvar.set(current)
    if current is not before:
        ignoring = _make_extobj(all="ignore")
        _pair = (current, ignoring)
    return _extobj_contextvar.set(ignoring)


def extobj_variable() -> Any:
    """numpy's context variable of the floating-point error state (None with numpy 1.x):
    a compiled run path sets it as :func:`ignore_float_errors` does, from ``_pair``."""
    return _extobj_contextvar


def restore_float_errors(token: Any) -> None:
    """Leave what :func:`ignore_float_errors` entered."""
    if _extobj_contextvar is None:
        token.__exit__(None, None, None)
    else:
        _extobj_contextvar.reset(token)


def float_errors_ignored() -> bool:
    """Whether floating-point errors are being ignored here (inside a run, or after
    :func:`ignore_float_errors`): a small kernel then calls numpy as it is, since even the
    no-op ``with quiet_float_errors():`` costs ~0.4 µs, a third of a 64-float Sqrt node."""
    return _extobj_contextvar is not None and _extobj_contextvar.get() is _pair[1]


class quiet_float_errors:  # noqa: N801 - used like np.errstate: ``with quiet_float_errors():``
    """``with np.errstate(all="ignore")`` for a kernel's computation; nothing to do (and
    nearly free) inside a run, which ignores them already."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        if _extobj_contextvar is not None and _extobj_contextvar.get() is _pair[1]:
            self._token = None
        else:
            self._token = ignore_float_errors()

    def __exit__(self, *exc_info: object) -> None:
        if self._token is not None:
            restore_float_errors(self._token)
