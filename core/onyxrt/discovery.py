"""Finding the installed providers: entry points → pluggy → provider specs → probes.

pluggy's own ``load_setuptools_entrypoints`` stops at the first plugin that fails to
import; :class:`ProviderCatalog` loads each entry point on its own instead, so one broken
plugin is recorded in :attr:`ProviderCatalog.failures` (with its package and error) and
the others keep working.

The environment variable ``ONYXRT_PLUGINS`` restricts what loads: a comma-separated list
of entry-point names or distribution names. Items starting with ``-``
exclude; a list of only exclusions loads everything else. Example:
``ONYXRT_PLUGINS=cpu,onyxrt-simnpu`` or ``ONYXRT_PLUGINS=-cuda``.

**Plugin code runs time-bounded, on its own thread.** Importing a plugin's module,
calling its ``onyxrt_providers`` hook and calling a provider's factory (which imports the
provider class) are each given ``ONYXRT_PLUGIN_LOAD_TIMEOUT_S`` seconds (default 30); a
provider's probe is given ``ONYXRT_PROBE_TIMEOUT_S`` (default 10). Each runs on a daemon
thread the caller waits for; one that does not finish in time is recorded as that
plugin's failure (or marks the provider unusable) instead of hanging every listing and
session, and is left to finish or die with the process. While such a call is still
running, a later catalog (after :func:`reset_catalog`) does not start it again but waits
only for what is left of the same bound: an import stuck inside a plugin module keeps
Python's per-module import lock, and a second import of that module would block on it.
What cannot be bounded: a plugin that holds the lock of a module others need (one stuck
half-way through importing numpy blocks every later ``import numpy``), and one that ends
the process outright (``os._exit``, a crash in native code).

**Exceptions.** Anything plugin code raises there, ``BaseException`` included
(``sys.exit()`` → ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit``), is recorded
as that plugin's failure. A ``KeyboardInterrupt`` is recorded too: Python delivers the
user's Ctrl+C (SIGINT) only to the main thread, and plugin code never runs there, so one
raised on a plugin's thread came from the plugin itself. The user's own Ctrl+C interrupts
the caller's wait and propagates unchanged; the interrupted plugin is loaded again by the
next query (joining the call still in flight). The one case that cannot be told apart —
a plugin calling ``_thread.interrupt_main()`` — propagates like the user's Ctrl+C.

**Duplicate provider names** do not break anything: the first declaration is kept and
each later one is recorded in :attr:`ProviderCatalog.failures`, naming both packages.
Plugins load in a fixed order, so which one is kept does not depend on ``sys.path``:
first-party plugins (from distributions named ``onyxrt-*``; for an entry point without a
distribution, from modules named ``onyxrt_*``) before the others, then by distribution
name and entry-point name. A third-party package declaring ``CPUExecutionProvider``
therefore never replaces onyxrt-cpu's. (The name is a convention, not a trust boundary:
any installed package can run code at import.)

**Lazy loading.** A plugin's entry-point name (``cpu``) says nothing of the provider names
it declares (``CPUExecutionProvider``): only its hook tells, so listing everything
(:meth:`~ProviderCatalog.names`, :meth:`~ProviderCatalog.available`, reading
``specs``/``failures``/``excluded``) imports every selected plugin. Asking for named
providers (:meth:`~ProviderCatalog.provides`, :meth:`~ProviderCatalog.status`) imports
plugins in the order above only until one declares the name; because a name's first
declaration in that order is the one a full load keeps, the answer is the same as after
importing everything, and plugins after it (a third-party package that patches numpy, for
a session that asks for the CPU only) are not imported.
"""

from __future__ import annotations

import difflib
import functools
import importlib.metadata
import os
import re
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import field, replace
from typing import Any

import pluggy

from .devices import Device, EpDevice
from .errors import (
    DuplicateProviderError,
    InvalidArgument,
    ProtocolVersionError,
    ProviderUnavailable,
)
from .hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME, ProviderHooks, ProviderSpec
from .protocol import SUPPORTED_PROTOCOL_VERSIONS, ExecutionProvider, ProbeResult
from .records import record

__all__ = [
    "PLUGINS_ENV_VAR",
    "KNOWN_PROVIDER_NAMES",
    "PROVIDER_PACKAGES",
    "install_command",
    "PROBE_TIMEOUT_ENV_VAR",
    "PLUGIN_LOAD_TIMEOUT_ENV_VAR",
    "probe_timeout",
    "plugin_load_timeout",
    "provider_label",
    "PluginFailure",
    "ProviderStatus",
    "ProviderCatalog",
    "catalog",
    "reset_catalog",
]

