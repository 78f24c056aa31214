"""Finding the installed providers: entry points → pluggy → provider specs → probes.

pluggy's own ``load_setuptools_entrypoints`` stops at the first plugin that fails to
import; :class:`ProviderCatalog` loads each entry point on its own instead, so one broken
plugin is recorded (with its package and error) and the others keep working.

The environment variable ``ONYXRT_PLUGINS`` restricts what loads: a comma-separated list
of entry-point names or distribution names. Items starting with ``-``
exclude; a list of only exclusions loads everything else. Example:
``ONYXRT_PLUGINS=cpu,onyxrt-simnpu`` or ``ONYXRT_PLUGINS=-cuda``.

A provider's probe runs on its own thread and is given ``ONYXRT_PROBE_TIMEOUT_S`` seconds
(default 10): a probe stuck in a driver call marks the provider unusable ("probe did not
finish within N s") instead of hanging every session.
"""

from __future__ import annotations

import difflib
import importlib.metadata
import os
import threading
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pluggy

from .devices import Device
from .errors import DuplicateProviderError, InvalidArgument, ProtocolVersionError
from .hookspecs import ENTRY_POINT_GROUP, PROJECT_NAME, ProviderHooks, ProviderSpec
from .protocol import SUPPORTED_PROTOCOL_VERSIONS, ExecutionProvider, ProbeResult

__all__ = [
    "PLUGINS_ENV_VAR",
    "KNOWN_PROVIDER_NAMES",
    "PROBE_TIMEOUT_ENV_VAR",
    "probe_timeout",
    "provider_label",
    "PluginFailure",
    "ProviderStatus",
    "ProviderCatalog",
    "catalog",
    "reset_catalog",
]

PLUGINS_ENV_VAR = "ONYXRT_PLUGINS"
PROBE_TIMEOUT_ENV_VAR = "ONYXRT_PROBE_TIMEOUT_S"
#: Seconds a provider's probe may take before it is marked unusable.
DEFAULT_PROBE_TIMEOUT_S = 10.0
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


def probe_timeout() -> float:
    """The probe time limit in seconds (``ONYXRT_PROBE_TIMEOUT_S``, default 10)."""
    raw = os.environ.get(PROBE_TIMEOUT_ENV_VAR, "").strip()
    if not raw:
        return DEFAULT_PROBE_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InvalidArgument(
            f"{PROBE_TIMEOUT_ENV_VAR} must be a positive number of seconds, got {raw!r}"
        )
    return value


