"""The on-disk program cache: compile once, load on every later session.

Compiling is the slow part of creating a session on an NPU (real compilers take seconds
to minutes), so vendors cache compiled programs keyed by everything that affects them
(:func:`~onyxrt_simnpu.compiler.cache_key`). This cache is one file per key in a
directory (``<key>.npuprog``), written atomically (a temporary file in the same
directory, then ``os.replace``) so a crash or a concurrent session never leaves a
half-written entry under the real name.

A cache is a file system the process does not control, so an entry is never trusted:
:meth:`ProgramCache.load` verifies it through
:meth:`~onyxrt_simnpu.program.Program.from_bytes` and, if it is damaged, deletes it, logs
a warning on the ``onyxrt.simnpu`` logger and reports a miss, so the caller recompiles
and stores a good entry. Failing to write the cache (a read-only or full disk) is logged
and otherwise ignored: the cache is an optimisation, never a reason for a session to fail.
"""

from __future__ import annotations

import logging
import os
import re
import tempfile
from pathlib import Path

from .program import CorruptProgram, Program

__all__ = ["ProgramCache", "SUFFIX"]

logger = logging.getLogger("onyxrt.simnpu")

#: File name suffix of cache entries.
SUFFIX = ".npuprog"
_KEY = re.compile(r"[0-9A-Za-z_-]{1,128}")


class ProgramCache:
    """Compiled programs on disk, by cache key; ``directory=None`` disables the cache.

    Counters for tests and reports: ``hits`` (loads served from disk), ``misses`` (loads
    that found no usable entry, corrupt ones included) and ``rebuilt`` (corrupt entries
    found and deleted, each to be recompiled by the caller); ``stores`` counts entries
    written.
    """

    def __init__(self, directory: str | os.PathLike[str] | None) -> None:
        """Cache in ``directory`` (created on the first store); ``None`` disables it."""
        self.directory: Path | None = Path(directory) if directory is not None else None
        self.hits = 0
        self.misses = 0
        self.rebuilt = 0
        self.stores = 0

    @property
    def enabled(self) -> bool:
        """Whether programs are cached on disk at all."""
        return self.directory is not None

    def path(self, key: str) -> Path | None:
        """The file of entry ``key`` (``None`` when the cache is disabled)."""
        if not _KEY.fullmatch(key):
            raise ValueError(f"invalid cache key {key!r} (expected a hex digest)")
        return None if self.directory is None else self.directory / f"{key}{SUFFIX}"

    def load(self, key: str) -> Program | None:
        """The cached program for ``key``, or ``None`` if absent or corrupt (a corrupt
        entry is deleted and a warning logged)."""
        path = self.path(key)
        if path is None:
            self.misses += 1
            return None
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.misses += 1
            return None
        except OSError as exc:
            logger.warning("simnpu program cache: cannot read %s (%s); recompiling", path, exc)
            self.misses += 1
            return None
        try:
            program = Program.from_bytes(data)
        except CorruptProgram as exc:
            logger.warning(
                "simnpu program cache: entry %s is corrupt (%s); deleted, it will be rebuilt",
                path, exc,
            )
            try:
                path.unlink(missing_ok=True)
            except OSError as unlink_exc:
                logger.warning("simnpu program cache: cannot delete %s (%s)", path, unlink_exc)
            self.misses += 1
            self.rebuilt += 1
            return None
        self.hits += 1
        logger.debug("simnpu program cache: loaded %s", path)
        return program

    def store(self, key: str, program: Program) -> None:
        """Write ``program`` under ``key`` atomically (nothing when disabled)."""
        path = self.path(key)
        if path is None:
            return
        data = program.to_bytes()
        tmp_name = ""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{key}.", suffix=".tmp", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp_name, path)
            tmp_name = ""
        except OSError as exc:
            logger.warning("simnpu program cache: cannot write %s (%s); not cached", path, exc)
            return
        finally:
            if tmp_name:
                try:
                    os.unlink(tmp_name)
                except OSError:
                    pass
        self.stores += 1
        logger.debug("simnpu program cache: stored %s (%d bytes)", path, len(data))

    def __repr__(self) -> str:
        return (
            f"ProgramCache({str(self.directory) if self.directory else None!r}, hits={self.hits}, "
            f"misses={self.misses}, rebuilt={self.rebuilt})"
        )
