"""Devices and memory spaces.

A provider reports the devices it drives. Each device lives in a *memory space*; the
partitioner inserts a copy wherever a value produced in one memory space is read in
another. Host memory is the space ``"cpu"``: numpy arrays live there.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from .records import record

if TYPE_CHECKING:
    from .memory_info import OrtMemoryInfo

__all__ = [
    "Device",
    "EpDevice",
    "HOST_MEMORY",
    "DEVICE_TYPES",
    "HardwareType",
    "OrtHardwareDeviceType",
    "OrtSyncStream",
]

#: The memory space of host RAM, where numpy arrays, feeds and fetched outputs live.
HOST_MEMORY = "cpu"
DEVICE_TYPES = ("cpu", "gpu", "npu")


class OrtHardwareDeviceType(enum.IntEnum):
    """onnxruntime's hardware device types (``OrtHardwareDevice.type``)."""

    CPU = 0
    GPU = 1
    NPU = 2


class HardwareType(str):
    """A device type as onyxrt spells it (``"cpu"``, ``"gpu"``, ``"npu"``) that also equals
    onnxruntime's :class:`OrtHardwareDeviceType` member of the same kind, so code written
    either way (``d.type == "gpu"`` or ``d.type == OrtHardwareDeviceType.GPU``) works."""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OrtHardwareDeviceType):
            return str.__eq__(self, other.name.lower())
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__

    @property
    def value(self) -> int:
        """onnxruntime's number for this type (as ``OrtHardwareDeviceType`` members have)."""
        return int(OrtHardwareDeviceType[self.upper()])

    @property
    def name(self) -> str:
        """onnxruntime's name for this type (``"GPU"``)."""
        return self.upper()


@record(frozen=True)
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
        kind = self.type.name.lower() if isinstance(self.type, OrtHardwareDeviceType) else self.type
        if kind not in DEVICE_TYPES:
            raise ValueError(f"device type must be one of {DEVICE_TYPES}, got {self.type!r}")
        object.__setattr__(self, "type", HardwareType(kind))

    @property
    def is_host(self) -> bool:
        """Whether values on this device are host (numpy) values."""
        return self.memory_space == HOST_MEMORY

    def __str__(self) -> str:
        flag = ", virtual" if self.virtual else ""
        return f"{self.type}:{self.device_id} ({self.vendor}{flag}, memory {self.memory_space})"


@record(frozen=True)
class EpDevice:
    """A (provider, device) pair, in the spirit of onnxruntime's ``get_ep_devices()``
    (``OrtEpDevice``; ``device`` is onnxruntime's ``OrtHardwareDevice``).

    ``state`` says whether the provider is usable; ``reason`` says why not.
    """

    ep_name: str
    ep_vendor: str
    device: Device
    ep_metadata: Mapping[str, str] = field(default_factory=dict)
    ep_options: Mapping[str, Any] = field(default_factory=dict)
    state: str = "usable"
    reason: str = ""

    def memory_info(self, memory_type: Any = 0) -> OrtMemoryInfo:
        """Where this provider's values live on this device (``OrtDeviceMemoryType``
        DEFAULT: the device's own memory; HOST_ACCESSIBLE: host memory it can read)."""
        from .memory_info import OrtDeviceMemoryType, OrtMemoryInfo

        host = self.device.is_host or int(memory_type) == OrtDeviceMemoryType.HOST_ACCESSIBLE
        return OrtMemoryInfo.for_device("cpu" if host else self.device.type, self.device.device_id,
                                        self.device.vendor_id)

    def create_sync_stream(self) -> OrtSyncStream:
        """A stream handle for this device (onyxrt's providers order their own work, so
        the handle is 0 on the CPU and on devices whose provider exposes no stream)."""
        return OrtSyncStream(self)


class OrtSyncStream:
    """A device stream as onnxruntime hands it out (``OrtEpDevice.create_sync_stream``)."""

    def __init__(self, ep_device: EpDevice, handle: int = 0) -> None:
        self.ep_device = ep_device
        self._handle = int(handle)

    def get_handle(self) -> int:
        """The native stream handle (0: the device's default ordering)."""
        return self._handle