def _probe_with_timeout(cls: type[ExecutionProvider], label: str, limit: float) -> ProbeResult:
    """``cls.probe()`` on a daemon thread, given up after ``limit`` seconds: a probe stuck
    in a driver call marks its provider unusable instead of hanging every session (the
    thread is left to finish or die with the process)."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append(cls.probe())
        except BaseException as exc:  # handed to the caller's thread below
            outcome.append(exc)

    thread = threading.Thread(target=target, name=f"onyxrt-probe-{cls.__name__}", daemon=True)
    thread.start()
    thread.join(limit)
    if not outcome:
        return ProbeResult(
            False,
            f"{label} probe did not finish within {limit:g} s",
            fix=f"check the device and its driver, raise {PROBE_TIMEOUT_ENV_VAR}, or exclude "
            f"the plugin with {PLUGINS_ENV_VAR}=-<package>",
        )
    result = outcome[0]
    if isinstance(result, BaseException):
        raise result
    if not isinstance(result, ProbeResult):
        raise TypeError(f"probe() returned {type(result).__name__}, expected ProbeResult")
    return result


def provider_label(name: str) -> str:
    """``name`` with the package that installed it, for error messages:
    ``"FooExecutionProvider (from onyxrt-foo 1.2)"`` (the bare name when unknown)."""
    cat = _catalog
    spec = cat.specs.get(name) if cat is not None else None
    if spec is None or not spec.package:
        return name
    version = f" {spec.package_version}" if spec.package_version else ""
    return f"{name} (from {spec.package}{version})"


@dataclass(frozen=True)
class PluginFailure:
    """A plugin that could not be loaded, and why."""

    entry_point: str
    package: str
    error: str
    traceback: str = ""

    def __str__(self) -> str:
        return f"plugin {self.entry_point!r} from {self.package or 'unknown package'}: {self.error}"


@dataclass(frozen=True)
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


class ProviderCatalog:
    """The providers installed in this environment (one per process, see :func:`catalog`).

    Tests build their own catalog (``ProviderCatalog(entry_points=[...])``) so each gets
    a fresh plugin manager.
    """

    def __init__(self, entry_points: Sequence[importlib.metadata.EntryPoint] | None = None) -> None:
        self._entry_points = entry_points
        self._lock = threading.RLock()
        self._loaded = False
        self.plugin_manager = pluggy.PluginManager(PROJECT_NAME)
        self.plugin_manager.add_hookspecs(ProviderHooks)
        self.specs: dict[str, ProviderSpec] = {}
        self.failures: list[PluginFailure] = []
        self.excluded: list[str] = []
        self._classes: dict[str, type[ExecutionProvider]] = {}
        self._status: dict[str, ProviderStatus] = {}
        #: registration name -> provider names, of register_library.
        self._libraries: dict[str, tuple[str, list[str]]] = {}

    # -- loading ---------------------------------------------------------------------
    def load(self) -> ProviderCatalog:
        """Load every selected entry point once; later calls do nothing."""
        with self._lock:
            if self._loaded:
                return self
            eps = (
                list(self._entry_points)
                if self._entry_points is not None
                else list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
            )
            allow, deny = _env_filter()
            for ep in eps:
                dist = getattr(ep, "dist", None)
                package = dist.name if dist is not None else ""
                version = dist.version if dist is not None else ""
                if not _selected([ep.name, package], allow, deny):
                    # Not imported at all: an excluded plugin cannot break anything.
                    self.excluded.append(f"{ep.name} ({package}) excluded by {PLUGINS_ENV_VAR}")
                    continue
                self._load_entry_point(ep, package, version)
            self._loaded = True
            return self

    def _load_entry_point(self, ep: Any, package: str, version: str) -> None:
        try:
            plugin = ep.load()
        except Exception as exc:
            self.failures.append(
                PluginFailure(ep.name, package, f"failed to import: {type(exc).__name__}: {exc}",
                              traceback.format_exc())
            )
            return
        try:
            self.plugin_manager.register(plugin, name=f"{package or '?'}:{ep.name}")
        except Exception as exc:  # e.g. two entry points naming one module
            self.failures.append(
                PluginFailure(ep.name, package, f"could not be registered: {type(exc).__name__}: {exc}")
            )
            return
        hook = self.plugin_manager.hook.onyxrt_providers
        for impl in hook.get_hookimpls():
            if impl.plugin is not plugin:
                continue
            try:
                returned: Any = impl.function()
                specs = list(returned or ())
            except Exception as exc:
                self.failures.append(
                    PluginFailure(ep.name, package,
                                  f"onyxrt_providers() raised {type(exc).__name__}: {exc}",
                                  traceback.format_exc())
                )
                continue
            for spec in specs:
                if not isinstance(spec, ProviderSpec):
                    self.failures.append(
                        PluginFailure(ep.name, package,
                                      f"onyxrt_providers() returned {type(spec).__name__}, "
                                      "expected ProviderSpec")
                    )
                    continue
                self._add_spec(
                    replace(spec, package=spec.package or package,
                            package_version=spec.package_version or version),
                    ep.name,
                )

    def _add_spec(self, spec: ProviderSpec, ep_name: str) -> None:
        if spec.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
            err = ProtocolVersionError(
                f"{spec.name} from {spec.package} implements provider protocol version "
                f"{spec.protocol_version}, but this onyxrt core supports "
                f"{sorted(SUPPORTED_PROTOCOL_VERSIONS)}. Install a {spec.package} release "
                "built for this onyxrt, or upgrade onyxrt."
            )
            self.failures.append(PluginFailure(ep_name, spec.package, str(err)))
            return
        existing = self.specs.get(spec.name)
        if existing is not None:
            raise DuplicateProviderError(
                f"provider {spec.name!r} is registered by two packages: {existing.package!r} "
                f"and {spec.package!r}. Uninstall one of them, or exclude one with "
                f"{PLUGINS_ENV_VAR}=-<package>."
            )
        self.specs[spec.name] = spec

    def register_library(self, registration_name: str, load: Any, origin: str) -> list[str]:
        """Add the providers of a plugin module that is not installed as a package
        (``onyxrt.register_execution_provider_library``): ``load()`` imports it. Returns
        the provider names added; a failure is raised, not recorded (the caller asked)."""
        from .errors import InvalidArgument

        with self._lock:
            self.load()
            if registration_name in self._libraries:
                raise InvalidArgument(
                    f"an execution provider library is already registered as {registration_name!r}; "
                    "unregister it first"
                )
            before, failures = set(self.specs), len(self.failures)
            self._load_entry_point(_LibraryEntryPoint(registration_name, load), origin, "")
            if len(self.failures) > failures:
                failure = self.failures.pop()
                raise InvalidArgument(
                    f"register_execution_provider_library({registration_name!r}, {origin!r}): "
                    f"{failure.error}"
                )
            added = sorted(set(self.specs) - before)
            if not added:
                raise InvalidArgument(
                    f"register_execution_provider_library({registration_name!r}, {origin!r}): the "
                    "module defines no onyxrt_providers hook returning a ProviderSpec"
                )
            self._libraries[registration_name] = (origin, added)
            return added

    def unregister_library(self, registration_name: str) -> None:
        """Remove the providers :meth:`register_library` added under that name."""
        from .errors import InvalidArgument

        with self._lock:
            entry = self._libraries.pop(registration_name, None)
            if entry is None:
                raise InvalidArgument(
                    f"no execution provider library is registered as {registration_name!r} "
                    f"(registered: {sorted(self._libraries)})"
                )
            origin, added = entry
            if self.plugin_manager.has_plugin(f"{origin}:{registration_name}"):
                self.plugin_manager.unregister(name=f"{origin}:{registration_name}")
            for name in added:
                self.specs.pop(name, None)
                self._status.pop(name, None)
                self._classes.pop(name, None)

    # -- queries ---------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every installed provider name, by priority (highest first), CPU last."""
        self.load()
        return sorted(self.specs, key=self._order_key)

    def _order_key(self, name: str) -> tuple[int, int, str]:
        return (name == CPU_PROVIDER, -self.specs[name].priority, name)

    def status(self, name: str) -> ProviderStatus:
        """Import the provider's class and probe it (once); never raises for its faults."""
        self.load()
        with self._lock:
            cached = self._status.get(name)
            if cached is not None:
                return cached
            spec = self.specs[name]
            limit = probe_timeout()  # a bad setting is the user's to fix: raised, not cached
            probe: ProbeResult
            try:
                cls = spec.factory()
                if not (isinstance(cls, type) and issubclass(cls, ExecutionProvider)):
                    raise TypeError(f"factory returned {cls!r}, not an ExecutionProvider subclass")
                self._classes[name] = cls
                probe = _probe_with_timeout(cls, f"{name} (from {spec.package or 'unknown package'})", limit)
            except Exception as exc:
                probe = ProbeResult(
                    False,
                    f"{spec.package or name} failed to load or probe: {type(exc).__name__}: {exc}",
                    fix=f"reinstall it: pip install --force-reinstall {spec.package}"
                    if spec.package else "",
                )
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

    def provider_class(self, name: str) -> type[ExecutionProvider]:
        """The provider's class (after a successful :meth:`status`)."""
        self.status(name)
        return self._classes[name]

    def available(self) -> list[str]:
        """Usable providers by priority, CPU last."""
        return [n for n in self.names() if self.status(n).usable]

    def suggest(self, name: str) -> str:
        """' Did you mean X?' for a misspelt provider name, or ''."""
        # The shared "ExecutionProvider" suffix makes every pair of names look alike
        # (Foo... against CPU... scores 0.85), so only near-identical names are suggested.
        names = {n.lower(): n for n in self.names()}
        close = difflib.get_close_matches(name.lower(), list(names), n=1, cutoff=0.9)
        return f" Did you mean {names[close[0]]!r}?" if close else ""

    def devices(self, name: str) -> list[Device]:
        """Devices of a usable provider, from an instance with default options."""
        cls = self.provider_class(name)
        return list(cls(cls.option_schema.defaults()).devices())


@dataclass(frozen=True)
class _LibraryEntryPoint:
    """What :meth:`ProviderCatalog._load_entry_point` needs of an entry point, for a
    module registered at run time."""

    name: str
    loader: Any

    def load(self) -> Any:
        return self.loader()


_catalog: ProviderCatalog | None = None
_catalog_lock = threading.Lock()


def catalog() -> ProviderCatalog:
    """The process-wide catalog, loaded on first use."""
    global _catalog
    with _catalog_lock:
        if _catalog is None:
            _catalog = ProviderCatalog()
        cat = _catalog
    return cat.load()


def reset_catalog(new: ProviderCatalog | None = None) -> None:
    """Forget the loaded plugins (tests, or after installing a plugin at run time), and
    the provider instances ``OrtValue`` made for device names."""
    global _catalog
    with _catalog_lock:
        _catalog = new
    from .ortvalue import forget_device_providers

    forget_device_providers()
