"""Which providers a session uses when ``providers=None``: what its ``SessionOptions``
configure, in onnxruntime's order of precedence.

1. providers added with ``SessionOptions.add_provider(name, options)``, in that order;
2. else the providers of the ``OrtEpDevice`` objects given to ``add_provider_for_devices``;
3. else what a ``set_provider_selection_policy_delegate`` function picks among the usable
   (provider, device) pairs;
4. else the first usable provider of each device type a ``set_provider_selection_policy``
   policy prefers, in its order;
5. else the CPU provider.

Sessions (:class:`~onyxrt.InferenceSession`) and model packages (variant selection in
:mod:`onyxrt.model_package`) both choose this way.
"""

from __future__ import annotations

from dataclasses import field
from typing import TYPE_CHECKING, Any

from .discovery import CPU_PROVIDER, catalog
from .errors import InvalidArgument
from .records import record
from .session_options import OrtExecutionProviderDevicePolicy, policy_device_order

if TYPE_CHECKING:
    from .session_options import SessionOptions

__all__ = ["ConfiguredProvider", "configured_providers"]


@record
class ConfiguredProvider:
    """A provider the options configure: its options, and the ``OrtEpDevice`` objects it
    was chosen through (empty when chosen by name or policy)."""

    name: str
    options: dict[str, Any]
    devices: list[Any] = field(default_factory=list)


def configured_providers(opts: SessionOptions) -> list[ConfiguredProvider]:
    """The providers ``opts`` configure (see the module doc), never empty."""
    if opts._added_providers:
        return [ConfiguredProvider(name, dict(options)) for name, options in opts._added_providers]
    result: list[ConfiguredProvider] = []

    def add(name: str, options: Any, device: Any = None) -> None:
        existing = next((p for p in result if p.name == name), None)
        if existing is None:
            existing = ConfiguredProvider(name, dict(options or {}))
            result.append(existing)
        if device is not None:
            existing.devices.append(device)

    for devices, options in opts._provider_devices:
        for dev in devices:
            add(getattr(dev, "ep_name", str(dev)), options, dev)
    if not result and opts._selection_delegate is not None:
        usable = [d for d in catalog().ep_devices() if d.state == "usable"]
        for dev in opts._selection_delegate(usable, {}, {}, len(usable)) or ():
            name = getattr(dev, "ep_name", None)
            if not isinstance(name, str):
                raise InvalidArgument(
                    "the provider selection delegate must return OrtEpDevice objects from the list "
                    f"it was given, got {type(dev).__name__}"
                )
            add(name, {}, dev)
    if not result and opts._selection_policy is not None:
        cat = catalog()
        for kind in policy_device_order(OrtExecutionProviderDevicePolicy(int(opts._selection_policy))):
            name = next((n for n in cat.available() if kind in cat.specs[n].device_types), None)
            if name is not None:
                add(name, {})
    return result or [ConfiguredProvider(CPU_PROVIDER, {})]
