"""A progress display for long loops (``onyxrt bench``, providers compiling large graphs).

On a terminal it redraws one line — label, bar, percentage, count and elapsed time; in a
log file or a pipe it writes a plain line at most every 10 % instead, so logs stay short.
It shows nothing when there is little to count (fewer than :data:`MIN_TOTAL` steps) or
when the environment sets ``ONYXRT_PROGRESS=0``. It writes to stderr by default, so
stdout stays clean for results (``--format json``).

>>> with Progress(len(batches), "compiling") as progress:            # doctest: +SKIP
...     for batch in batches:
...         compile_one(batch)
...         progress.advance()
"""

from __future__ import annotations

import os
import sys
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Progress", "MIN_TOTAL", "PROGRESS_ENV"]

#: Below this many steps a progress display is noise: nothing is shown.
MIN_TOTAL = 5
#: Environment variable: ``0`` turns every progress display off.
PROGRESS_ENV = "ONYXRT_PROGRESS"

_BAR_WIDTH = 24
_REDRAW_S = 0.1  # a terminal line is redrawn at most this often (and always at the end)
_PLAIN_STEP = 10  # percent between plain lines


class Progress:
    """Counts ``total`` steps of ``label`` and shows how far along they are.

    Use it as a context manager and call :meth:`advance` after each step; leaving the
    context ends the display (a terminal line is finished with a newline). Writing never
    raises: a closed or broken stream turns the display off.
    """

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = max(int(total), 0)
        self.label = label
        self.done = 0
        self._stream = stream if stream is not None else sys.stderr
        self._enabled = (
            self.total >= MIN_TOTAL and os.environ.get(PROGRESS_ENV, "").strip() != "0"
        )
        self._tty = self._enabled and _isatty(self._stream)
        self._start = time.perf_counter()
        self._last_draw = float("-inf")
        self._last_step = 0  # the last plain-line step written (in units of _PLAIN_STEP %)
        self._drawn = False

    @property
    def enabled(self) -> bool:
        """Whether anything is shown (enough steps, not turned off, stream writable)."""
        return self._enabled

    def __enter__(self) -> Progress:
        self._start = time.perf_counter()
        if self._tty:
            self._draw()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more steps done (the count never goes past ``total``)."""
        self.done = min(self.done + n, self.total)
        if not self._enabled:
            return
        if self._tty:
            now = time.perf_counter()
            if self.done >= self.total or now - self._last_draw >= _REDRAW_S:
                self._draw(now)
            return
        step = (100 * self.done // self.total) // _PLAIN_STEP
        if step > self._last_step:
            self._last_step = step
            self._write(f"{self.label}: {self._counts()}\n")

    def close(self) -> None:
        """End the display: a terminal line gets its final state and a newline."""
        if self._tty and self._drawn:
            self._draw()
            self._write("\n")
            self._drawn = False
        self._enabled = False

    # -- output ----------------------------------------------------------------------
    def _counts(self) -> str:
        percent = 100 * self.done // self.total
        elapsed = time.perf_counter() - self._start
        return f"{percent:3d}% ({self.done}/{self.total}, {elapsed:.1f}s)"

    def _draw(self, now: float | None = None) -> None:
        filled = _BAR_WIDTH * self.done // self.total
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self._write(f"\r{self.label} [{bar}] {self._counts()}")
        self._last_draw = time.perf_counter() if now is None else now
        self._drawn = True

    def _write(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except (OSError, ValueError):  # closed or broken stream: stop showing progress
            self._enabled = self._tty = False


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (OSError, ValueError):  # a closed stream
        return False
