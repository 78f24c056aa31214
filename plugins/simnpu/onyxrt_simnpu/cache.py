"""The on-disk program cache: compile once, load on every later session.

Compiling is the slow part of creating a session on an NPU (real compilers take seconds
to minutes), so vendors cache compiled programs keyed by everything that affects them
(:func:`~onyxrt_simnpu.compiler.cache_key`). This cache is one file per key in a folder
(``<key>.npuprog``).

Trust model
-----------
A cache folder is a file system the process does not control, and a program decides
every result of every later session that loads it. So an entry is never trusted for
being where it is:

* **The folder** must be owned by the user running the process (the effective uid) and
  writable by nobody else, as ssh demands of ``~/.ssh``. A new folder is made ``0700``.
  A folder that fails the check (owned by someone else, group- or world-writable, not a
  folder, replaced by a symbolic link since the cache first opened it) is *refused*: one
  warning on the ``onyxrt.simnpu`` logger names the folder and the reason, and the cache
  behaves as disabled, so sessions compile in memory. Refusing never fails a session: the
  cache is an optimisation, and a shared ``/tmp`` folder someone else created first must
  not turn into an outage.
* **Entries are authenticated**, not just checksummed: each carries an HMAC-SHA256, under
  a per-user secret, of its cache key and its program bytes. The secret (32 random bytes)
  is :func:`key_file`, ``$XDG_CONFIG_HOME/onyxrt/simnpu-cache.key`` (by default under
  ``~/.config``), outside every cache folder so that a cache folder holds nothing but
  entries and wiping it loses nothing. It is created with ``O_EXCL`` and mode ``0600``
  in a folder made ``0700``, and is only used while that folder passes the check above
  and the file is a regular file owned by the user that nobody else can read or write
  (otherwise the cache is refused). Someone who can plant a file cannot produce a valid
  MAC without the secret, and binding the key into the MAC stops an authentic entry being
  renamed to answer for another group. The caller also passes a ``verify`` check of the
  program's signature against the group it is loaded for.
* **Entries are read safely**: opened relative to the checked folder's descriptor with
  ``O_NOFOLLOW | O_NONBLOCK`` (a symbolic link or a FIFO cannot redirect or block the
  read), then ``fstat``: a regular file, owned by the user, not writable by others, no
  larger than ``max_entry_bytes``; exactly ``st_size`` bytes are read. The bound defaults
  to :data:`DEFAULT_MAX_ENTRY_BYTES`; the provider passes its ``memory_limit`` plus
  :data:`ENTRY_OVERHEAD_BYTES`, since a program's baked weights must fit device memory.
* **Writes are atomic**: a temporary file with a random name is created in the folder
  with ``O_CREAT | O_EXCL | O_NOFOLLOW`` and mode ``0600`` (never through a planted
  link), written, then renamed over the entry with ``os.replace`` (which replaces a
  planted link, never writes through it). There is no fsync: an entry torn by a crash
  fails its MAC and is rebuilt, so durability buys nothing here.

An entry that fails any check (damaged, unauthenticated, not a regular file, too large,
the wrong program) is ignored with a warning naming it, deleted, and reported as a miss,
so the caller recompiles and stores a good entry. Failing to write the cache (a
read-only or full disk) is logged and otherwise ignored.

The checks are POSIX ones (owners, modes, ``O_NOFOLLOW``, descriptor-relative calls);
where the platform lacks them (Windows) the cache is refused rather than used unchecked.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from .program import CorruptProgram, Program

__all__ = [
    "ProgramCache",
    "SUFFIX",
    "KEY_FILE_NAME",
    "key_file",
    "ENTRY_MAGIC",
    "ENTRY_OVERHEAD_BYTES",
    "DEFAULT_MAX_ENTRY_BYTES",
]

logger = logging.getLogger("onyxrt.simnpu")

#: File name suffix of cache entries.
SUFFIX = ".npuprog"
#: File name of the per-user MAC secret, in the folder :func:`key_file` names.
KEY_FILE_NAME = "simnpu-cache.key"
#: First bytes of an entry: this magic, then the 32-byte MAC, then the program's bytes.
ENTRY_MAGIC = b"NPUMAC1\x00"
#: Room for an entry's header (instructions, constant table) beyond its baked weights.
ENTRY_OVERHEAD_BYTES = 64 << 20
#: Largest entry read when no bound is given: the provider's default ``memory_limit``
#: (1 GiB, which a program's resident weights must fit) plus the header allowance.
DEFAULT_MAX_ENTRY_BYTES = (1 << 30) + ENTRY_OVERHEAD_BYTES

_KEY = re.compile(r"[0-9A-Za-z_-]{1,128}")
_MAC_SIZE = hashlib.sha256().digest_size
_PREFIX_SIZE = len(ENTRY_MAGIC) + _MAC_SIZE
_SECRET_SIZE = 32
_MAC_DOMAIN = b"onyxrt-simnpu program cache entry v1\x00"
#: How long to wait for a key file another session has created but not yet written.
_KEY_WAIT_S = 2.0

_POSIX = (
    hasattr(os, "geteuid")
    and hasattr(os, "O_NOFOLLOW")
    and hasattr(os, "O_DIRECTORY")
    and os.open in os.supports_dir_fd
    and os.unlink in os.supports_dir_fd
)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_O_NONBLOCK = getattr(os, "O_NONBLOCK", 0)

# Refusals already warned about in this process, as (folder, reason): a server that
# creates a session per request warns once, not once per session.
_warned: set[tuple[str, str]] = set()
_warned_lock = threading.Lock()


class _Refused(Exception):
    """The cache folder (or its secret) cannot be trusted; the message says why."""


class _BadEntry(Exception):
    """An entry must not be used; the message says why."""


class ProgramCache:
    """Compiled programs on disk, by cache key; ``directory=None`` disables the cache.

    Counters for tests and reports: ``hits`` (loads served from disk), ``misses`` (loads
    that found no usable entry, rejected ones included) and ``rebuilt`` (entries rejected
    and deleted, each to be recompiled by the caller); ``stores`` counts entries written.
    ``refused`` is ``None``, or why the folder was refused (the cache then acts disabled).

    ``max_entry_bytes`` bounds what :meth:`load` reads; a larger file is rejected
    unread. Example::

        cache = ProgramCache("/home/me/.cache/simnpu",
                             max_entry_bytes=memory_limit + ENTRY_OVERHEAD_BYTES)
        program = cache.load(key, verify=check)
        if program is None:
            program = compile(...)
            cache.store(key, program)
    """

    def __init__(
        self,
        directory: str | os.PathLike[str] | None,
        *,
        max_entry_bytes: int = DEFAULT_MAX_ENTRY_BYTES,
    ) -> None:
        """Cache in ``directory`` (created ``0700`` on first use); ``None`` disables it."""
        self.directory: Path | None = Path(directory) if directory is not None else None
        self.max_entry_bytes = int(max_entry_bytes)
        self.hits = 0
        self.misses = 0
        self.rebuilt = 0
        self.stores = 0
        self.refused: str | None = None
        self._real: str | None = None  # the folder's resolved path, fixed on first use
        self._secret: bytes | None = None
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Whether programs are cached on disk at all (``False`` once the folder is refused)."""
        return self.directory is not None and self.refused is None

    def path(self, key: str) -> Path | None:
        """The file of entry ``key`` (``None`` when the cache is disabled)."""
        if not _KEY.fullmatch(key):
            raise ValueError(f"invalid cache key {key!r} (expected a hex digest)")
        return None if self.directory is None else self.directory / f"{key}{SUFFIX}"

    # -- reading ----------------------------------------------------------------------
    def load(
        self, key: str, verify: Callable[[Program], str | None] | None = None
    ) -> Program | None:
        """The cached program for ``key``, or ``None`` if absent or rejected.

        ``verify(program)`` returns ``None`` when the program fits what the caller is
        loading it for, else the reason it does not. A rejected entry (damaged,
        unauthenticated, unsafe, or refused by ``verify``) is deleted, with a warning.
        """
        path = self.path(key)
        dir_fd = self._open_folder() if path is not None else None
        if path is None or dir_fd is None:
            self.misses += 1
            return None
        name = path.name
        try:
            program = self._read(dir_fd, key, name, verify)
        except _BadEntry as exc:
            logger.warning(
                "simnpu program cache: ignoring entry %s: %s; deleted, it will be rebuilt",
                path, exc,
            )
            try:
                os.unlink(name, dir_fd=dir_fd)
            except FileNotFoundError:
                pass
            except OSError as unlink_exc:
                logger.warning("simnpu program cache: cannot delete %s (%s)", path, unlink_exc)
            self.misses += 1
            self.rebuilt += 1
            return None
        except OSError as exc:
            logger.warning("simnpu program cache: cannot read %s (%s); recompiling", path, exc)
            self.misses += 1
            return None
        finally:
            os.close(dir_fd)
        if program is None:
            self.misses += 1
            return None
        self.hits += 1
        logger.debug("simnpu program cache: loaded %s", path)
        return program

    def _read(
        self,
        dir_fd: int,
        key: str,
        name: str,
        verify: Callable[[Program], str | None] | None,
    ) -> Program | None:
        """The authenticated, checked program in entry ``name``; ``None`` if there is none."""
        data = _read_entry(dir_fd, name, self.max_entry_bytes)
        if data is None:
            return None
        view = memoryview(data)
        if len(data) < _PREFIX_SIZE or view[: len(ENTRY_MAGIC)] != ENTRY_MAGIC:
            raise _BadEntry(
                "it is not an authenticated entry (damaged, from an older version, or not "
                "written by this cache)"
            )
        body = view[_PREFIX_SIZE:]
        if not hmac.compare_digest(bytes(view[len(ENTRY_MAGIC):_PREFIX_SIZE]), self._mac(key, body)):
            raise _BadEntry(
                "its MAC does not verify (damaged, or not written by this user's cache)"
            )
        try:
            program = Program.from_bytes(body)
        except CorruptProgram as exc:
            raise _BadEntry(f"it is corrupt ({exc})") from None
        reason = verify(program) if verify is not None else None
        if reason is not None:
            raise _BadEntry(f"its program does not compile this group ({reason})")
        return program

    # -- writing ----------------------------------------------------------------------
    def store(self, key: str, program: Program) -> None:
        """Write ``program`` under ``key`` atomically (nothing when disabled or refused)."""
        path = self.path(key)
        dir_fd = self._open_folder() if path is not None else None
        if path is None or dir_fd is None:
            return
        try:
            body = program.to_bytes()
            size = _PREFIX_SIZE + len(body)
            if size > self.max_entry_bytes:
                logger.warning(
                    "simnpu program cache: not caching %s: %d bytes is more than the %d "
                    "bytes a cache entry may take", path, size, self.max_entry_bytes,
                )
                return
            _write_entry(dir_fd, path.name, (ENTRY_MAGIC, self._mac(key, body), body))
        except OSError as exc:
            logger.warning("simnpu program cache: cannot write %s (%s); not cached", path, exc)
            return
        finally:
            os.close(dir_fd)
        self.stores += 1
        logger.debug("simnpu program cache: stored %s (%d bytes)", path, size)

    # -- the folder and its secret ------------------------------------------------------
    def _open_folder(self) -> int | None:
        """A descriptor on the checked cache folder, or ``None`` when the cache is
        disabled or the folder refused (warned once). Every entry operation goes through
        it, so a folder swapped after the check is never used."""
        if self.directory is None or self.refused is not None:
            return None
        try:
            with self._lock:
                if self._real is None:
                    self._real = _make_folder(self.directory)
                dir_fd = _open_checked_folder(self._real)
                if self._secret is None:
                    try:
                        self._secret = _load_secret()
                    except BaseException:
                        os.close(dir_fd)
                        raise
                return dir_fd
        except _Refused as exc:
            self._refuse(str(exc))
            return None

    def _refuse(self, reason: str) -> None:
        self.refused = reason
        where = self._real or str(self.directory)
        with _warned_lock:
            first = (where, reason) not in _warned
            _warned.add((where, reason))
        logger.log(
            logging.WARNING if first else logging.DEBUG,
            "simnpu program cache: not using %s: %s; programs are compiled in memory. Use a "
            "folder owned by you that only you can write (a new one is made with mode 0700).",
            where, reason,
        )

    def _mac(self, key: str, body: bytes | memoryview) -> bytes:
        assert self._secret is not None
        mac = hmac.new(self._secret, _MAC_DOMAIN, hashlib.sha256)
        mac.update(key.encode("ascii") + b"\x00")
        mac.update(body)
        return mac.digest()

    def __repr__(self) -> str:
        where = str(self.directory) if self.directory else None
        refused = f", refused={self.refused!r}" if self.refused else ""
        return (
            f"ProgramCache({where!r}, hits={self.hits}, misses={self.misses}, "
            f"rebuilt={self.rebuilt}{refused})"
        )


