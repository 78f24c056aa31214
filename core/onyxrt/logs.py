"""Logging: onnxruntime's severity levels (0 verbose … 4 fatal) on Python's logging.

Messages go to stderr through one shared handler that looks ``sys.stderr`` up at write
time (so pytest's capture and redirected streams see them). Each session logs through
its own unregistered logger whose level comes from ``SessionOptions.log_severity_level``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["SEVERITY_TO_LEVEL", "set_default_logger_severity", "default_severity", "session_logger"]

SEVERITY_TO_LEVEL = {
    0: logging.DEBUG,
    1: logging.INFO,
    2: logging.WARNING,
    3: logging.ERROR,
    4: logging.CRITICAL,
}
_default_severity = 2


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """A stream handler bound to whatever ``sys.stderr`` is when a record is written."""

    @property  # type: ignore[override,unused-ignore]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_handler = _StderrHandler()
_handler.setFormatter(logging.Formatter("[onyxrt %(levelname)s] %(name)s: %(message)s"))

_package_logger = logging.getLogger("onyxrt")
_package_logger.setLevel(SEVERITY_TO_LEVEL[_default_severity])
_package_logger.addHandler(_handler)
_package_logger.propagate = False


def set_default_logger_severity(level: int) -> None:
    """Set the severity of onyxrt's package-wide logger (0 verbose … 4 fatal)."""
    global _default_severity
    if level not in SEVERITY_TO_LEVEL:
        raise ValueError(f"severity must be 0..4, got {level!r}")
    _default_severity = level
    _package_logger.setLevel(SEVERITY_TO_LEVEL[level])


def default_severity() -> int:
    """The package-wide severity."""
    return _default_severity


def session_logger(logid: str, severity: int) -> logging.Logger:
    """A logger for one session; not registered globally, so it dies with the session."""
    logger = logging.Logger(f"onyxrt.session[{logid}]" if logid else "onyxrt.session")
    logger.setLevel(SEVERITY_TO_LEVEL.get(severity, logging.WARNING))
    logger.addHandler(_handler)
    return logger
