"""Devices and memory spaces.

A provider reports the devices it drives. Each device lives in a *memory space*; the
partitioner inserts a copy wherever a value produced in one memory space is read in
another. Host memory is the space ``"cpu"``: numpy arrays live there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Device", "EpDevice", "HOST_MEMORY", "DEVICE_TYPES"]

#: The memory space of host RAM, where numpy arrays, feeds and fetched outputs live.
HOST_MEMORY = "cpu"
DEVICE_TYPES = ("cpu", "gpu", "npu")


@dataclass(frozen=True)
class Device:
    """One device a provider drives.

    ``type`` is ``"cpu"``, ``"gpu"`` or ``"npu"``; ``virtual`` marks simulated devices;
    ``memory_space`` names where its tensors live (``"cpu"`` for host memory, otherwise a
    provider-chosen key such as ``"cuda:0"``). Two devices with the same memory space can
    read each other's values without a copy.
    """

    type: str
    vendor: str
    device_id: int = 0
    vendor_id: int = 0
    virtual: bool = False
    memory_space: str = HOST_MEMORY
    metadata: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.type not in DEVICE_TYPES:
            raise ValueError(f"device type must be one of {DEVICE_TYPES}, got {self.type!r}")

    @property
    def is_host(self) -> bool:
        """Whether values on this device are host (numpy) values."""
        return self.memory_space == HOST_MEMORY

    def __str__(self) -> str:
        flag = ", virtual" if self.virtual else ""
        return f"{self.type}:{self.device_id} ({self.vendor}{flag}, memory {self.memory_space})"


@dataclass(frozen=True)
class EpDevice:
    """A (provider, device) pair, in the spirit of onnxruntime's ``get_ep_devices()``.

    ``state`` says whether the provider is usable; ``reason`` says why not.
    """

    ep_name: str
    ep_vendor: str
    device: Device
    ep_metadata: Mapping[str, str] = field(default_factory=dict)
    ep_options: Mapping[str, Any] = field(default_factory=dict)
    state: str = "usable"
    reason: str = ""