# -- file system helpers ------------------------------------------------------------------
def _make_folder(directory: Path) -> str:
    """Create ``directory`` (the last level ``0700``) if needed; its resolved path."""
    if not _POSIX:
        raise _Refused("this platform lacks the POSIX ownership checks the cache relies on")
    try:
        os.makedirs(directory, mode=0o700, exist_ok=True)
    except FileExistsError:
        raise _Refused("it exists and is not a folder") from None
    except OSError as exc:
        raise _Refused(f"cannot create it ({exc.strerror or exc})") from None
    # Symbolic links the user configured are followed once, here; later the resolved
    # folder is opened with O_NOFOLLOW, so a link swapped in for it is refused.
    return os.path.realpath(directory)


def _open_checked_folder(real: str) -> int:
    try:
        dir_fd = os.open(real, os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC)
    except OSError as exc:
        if os.path.islink(real):
            raise _Refused("it has been replaced by a symbolic link") from None
        raise _Refused(f"cannot open it ({exc.strerror or exc})") from None
    st = os.fstat(dir_fd)
    problem = (
        "it is not a folder" if not stat.S_ISDIR(st.st_mode) else _ownership_problem(st, 0o022)
    )
    if problem:
        os.close(dir_fd)
        raise _Refused(problem)
    return dir_fd