PLUGINS_ENV_VAR = "ONYXRT_PLUGINS"
PROBE_TIMEOUT_ENV_VAR = "ONYXRT_PROBE_TIMEOUT_S"
PLUGIN_LOAD_TIMEOUT_ENV_VAR = "ONYXRT_PLUGIN_LOAD_TIMEOUT_S"
#: Seconds a provider's probe may take before it is marked unusable.
DEFAULT_PROBE_TIMEOUT_S = 10.0
#: Seconds a plugin's import, its hook or a provider's factory may take. Longer than the
#: probe's: a plugin module or a provider class may import a large framework, which takes
#: seconds from a cold disk.
DEFAULT_PLUGIN_LOAD_TIMEOUT_S = 30.0
CPU_PROVIDER = "CPUExecutionProvider"
#: Every provider name onnxruntime's builds know (its ``get_all_providers()``) plus the
#: ones onyxrt's packages add: a name outside these that is not installed is a typo
#: (``set_providers`` raises for it, as onnxruntime does); one inside is only missing.
KNOWN_PROVIDER_NAMES = frozenset({
    "NvTensorRTRTXExecutionProvider", "TensorrtExecutionProvider", "CUDAExecutionProvider",
    "MIGraphXExecutionProvider", "ROCMExecutionProvider", "OpenVINOExecutionProvider",
    "DnnlExecutionProvider", "VitisAIExecutionProvider", "QNNExecutionProvider",
    "NnapiExecutionProvider", "VSINPUExecutionProvider", "JsExecutionProvider",
    "CoreMLExecutionProvider", "ArmNNExecutionProvider", "ACLExecutionProvider",
    "DmlExecutionProvider", "RknpuExecutionProvider", "WebNNExecutionProvider",
    "WebGpuExecutionProvider", "XnnpackExecutionProvider", "CANNExecutionProvider",
    "AzureExecutionProvider", "SimNPUExecutionProvider", CPU_PROVIDER,
})
#: The package of each provider onyxrt has one for, and the command that installs it. A
#: name in :data:`KNOWN_PROVIDER_NAMES` without an entry is one onnxruntime has and onyxrt
#: does not have yet.
PROVIDER_PACKAGES: dict[str, tuple[str, str]] = {
    "CUDAExecutionProvider": ("onyxrt-cuda", "pip install 'onyxrt-cuda[cuda12]' (CUDA 12) or "
                                             "pip install 'onyxrt-cuda[cuda13]' (CUDA 13)"),
    "ROCMExecutionProvider": ("onyxrt-rocm", "pip install onyxrt-rocm"),
    "SimNPUExecutionProvider": ("onyxrt-simnpu", "pip install onyxrt-simnpu"),
    CPU_PROVIDER: ("onyxrt-cpu", "pip install onyxrt-cpu"),
}


def _seconds_from_env(var: str, default: float) -> float:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InvalidArgument(f"{var} must be a positive number of seconds, got {raw!r}")
    return value


def probe_timeout() -> float:
    """The probe time limit in seconds (``ONYXRT_PROBE_TIMEOUT_S``, default 10)."""
    return _seconds_from_env(PROBE_TIMEOUT_ENV_VAR, DEFAULT_PROBE_TIMEOUT_S)


def plugin_load_timeout() -> float:
    """The time limit in seconds for importing a plugin, calling its hook and calling a
    provider's factory, each (``ONYXRT_PLUGIN_LOAD_TIMEOUT_S``, default 30)."""
    return _seconds_from_env(PLUGIN_LOAD_TIMEOUT_ENV_VAR, DEFAULT_PLUGIN_LOAD_TIMEOUT_S)


# -- calling plugin code ------------------------------------------------------------------


@record(eq=False)
class _PluginCall:
    """One call into plugin code, on its own daemon thread. ``error`` and ``traceback``
    are formatted on that thread (an exception's ``__str__`` is plugin code too)."""

    started: float
    done: threading.Event = field(default_factory=threading.Event)
    value: Any = None
    error: str = ""
    traceback: str = ""

    @property
    def finished(self) -> bool:
        return self.done.is_set()


#: Keyed calls still running (imports, hooks, factories), process-wide like the import
#: locks they may hold: a later catalog joins one instead of starting it again.
_running: dict[str, _PluginCall] = {}
_running_lock = threading.Lock()


