"""Logging: onnxruntime's severity levels (0 verbose … 4 fatal) on Python's logging.

Messages go to stderr through one shared handler that looks ``sys.stderr`` up at write
time (so pytest's capture and redirected streams see them), or to the function given to
:func:`set_default_logger_callback`. Each session logs through its own unregistered
logger whose level comes from ``SessionOptions.log_severity_level``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

from .errors import InvalidSetting

__all__ = [
    "SEVERITY_TO_LEVEL",
    "set_default_logger_severity",
    "set_default_logger_verbosity",
    "set_default_logger_callback",
    "default_severity",
    "session_logger",
]

#: (severity, category, logid, code_location, message) -> None
LoggerCallback = Callable[[int, str, str, str, str], Any]
_callback: LoggerCallback | None = None

SEVERITY_TO_LEVEL = {
    0: logging.DEBUG,
    1: logging.INFO,
    2: logging.WARNING,
    3: logging.ERROR,
    4: logging.CRITICAL,
}
_default_severity = 2


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg,unused-ignore]
    """A stream handler bound to whatever ``sys.stderr`` is when a record is written, or
    the user's callback when one is set."""

    def emit(self, record: logging.LogRecord) -> None:
        callback = _callback
        if callback is None:
            super().emit(record)
            return
        severity = next((s for s, lvl in sorted(SEVERITY_TO_LEVEL.items(), reverse=True)
                         if record.levelno >= lvl), 0)
        logid = record.name.partition("[")[2].rstrip("]")
        try:
            callback(severity, "onyxrt", logid, f"{record.pathname}:{record.lineno}", record.getMessage())
        except Exception:  # a failing callback must not break the run that logged
            self.handleError(record)

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


def set_default_logger_verbosity(level: int) -> None:
    """onnxruntime's verbose-log level (VLOG, used with severity 0 in its debug builds).
    onyxrt has no separate verbose channel (severity 0 shows every message), so the
    level is checked and has no effect."""
    if isinstance(level, bool) or not isinstance(level, int) or level < 0:
        raise ValueError(f"verbosity must be an int >= 0, got {level!r}")


def set_default_logger_callback(callback: LoggerCallback | None, severity: int = 2) -> None:
    """Send every log message of onyxrt (package and sessions) to
    ``callback(severity, category, logid, code_location, message)`` instead of stderr,
    and set the package's severity to ``severity`` (0 verbose .. 4 fatal), as
    onnxruntime 1.32's function does. ``None`` goes back to stderr and leaves the
    severity as it is (it must still be 0..4). Sessions keep their own
    ``log_severity_level``; ``logid`` is the session's ``SessionOptions.logid``.
    Exceptions the callback raises are reported by Python's logging and never reach the
    code that logged."""
    global _callback
    if severity not in SEVERITY_TO_LEVEL:
        raise InvalidSetting(f"set_default_logger_callback: severity must be 0..4, got {severity!r}")
    if callback is not None and not callable(callback):
        raise InvalidSetting(
            f"set_default_logger_callback takes a callable or None, got {type(callback).__name__}"
        )
    _callback = callback
    if callback is not None:
        set_default_logger_severity(severity)


def default_severity() -> int:
    """The package-wide severity."""
    return _default_severity


def session_logger(logid: str, severity: int) -> logging.Logger:
    """A logger for one session; not registered globally, so it dies with the session.
    Severity -1 (the default) follows the package's severity, also when it changes later;
    0..4 fix the session's own."""
    logger = logging.Logger(f"onyxrt.session[{logid}]" if logid else "onyxrt.session")
    if severity < 0:
        logger.parent = _package_logger  # its level and handler, read at each record
        return logger
    logger.setLevel(SEVERITY_TO_LEVEL.get(severity, logging.WARNING))
    logger.addHandler(_handler)
    logger.propagate = False
    return logger