def _ownership_problem(st: os.stat_result, forbidden: int) -> str | None:
    """Why a file with status ``st`` cannot be trusted: not ours, or ``forbidden`` mode
    bits set (``0o022``: writable by others; ``0o077``: any access by others)."""
    uid = os.geteuid()
    if st.st_uid != uid:
        return f"it is owned by uid {st.st_uid}, not by this user (uid {uid})"
    bits = st.st_mode & forbidden
    if bits:
        who = " and ".join(
            w for w, mask in (("its group", 0o070), ("other users", 0o007)) if bits & mask
        )
        access = "writable" if forbidden == 0o022 else "accessible"
        return f"it is {access} by {who} (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def key_file() -> Path:
    """Where the per-user MAC secret of every cache lives:
    ``$XDG_CONFIG_HOME/onyxrt/simnpu-cache.key``, ``~/.config/onyxrt/simnpu-cache.key``
    when ``XDG_CONFIG_HOME`` is unset (or not absolute, as the XDG spec says)."""
    base = os.environ.get("XDG_CONFIG_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".config"
    return root / "onyxrt" / KEY_FILE_NAME


def _load_secret() -> bytes:
    """The user's MAC secret, from (or created in) a checked key folder."""
    try:
        path = key_file()
    except (RuntimeError, KeyError):  # no home folder: Path.home() cannot tell
        raise _Refused(
            "there is no home folder to keep its key in (set XDG_CONFIG_HOME)"
        ) from None
    try:
        dir_fd = _open_checked_folder(_make_folder(path.parent))
    except _Refused as exc:
        raise _Refused(f"its key folder {path.parent}: {exc}") from None
    try:
        return _load_or_create_secret(dir_fd, path)
    finally:
        os.close(dir_fd)


def _load_or_create_secret(dir_fd: int, path: Path) -> bytes:
    """The secret in ``path`` (in the folder ``dir_fd``), created (``O_EXCL``, ``0600``)
    when there is none."""
    name = path.name
    deadline = time.monotonic() + _KEY_WAIT_S
    while True:
        try:
            fd = os.open(
                name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dir_fd
            )
        except FileNotFoundError:
            try:
                fd = os.open(
                    name,
                    os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
                    0o600,
                    dir_fd=dir_fd,
                )
            except FileExistsError:
                continue  # another session made it first: read theirs
            except OSError as exc:
                raise _Refused(f"cannot create its key file {path} ({exc.strerror})") from None
            secret = secrets.token_bytes(_SECRET_SIZE)
            try:
                _write_all(fd, secret)
            except OSError as exc:
                raise _Refused(f"cannot write its key file {path} ({exc.strerror})") from None
            finally:
                os.close(fd)
            return secret
        except OSError as exc:
            raise _Refused(f"cannot open its key file {path} ({exc.strerror})") from None
        try:
            st = os.fstat(fd)
            problem = (
                "is not a regular file" if not stat.S_ISREG(st.st_mode)
                else _ownership_problem(st, 0o077)
            )
            if problem:
                raise _Refused(f"its key file {path} cannot be trusted: {problem}")
            if st.st_size == _SECRET_SIZE:
                stored = _read_exactly(fd, _SECRET_SIZE)
                if stored is not None:
                    return bytes(stored)
            elif st.st_size > _SECRET_SIZE or time.monotonic() > deadline:
                raise _Refused(
                    f"its key file {path} is malformed ({st.st_size} bytes, expected "
                    f"{_SECRET_SIZE}); delete it to have a new one made"
                )
        finally:
            os.close(fd)
        time.sleep(0.01)  # being written by the session that created it


def _read_entry(dir_fd: int, name: str, max_bytes: int) -> bytearray | None:
    """The bytes of entry ``name`` (``None`` if absent); :class:`_BadEntry` if it is not
    a regular file of ours within ``max_bytes``."""
    try:
        # O_NONBLOCK: opening a FIFO for reading then returns at once instead of waiting
        # for a writer (it is refused below); it changes nothing for a regular file.
        fd = os.open(name, os.O_RDONLY | _O_NOFOLLOW | _O_NONBLOCK | _O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: FreeBSD's O_NOFOLLOW
            raise _BadEntry("it is a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a socket
            raise _BadEntry("it is not a regular file") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _BadEntry(f"it is not a regular file ({_kind(st.st_mode)})")
        problem = _ownership_problem(st, 0o022)
        if problem:
            raise _BadEntry(problem)
        if st.st_size > max_bytes:
            raise _BadEntry(
                f"it is {st.st_size} bytes, more than the {max_bytes} bytes a cache entry "
                "may take"
            )
        data = _read_exactly(fd, st.st_size)
        if data is None:
            raise _BadEntry("it was truncated while being read")
        return data
    finally:
        os.close(fd)


def _read_exactly(fd: int, size: int) -> bytearray | None:
    """``size`` bytes from ``fd`` (never more); ``None`` if the file ends sooner."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    with open(fd, "rb", buffering=0, closefd=False) as f:
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                return None
            got += n
    return buf


def _write_entry(dir_fd: int, name: str, chunks: tuple[bytes, ...]) -> None:
    """Put ``chunks`` under ``name`` atomically: a fresh ``0600`` temporary file in the
    folder (``O_EXCL``: never an existing file or a planted link), then a rename."""
    tmp = f".{name}.{secrets.token_hex(8)}.tmp"
    fd = os.open(
        tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600,
        dir_fd=dir_fd,
    )
    try:
        try:
            for chunk in chunks:
                _write_all(fd, chunk)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp = ""
    finally:
        if tmp:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return f"mode {mode:o}"