def _describe(exc: BaseException) -> str:
    try:
        message = str(exc)
    except BaseException:  # a plugin's __str__ may raise anything
        message = "<the exception's message could not be read>"
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _run_call(call: _PluginCall, fn: Callable[[], Any], key: str | None) -> None:
    try:
        call.value = fn()
    except BaseException as exc:  # SystemExit, KeyboardInterrupt...: see the module doc
        call.error = _describe(exc)
        try:
            call.traceback = traceback.format_exc()
        except BaseException:  # formatting runs the exception's __str__ again
            call.traceback = ""
    finally:
        if key is not None:
            with _running_lock:
                if _running.get(key) is call:
                    del _running[key]
        call.done.set()


def _call_plugin(
    fn: Callable[[], Any], limit: float, thread_name: str, key: str | None = None
) -> tuple[_PluginCall, bool]:
    """Run ``fn`` on a daemon thread and wait for it up to ``limit`` seconds; returns the
    call (``finished`` or not) and whether it was started by an earlier caller.

    With a ``key``, a call still running under that key is joined rather than started
    again (see the module doc), and waited for only what is left of ``limit`` since it
    started. A ``KeyboardInterrupt`` while waiting is the user's: it propagates.
    """
    thread: threading.Thread | None = None
    with _running_lock:
        call = _running.get(key) if key is not None else None
        earlier = call is not None
        if call is None:
            call = _PluginCall(time.monotonic())
            if key is not None:
                _running[key] = call
            thread = threading.Thread(target=_run_call, args=(call, fn, key), name=thread_name,
                                      daemon=True)
    if thread is not None:
        try:
            thread.start()
        except RuntimeError:  # no new threads at interpreter shutdown: run it here, unbounded
            _run_call(call, fn, key)
    remaining = limit - (time.monotonic() - call.started)
    if remaining > 0:
        call.done.wait(remaining)
    return call, earlier


def _provider_class(factory: Callable[[], Any]) -> type[ExecutionProvider]:
    cls = factory()
    if not (isinstance(cls, type) and issubclass(cls, ExecutionProvider)):
        raise TypeError(f"factory returned {cls!r}, not an ExecutionProvider subclass")
    return cls


def _checked_probe(cls: type[ExecutionProvider]) -> ProbeResult:
    """``cls.probe()``, copied into a plain :class:`ProbeResult` (on the probe's thread:
    reading a plugin's result is running its code)."""
    result = cls.probe()
    if not isinstance(result, ProbeResult):
        raise TypeError(f"probe() returned {type(result).__name__}, expected ProbeResult")
    return ProbeResult(bool(result.usable), str(result.reason), str(result.fix),
                       {str(k): str(v) for k, v in dict(result.details).items()})


def _declared_specs(hook: Callable[[], Any], package: str, version: str) -> list[ProviderSpec | str]:
    """A plugin's ``onyxrt_providers()``: its specs with the package filled in, or a
    message for each item that is not a :class:`ProviderSpec` (run on the plugin's
    thread: iterating what a hook returned runs its code)."""
    specs: list[ProviderSpec | str] = []
    for spec in list(hook() or ()):
        if not isinstance(spec, ProviderSpec):
            specs.append(f"onyxrt_providers() returned {type(spec).__name__}, expected ProviderSpec")
            continue
        specs.append(replace(spec, package=spec.package or package,
                             package_version=spec.package_version or version))
    return specs


# -- what is installed --------------------------------------------------------------------


def install_command(name: str) -> str:
    """How to install the provider ``name``: ``"pip install onyxrt-rocm"``; '' when onyxrt
    has no package for it (:data:`PROVIDER_PACKAGES`)."""
    return PROVIDER_PACKAGES.get(name, ("", ""))[1]


def provider_label(name: str) -> str:
    """``name`` with the package that installed it, for error messages:
    ``"FooExecutionProvider (from onyxrt-foo 1.2)"`` (the bare name when unknown)."""
    cat = _catalog
    # _specs, not specs: a label must not import the plugins not loaded yet.
    spec = cat._specs.get(name) if cat is not None else None
    if spec is None or not spec.package:
        return name
    version = f" {spec.package_version}" if spec.package_version else ""
    return f"{name} (from {spec.package}{version})"


