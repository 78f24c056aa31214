"""onyxrt's version, in the lowest layer so that any module can report it without
importing the package's ``__init__`` (which imports nearly every module)."""

from __future__ import annotations

__all__ = ["__version__"]

__version__ = "0.1.0"
