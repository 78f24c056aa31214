"""The plugin hook: how a provider package tells onyxrt what it provides.

A provider package registers a module under the entry-point group ``onyxrt.providers``::

    [project.entry-points."onyxrt.providers"]
    myaccel = "onyxrt_myaccel.plugin"

and that module implements the hook by returning data, not by acting::

    from onyxrt.hookspecs import ProviderSpec, hookimpl

    @hookimpl
    def onyxrt_providers():
        def load():
            from .provider import MyAccelExecutionProvider   # imported only when needed
            return MyAccelExecutionProvider
        return [ProviderSpec(name="MyAccelExecutionProvider", factory=load, priority=100)]

Registration stays cheap: the provider module is imported, and its probe run, only when
someone lists or uses the provider.

What the core assumes of a plugin (see :mod:`onyxrt.discovery`):

* The entry-point name (``myaccel``) is only a handle for ``ONYXRT_PLUGINS``; the provider
  names come from the hook alone, so a listing imports every plugin module. A question
  about named providers imports plugins, first-party ones first, only until one declares
  each name, so importing the plugin module must not change anything else in the
  process (patch numpy, set global options): whether it was imported depends on what
  was asked before.
* The plugin module's import, the hook and the factory run on a worker thread, each
  bounded by ``ONYXRT_PLUGIN_LOAD_TIMEOUT_S`` (default 30 s), and the probe by
  ``ONYXRT_PROBE_TIMEOUT_S`` (default 10 s). Anything they raise, ``SystemExit`` and
  ``KeyboardInterrupt`` included, is recorded as the plugin's failure. Code that must run
  on the main thread (``signal.signal``) cannot run there.
* A provider name is kept by the first plugin declaring it, first-party (``onyxrt-*``)
  packages before others, then by distribution name; a later declaration is recorded as
  a failure and ignored.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import pluggy

from .protocol import PROTOCOL_VERSION
from .records import record

if TYPE_CHECKING:
    from .protocol import ExecutionProvider

__all__ = ["PROJECT_NAME", "ENTRY_POINT_GROUP", "hookspec", "hookimpl", "ProviderSpec", "ProviderHooks"]

PROJECT_NAME = "onyxrt"
ENTRY_POINT_GROUP = "onyxrt.providers"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@record(frozen=True)
class ProviderSpec:
    """What a plugin declares about one provider.

    ``factory`` returns the provider *class* (import it inside the factory so loading the
    plugin stays cheap). ``priority`` orders ``get_available_providers()`` (higher first;
    CPU is always last). ``package`` is filled in from the entry point's distribution
    when left empty. ``device_types`` says what the provider drives (cpu/gpu/npu) so
    listings and selection policies need not import it.
    """

    name: str
    factory: Callable[[], type[ExecutionProvider]]
    priority: int = 0
    protocol_version: int = PROTOCOL_VERSION
    package: str = ""
    package_version: str = ""
    device_types: tuple[str, ...] = ("cpu",)
    description: str = ""


class ProviderHooks:
    """The hook specifications plugins implement."""

    @hookspec
    def onyxrt_providers(self) -> Sequence[ProviderSpec]:  # type: ignore[empty-body]
        """Return the providers this plugin offers."""