@record(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded (or a provider declaration that was ignored),
    why, and what to do about it (``fix``, empty when reinstalling is the fix)."""

    entry_point: str
    package: str
    error: str
    traceback: str = ""
    fix: str = ""

    def __str__(self) -> str:
        return f"plugin {self.entry_point!r} from {self.package or 'unknown package'}: {self.error}"


@record(frozen=True)
class ProviderStatus:
    """Everything known about one installed provider.

    States (USER_PAINS #2): *installed* (a plugin declares it), *usable* (its class
    imports and its probe passed). Whether a session *requested* or *used* it is on the
    session's placement report.
    """

    name: str
    package: str
    package_version: str
    protocol_version: int
    priority: int
    usable: bool
    reason: str = ""
    fix: str = ""
    details: dict[str, str] = field(default_factory=dict)
    device_types: tuple[str, ...] = ()

    @property
    def state(self) -> str:
        """``"usable"`` or ``"installed, not usable"``."""
        return "usable" if self.usable else "installed, not usable"


def _env_filter() -> tuple[set[str], set[str]]:
    raw = os.environ.get(PLUGINS_ENV_VAR, "")
    allow: set[str] = set()
    deny: set[str] = set()
    for item in (s.strip() for s in raw.split(",")):
        if not item:
            continue
        if item.startswith("-"):
            deny.add(item[1:].strip().lower())
        else:
            allow.add(item.lower())
    return allow, deny


def _selected(keys: Iterable[str], allow: set[str], deny: set[str]) -> bool:
    lowered = {k.lower() for k in keys if k}
    if lowered & deny:
        return False
    return not allow or bool(lowered & allow)


def _normalized(package: str) -> str:
    """A distribution name as pip compares them (PEP 503): ``Onyxrt_CPU`` → ``onyxrt-cpu``."""
    return re.sub(r"[-_.]+", "-", package).lower()


def _name_and_version(dist: Any) -> tuple[str, str]:
    """A distribution's ``Name`` and ``Version`` ("" where unknown), read from the head of
    its METADATA: ``dist.name`` and ``dist.version`` each parse the whole file with the
    email parser (~0.3 ms apiece, for every installed plugin at the first session)."""
    if dist is None:
        return "", ""
    try:
        text = dist.read_text("METADATA") or dist.read_text("PKG-INFO") or ""
    except Exception:  # an odd Distribution: its own accessors below
        text = ""
    found: dict[str, str] = {}
    for line in text.splitlines():
        if not line:  # the headers end at the first blank line
            break
        key, sep, value = line.partition(":")
        if sep and key in ("Name", "Version") and key not in found:
            found[key] = value.strip()
    if len(found) < 2:
        return str(getattr(dist, "name", "") or ""), str(getattr(dist, "version", "") or "")
    return found["Name"], found["Version"]


@record(frozen=True)
class _PluginEntry:
    """An entry point with what loading it needs: its distribution and whether it is
    first-party (see the module doc)."""

    entry_point: Any
    package: str
    version: str
    first_party: bool

    @property
    def name(self) -> str:
        return str(self.entry_point.name)

    @property
    def module(self) -> str:
        return str(getattr(self.entry_point, "value", "")).split(":")[0].strip()

    @classmethod
    def of(cls, ep: Any) -> _PluginEntry:
        package, version = _name_and_version(getattr(ep, "dist", None))
        entry = cls(ep, package, version, False)
        if package:
            first_party = _normalized(package).startswith(f"{PROJECT_NAME}-")
        else:
            first_party = entry.module.split(".")[0].startswith(f"{PROJECT_NAME}_")
        return replace(entry, first_party=first_party)

    def order(self) -> tuple[bool, str, str, str]:
        """The load order: first-party first, then by distribution and entry point."""
        return (not self.first_party, _normalized(self.package), self.name, self.module)


class ProviderCatalog:
    """The providers installed in this environment (one per process, see :func:`catalog`).

    Plugins are imported on first need: a listing imports them all, a question about
    named providers (:meth:`provides`, :meth:`status`) only those up to the first that
    declares each name (see the module doc).

    Tests build their own catalog (``ProviderCatalog(entry_points=[...])``) so each gets
    a fresh plugin manager.
    """

    def __init__(self, entry_points: Sequence[importlib.metadata.EntryPoint] | None = None) -> None:
        self._entry_points = entry_points
        self._lock = threading.RLock()
        #: Selected entry points not imported yet, in load order; None until listed.
        self._pending: list[_PluginEntry] | None = None
        self.plugin_manager = pluggy.PluginManager(PROJECT_NAME)
        self.plugin_manager.add_hookspecs(ProviderHooks)
        self._specs: dict[str, ProviderSpec] = {}
        #: provider name -> the entry point whose declaration was kept.
        self._origins: dict[str, _PluginEntry] = {}
        self._failures: list[PluginFailure] = []
        self._excluded: list[str] = []
        self._classes: dict[str, type[ExecutionProvider]] = {}
        self._status: dict[str, ProviderStatus] = {}
        #: registration name -> provider names, of register_library.
        self._libraries: dict[str, tuple[str, list[str]]] = {}
        #: (device name, device id) -> the provider instance made for it (device_provider).
        self._device_providers: dict[tuple[str, int], ExecutionProvider] = {}
        self._device_lock = threading.Lock()

    # -- what a full load knows -------------------------------------------------------
    @property
    def specs(self) -> dict[str, ProviderSpec]:
        """Every installed provider's spec, by name (imports every selected plugin)."""
        return self.load()._specs

    @property
    def failures(self) -> list[PluginFailure]:
        """Plugins that failed to load and declarations that were ignored (imports every
        selected plugin)."""
        return self.load()._failures

    @property
    def excluded(self) -> list[str]:
        """Plugins ``ONYXRT_PLUGINS`` excluded, never imported."""
        return self.load()._excluded

    # -- loading ---------------------------------------------------------------------
    def load(self) -> ProviderCatalog:
        """Load every selected entry point once; later calls do nothing."""
        with self._lock:
            pending = self._plan()
            while pending:
                self._load_next(pending)
            return self

    def provides(self, name: str) -> bool:
        """Whether an installed plugin declares the provider ``name``. Imports plugins in
        load order only until one does (all of them when none does)."""
        with self._lock:
            pending = self._plan()
            while name not in self._specs and pending:
                self._load_next(pending)
            return name in self._specs

    def _plan(self) -> list[_PluginEntry]:
        if self._pending is None:
            eps = (
                list(self._entry_points)
                if self._entry_points is not None
                else list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
            )
            allow, deny = _env_filter()
            entries = []
            for ep in eps:
                entry = _PluginEntry.of(ep)
                if not _selected([entry.name, entry.package], allow, deny):
                    # Not imported at all: an excluded plugin cannot break anything.
                    self._excluded.append(f"{entry.name} ({entry.package}) excluded by {PLUGINS_ENV_VAR}")
                    continue
                entries.append(entry)
            self._pending = sorted(entries, key=_PluginEntry.order)
        return self._pending

    def _load_next(self, pending: list[_PluginEntry]) -> None:
        # Popped only once loaded: after the user's Ctrl+C (or a bad time-limit setting)
        # the next query loads it again.
        self._load_entry_point(pending[0])
        pending.pop(0)

    def _fail(self, entry: _PluginEntry, error: str, tb: str = "", fix: str = "") -> None:
        self._failures.append(PluginFailure(entry.name, entry.package, error, tb, fix))

    def _timed_out(self, entry: _PluginEntry, what: str, limit: float, earlier: bool) -> None:
        exclude = f"{PLUGINS_ENV_VAR}=-{entry.package or entry.name}"
        fix = (f"set {PLUGIN_LOAD_TIMEOUT_ENV_VAR} above {limit:g} if it is only slow, or "
               f"exclude the plugin with {exclude}")
        still = ", started by an earlier attempt and still running" if earlier else ""
        self._fail(entry, f"{what} did not finish within {limit:g} s{still} "
                          f"({PLUGIN_LOAD_TIMEOUT_ENV_VAR}); {fix}", fix=fix)

    def _load_entry_point(self, entry: _PluginEntry) -> None:
        limit = plugin_load_timeout()  # a bad setting is the user's to fix: raised
        ep, package = entry.entry_point, entry.package
        call, earlier = _call_plugin(ep.load, limit, f"onyxrt-import-{entry.name}",
                                     key=f"import {entry.module}")
        if not call.finished:
            self._timed_out(entry, f"importing {entry.module!r}", limit, earlier)
            return
        if call.error:
            self._fail(entry, f"failed to import: {call.error}", call.traceback)
            return
        plugin = call.value
        registration = f"{package or '?'}:{entry.name}"
        try:
            self.plugin_manager.register(plugin, name=registration)
        except KeyboardInterrupt:
            raise  # on the caller's thread: the user's
        except BaseException as exc:  # e.g. two entry points naming one module
            self._fail(entry, f"could not be registered: {_describe(exc)}")
            return
        declared: list[ProviderSpec | str] = []
        try:
            impls = [i for i in self.plugin_manager.hook.onyxrt_providers.get_hookimpls() if i.plugin is plugin]
            for index, impl in enumerate(impls):
                call, earlier = _call_plugin(
                    functools.partial(_declared_specs, impl.function, package, entry.version),
                    limit, f"onyxrt-hook-{entry.name}", key=f"hook {registration}#{index}",
                )
                if not call.finished:
                    self._timed_out(entry, "onyxrt_providers()", limit, earlier)
                elif call.error:
                    self._fail(entry, f"onyxrt_providers() raised {call.error}", call.traceback)
                else:
                    declared.extend(call.value)
        except BaseException:
            # The user's Ctrl+C while waiting: forget the registration, so that loading
            # this entry point again starts from a clean plugin manager.
            self.plugin_manager.unregister(name=registration)
            raise
        for spec in declared:
            if isinstance(spec, str):
                self._fail(entry, spec)
            else:
                self._add_spec(spec, entry)

    def _add_spec(self, spec: ProviderSpec, entry: _PluginEntry) -> None:
        if spec.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
            version_error = ProtocolVersionError(
                f"{spec.name} from {spec.package} implements provider protocol version "
                f"{spec.protocol_version}, but this onyxrt core supports "
                f"{sorted(SUPPORTED_PROTOCOL_VERSIONS)}. Install a {spec.package} release "
                "built for this onyxrt, or upgrade onyxrt."
            )
            self._fail(entry, str(version_error))
            return
        kept = self._origins.get(spec.name)
        if kept is not None:
            # Plugins load in a fixed order, so the kept declaration is the same whatever
            # sys.path says; every session keeps working with it.
            if kept.first_party and not entry.first_party:
                why = "a first-party onyxrt package is preferred"
            elif isinstance(entry.entry_point, _LibraryEntryPoint):
                why = "installed before this library was registered"
            else:
                why = "first by package and entry-point name"
            kept_package = kept.package or self._specs[spec.name].package or "unknown package"
            this_package = entry.package or spec.package or "unknown package"
            fix = f"uninstall one of them, or exclude one with {PLUGINS_ENV_VAR}=-<package>"
            duplicate = DuplicateProviderError(
                f"provider {spec.name!r} is registered by two packages: {kept_package!r} "
                f"(kept: {why}) and {this_package!r} (ignored); {fix}"
            )
            self._fail(entry, str(duplicate), fix=fix)
            return
        self._specs[spec.name] = spec
        self._origins[spec.name] = entry

    def register_library(self, registration_name: str, load: Any, origin: str) -> list[str]:
        """Add the providers of a plugin module that is not installed as a package
        (``onyxrt.register_execution_provider_library``): ``load()`` imports it. Returns
        the provider names added; a failure is raised, not recorded (the caller asked),
        and nothing of the module is kept."""
        with self._lock:
            self.load()
            if registration_name in self._libraries:
                raise InvalidArgument(
                    f"an execution provider library is already registered as {registration_name!r}; "
                    "unregister it first"
                )
            before, failures = set(self._specs), len(self._failures)
            self._load_entry_point(_PluginEntry(_LibraryEntryPoint(registration_name, load, origin),
                                                origin, "", False))
            added = sorted(set(self._specs) - before)
            if len(self._failures) > failures:
                errors = [f.error for f in self._failures[failures:]]
                del self._failures[failures:]
                self._forget(f"{origin}:{registration_name}", added)
                raise InvalidArgument(
                    f"register_execution_provider_library({registration_name!r}, {origin!r}): "
                    + "; ".join(errors)
                )
            if not added:
                raise InvalidArgument(
                    f"register_execution_provider_library({registration_name!r}, {origin!r}): the "
                    "module defines no onyxrt_providers hook returning a ProviderSpec"
                )
            self._libraries[registration_name] = (origin, added)
            return added

    def unregister_library(self, registration_name: str) -> None:
        """Remove the providers :meth:`register_library` added under that name."""
        with self._lock:
            entry = self._libraries.pop(registration_name, None)
            if entry is None:
                raise InvalidArgument(
                    f"no execution provider library is registered as {registration_name!r} "
                    f"(registered: {sorted(self._libraries)})"
                )
            origin, added = entry
            self._forget(f"{origin}:{registration_name}", added)

    def _forget(self, registration: str, names: Iterable[str]) -> None:
        if self.plugin_manager.has_plugin(registration):
            self.plugin_manager.unregister(name=registration)
        for name in names:
            self._specs.pop(name, None)
            self._origins.pop(name, None)
            self._status.pop(name, None)
            self._classes.pop(name, None)

    # -- queries ---------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every installed provider name, by priority (highest first), CPU last."""
        self.load()
        return sorted(self._specs, key=self._order_key)

    def _order_key(self, name: str) -> tuple[int, int, str]:
        return (name == CPU_PROVIDER, -self._specs[name].priority, name)

    def status(self, name: str) -> ProviderStatus:
        """Import the provider's class and probe it (once); never raises for its faults.
        Imports only the plugins up to the one that declares ``name``; ``KeyError`` when
        none does."""
        with self._lock:
            cached = self._status.get(name)
            if cached is not None:
                return cached
            if not self.provides(name):
                raise KeyError(name)
            spec = self._specs[name]
            # Bad settings are the user's to fix: raised, not cached.
            load_limit, probe_limit = plugin_load_timeout(), probe_timeout()
            probe = self._load_and_probe(name, spec, load_limit, probe_limit)
            status = ProviderStatus(
                name=name,
                package=spec.package,
                package_version=spec.package_version,
                protocol_version=spec.protocol_version,
                priority=spec.priority,
                usable=probe.usable,
                reason=probe.reason,
                fix=probe.fix,
                details=dict(probe.details),
                device_types=spec.device_types,
            )
            self._status[name] = status
            return status

    def _load_and_probe(self, name: str, spec: ProviderSpec, load_limit: float, probe_limit: float) -> ProbeResult:
        label = f"{name} (from {spec.package or 'unknown package'})"
        failed = f"{spec.package or name} failed to load or probe"
        reinstall = f"reinstall it: pip install --force-reinstall {spec.package}" if spec.package else ""
        exclude = f"{PLUGINS_ENV_VAR}=-{spec.package or '<package>'}"
        call, earlier = _call_plugin(functools.partial(_provider_class, spec.factory), load_limit,
                                     f"onyxrt-factory-{name}", key=f"factory {spec.package}:{name}")
        if not call.finished:
            still = ", started by an earlier attempt and still running" if earlier else ""
            return ProbeResult(
                False,
                f"{label}: importing its provider class did not finish within {load_limit:g} s{still}",
                fix=f"set {PLUGIN_LOAD_TIMEOUT_ENV_VAR} above {load_limit:g} if it is only slow, or "
                f"exclude the plugin with {exclude}",
            )
        if call.error:
            return ProbeResult(False, f"{failed}: {call.error}", fix=reinstall)
        cls: type[ExecutionProvider] = call.value
        self._classes[name] = cls
        # A probe stuck in a driver call marks its provider unusable instead of hanging
        # every session; a fresh probe for every catalog (no key): a probe's answer may
        # change between catalogs, a module's does not.
        call, _ = _call_plugin(functools.partial(_checked_probe, cls), probe_limit, f"onyxrt-probe-{name}")
        if not call.finished:
            return ProbeResult(
                False,
                f"{label} probe did not finish within {probe_limit:g} s",
                fix=f"check the device and its driver, raise {PROBE_TIMEOUT_ENV_VAR}, or exclude "
                f"the plugin with {exclude}",
            )
        if call.error:
            return ProbeResult(False, f"{failed}: {call.error}", fix=reinstall)
        probe: ProbeResult = call.value
        return probe

    def provider_class(self, name: str) -> type[ExecutionProvider]:
        """The provider's class (after a successful :meth:`status`)."""
        self.status(name)
        return self._classes[name]

    def available(self) -> list[str]:
        """Usable providers by priority, CPU last."""
        return [n for n in self.names() if self.status(n).usable]

    def suggest(self, name: str) -> str:
        """A hint to append to "``name`` is not installed." (with a leading space), or ''.

        A name onnxruntime or onyxrt knows (:data:`KNOWN_PROVIDER_NAMES`) is spelled
        right, only missing: the hint says which package provides it
        (:data:`PROVIDER_PACKAGES`), that ``ONYXRT_PLUGINS`` excludes that package,
        or that onyxrt has no such provider yet. Only another name can be a misspelling:
        ``" Did you mean 'CUDAExecutionProvider'?"`` when an installed or known name is
        close.

        >>> catalog().suggest("TensorrtExecutionProvider")  # doctest: +SKIP
        ' onyxrt has no TensorrtExecutionProvider yet (onnxruntime has it); installed ...'
        """
        if name in KNOWN_PROVIDER_NAMES:
            return self._known_but_missing(name)
        # The shared "ExecutionProvider" suffix makes every pair of names look alike
        # (Foo... against CPU... scores 0.85), so only near-identical names are suggested.
        names = {n.lower(): n for n in self.names()}
        names.update({n.lower(): n for n in KNOWN_PROVIDER_NAMES if n.lower() not in names})
        close = difflib.get_close_matches(name.lower(), list(names), n=1, cutoff=0.9)
        if not close:
            return ""
        hint = f" Did you mean {names[close[0]]!r}?"
        if not self.provides(names[close[0]]):
            hint += f" ({self._known_but_missing(names[close[0]]).strip()})"
        return hint

    def _known_but_missing(self, name: str) -> str:
        if name not in PROVIDER_PACKAGES:
            return (f" onyxrt has no {name} yet (onnxruntime has it); installed providers: "
                    f"{', '.join(self.names()) or 'none'}.")
        package, command = PROVIDER_PACKAGES[name]
        # Entries of `excluded` read "<entry point> (<package>) excluded by ..." (_plan).
        if any(f"({package})" in e for e in self.excluded):
            return f" {package} provides it, but {PLUGINS_ENV_VAR} excludes that package."
        return f" It is provided by {package}: {command}."

    def devices(self, name: str) -> list[Device]:
        """Devices of a usable provider, from an instance with default options."""
        cls = self.provider_class(name)
        return list(cls(cls.option_schema.defaults()).devices())

    def ep_devices(self) -> list[EpDevice]:
        """One entry per (provider, device): usable providers with their devices, and
        unusable ones with the reason (``state``/``reason``) so nothing is hidden
        (``onyxrt.get_ep_devices()``)."""
        result: list[EpDevice] = []
        for name in self.names():
            status = self.status(name)
            spec = self.specs[name]
            meta = {"version": status.package_version, "package": status.package,
                    "protocol_version": str(status.protocol_version)}
            if not status.usable:
                kind = spec.device_types[0] if spec.device_types else "cpu"
                result.append(EpDevice(name, status.package, Device(kind, "unknown"), meta,
                                       state="not usable", reason=status.reason))
                continue
            try:
                devices = self.devices(name)
            except Exception as exc:  # a provider whose device query fails is reported, not fatal
                kind = spec.device_types[0] if spec.device_types else "cpu"
                result.append(EpDevice(name, status.package, Device(kind, "unknown"), meta,
                                       state="not usable", reason=f"device query failed: {exc}"))
                continue
            cls = self.provider_class(name)
            for dev in devices:
                result.append(EpDevice(name, cls.vendor or status.package, dev, meta,
                                       cls.option_schema.defaults()))
        return result

    def device_provider(self, device_type: str, device_id: int = 0) -> ExecutionProvider | None:
        """The provider instance owning device ``device_type:device_id`` (None for the
        CPU), made once per catalog with default options (``OrtValue`` and
        ``IOBinding`` place values with it).

        ``device_type`` is what users write: ``"cpu"``, ``"cuda"``, ``"rocm"``, ``"gpu"``,
        ``"npu"`` or any name a provider lists in ``device_names``. Raises
        :class:`~onyxrt.errors.ProviderUnavailable` when no usable provider has it.
        """
        kind = str(device_type).lower()
        if kind == "cpu":
            return None
        key = (kind, int(device_id))
        with self._device_lock:
            if key in self._device_providers:
                return self._device_providers[key]
        for name in self.available():
            cls = self.provider_class(name)
            spec = self.specs[name]
            if kind in cls.device_names or kind in spec.device_types:
                schema = cls.option_schema
                opts = schema.defaults()
                if "device_id" in schema.options:
                    opts["device_id"] = int(device_id)
                provider = cls(opts)
                with self._device_lock:
                    return self._device_providers.setdefault(key, provider)
        raise ProviderUnavailable(
            f"no usable provider for device {device_type!r} (usable providers: "
            f"{', '.join(self.available())}); run `onyxrt providers` to see why"
        )

    def dlpack_provider(self, kind: int, device_id: int) -> ExecutionProvider:
        """The provider instance for DLPack device type ``kind`` (``kDLCUDA`` = 2, ...),
        device ``device_id``: the first usable provider declaring that type. Raises
        :class:`~onyxrt.errors.ProviderUnavailable` when none does."""
        for name in self.available():
            cls = self.provider_class(name)
            if cls.dlpack_device_type == kind:
                provider = self.device_provider(cls.device_names[0] if cls.device_names else name, device_id)
                if provider is not None:
                    return provider
        raise ProviderUnavailable(
            f"no usable provider takes DLPack device type {kind} (device {device_id}); "
            "install and check the matching GPU provider (onyxrt providers)"
        )


@record(frozen=True)
class _LibraryEntryPoint:
    """What :meth:`ProviderCatalog._load_entry_point` needs of an entry point, for a
    module registered at run time."""

    name: str
    loader: Any
    value: str = ""

    def load(self) -> Any:
        return self.loader()


_catalog: ProviderCatalog | None = None
_catalog_lock = threading.Lock()


def catalog() -> ProviderCatalog:
    """The process-wide catalog. Its plugins are imported on first need: a listing
    imports them all, :meth:`ProviderCatalog.provides` and :meth:`~ProviderCatalog.status`
    only those up to the ones that declare the names asked for."""
    global _catalog
    with _catalog_lock:
        if _catalog is None:
            _catalog = ProviderCatalog()
        return _catalog


def reset_catalog(new: ProviderCatalog | None = None) -> None:
    """Forget the loaded plugins (tests, or after installing a plugin at run time), and
    with them the provider instances made for device names
    (:meth:`ProviderCatalog.device_provider`)."""
    global _catalog
    with _catalog_lock:
        _catalog = new
