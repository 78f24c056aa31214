"""Where memory lives, in onnxruntime's vocabulary: ``OrtDevice``, ``OrtMemoryInfo``,
``OrtArenaCfg``, their enums, and the process-wide allocators of
``create_and_register_allocator``.

onyxrt's own description of a device is :class:`onyxrt.devices.Device` (a provider's
device, its memory space); these classes are the names onnxruntime code passes around
(``OrtValue.ortvalue_from_shape_and_type(..., memory_info=...)``,
``session.get_input_memory_infos()``, ``SparseTensor.sparse_coo_from_numpy(..., OrtDevice)``)
and map onto onyxrt's device names (``"cpu"``, ``"cuda"``, ``"npu"``...).
"""

from __future__ import annotations

import difflib
import enum
import threading
from collections.abc import Mapping
from typing import Any

from .errors import InvalidArgument
from .records import record

__all__ = [
    "ArenaExtendStrategy",
    "OrtAllocatorType",
    "OrtArenaCfg",
    "OrtDevice",
    "OrtDeviceMemoryType",
    "OrtDeviceVendorId",
    "OrtMemType",
    "OrtMemoryInfo",
    "OrtMemoryInfoDeviceType",
    "create_and_register_allocator",
    "create_and_register_allocator_v2",
    "registered_allocators",
    "device_name_of_type",
]


class OrtMemType(enum.IntEnum):
    """Which memory of a device a value is in (onnxruntime's values; ``CPU`` is an alias
    of ``CPU_OUTPUT``)."""

    CPU_INPUT = -2
    CPU_OUTPUT = -1
    CPU = -1
    DEFAULT = 0


class OrtAllocatorType(enum.IntEnum):
    """Arena or plain device allocator."""

    INVALID = -1
    ORT_DEVICE_ALLOCATOR = 0
    ORT_ARENA_ALLOCATOR = 1


class OrtDeviceMemoryType(enum.IntEnum):
    """Device memory, or host memory the device can access."""

    DEFAULT = 0
    HOST_ACCESSIBLE = 5


class OrtMemoryInfoDeviceType(enum.IntEnum):
    """Device kinds of ``OrtMemoryInfo.create_v2``."""

    CPU = 0
    GPU = 1
    FPGA = 2
    NPU = 3


class OrtDeviceVendorId(enum.IntEnum):
    """PCI vendor ids, as onnxruntime numbers them."""

    NONE = 0x0000
    AMD = 0x1002
    NVIDIA = 0x10DE
    ARM = 0x13B5
    MICROSOFT = 0x1414
    HUAWEI = 0x19E5
    QUALCOMM = 0x5143
    INTEL = 0x8086


class ArenaExtendStrategy(enum.IntEnum):
    """How an arena grows (``OrtArenaCfg.arena_extend_strategy``)."""

    kNextPowerOfTwo = 0
    kSameAsRequested = 1


# OrtDevice's device-type numbers (onnxruntime's OrtDevice::Type; DML, WebGPU and CANN
# have legacy numbers of their own but `make` gives them GPU/NPU with a vendor id) and
# the onyxrt device name each stands for.
_CPU, _GPU, _FPGA, _NPU, _DML, _WEBGPU, _CANN = 0, 1, 2, 3, 4, 5, 6
_TYPE_BY_NAME = {"cpu": _CPU, "cuda": _GPU, "gpu": _GPU, "rocm": _GPU, "dml": _GPU,
                 "webgpu": _GPU, "fpga": _FPGA, "npu": _NPU, "cann": _NPU}
_NAME_BY_TYPE = {_CPU: "cpu", _GPU: "gpu", _FPGA: "fpga", _NPU: "npu", _DML: "gpu",
                 _WEBGPU: "gpu", _CANN: "npu"}
_VENDOR_BY_NAME = {"cuda": OrtDeviceVendorId.NVIDIA, "rocm": OrtDeviceVendorId.AMD,
                   "dml": OrtDeviceVendorId.MICROSOFT, "cann": OrtDeviceVendorId.HUAWEI}


def device_name_of_type(device_type: int, vendor_id: int = 0) -> str:
    """The onyxrt device name for an onnxruntime device-type number (``1`` with NVIDIA's
    vendor id → ``"cuda"``, with AMD's → ``"rocm"``, else ``"gpu"``)."""
    if device_type == _GPU:
        if vendor_id == OrtDeviceVendorId.NVIDIA:
            return "cuda"
        if vendor_id == OrtDeviceVendorId.AMD:
            return "rocm"
    return _NAME_BY_TYPE.get(int(device_type), "cpu")


class OrtDevice:
    """A device as onnxruntime numbers it: type, memory type, vendor id and device id.

    ``OrtDevice.make("cuda", 0)`` is how onnxruntime code builds one;
    ``OrtDevice(device_type, mem_type, vendor_id, device_id)`` (or without the vendor id)
    is the low-level form. The static methods ``cpu()``, ``cuda()``, ``gpu()``, ``npu()``,
    ... return the type numbers, as onnxruntime's do.
    """

    def __init__(self, *args: Any) -> None:
        if len(args) == 1 and isinstance(args[0], OrtDevice):
            other = args[0]
            args = (other._type, other._mem_type, other._vendor_id, other._device_id)
        if len(args) == 3:
            args = (args[0], args[1], 0, args[2])
        if len(args) != 4:
            raise InvalidArgument(
                "OrtDevice(device_type, mem_type, vendor_id, device_id) takes 3 or 4 ints, "
                f"got {len(args)} arguments; or use OrtDevice.make('cuda', 0)"
            )
        self._type: int = int(args[0])
        self._mem_type: int = int(args[1])
        self._vendor_id: int = int(args[2])
        self._device_id: int = int(args[3])

    @staticmethod
    def make(ort_device_name: str, device_id: int, vendor_id: int = -1) -> OrtDevice:
        """The device named ``ort_device_name`` (``"cpu"``, ``"cuda"``, ``"rocm"``,
        ``"gpu"``, ``"npu"``, ``"dml"``...) number ``device_id``."""
        name = str(ort_device_name).lower()
        if name not in _TYPE_BY_NAME:
            close = difflib.get_close_matches(name, sorted(_TYPE_BY_NAME), n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise InvalidArgument(
                f"unknown device name {ort_device_name!r}.{hint} Known: {', '.join(sorted(_TYPE_BY_NAME))}"
            )
        vendor = int(vendor_id) if int(vendor_id) >= 0 else int(_VENDOR_BY_NAME.get(name, 0))
        return OrtDevice(_TYPE_BY_NAME[name], 0, vendor, int(device_id))

    # onnxruntime's type numbers, as static methods (its C++ class exposes them so).
    @staticmethod
    def cpu() -> int:
        """The CPU device type number."""
        return _CPU

    @staticmethod
    def cuda() -> int:
        """The GPU device type number (``cuda`` is onnxruntime's historical name)."""
        return _GPU

    @staticmethod
    def gpu() -> int:
        """The GPU device type number."""
        return _GPU

    @staticmethod
    def fpga() -> int:
        """The FPGA device type number."""
        return _FPGA

    @staticmethod
    def npu() -> int:
        """The NPU device type number."""
        return _NPU

    @staticmethod
    def dml() -> int:
        """The DirectML device type number."""
        return _DML

    @staticmethod
    def webgpu() -> int:
        """The WebGPU device type number."""
        return _WEBGPU

    @staticmethod
    def cann() -> int:
        """The CANN device type number."""
        return _CANN

    @staticmethod
    def default_memory() -> int:
        """The default memory type number."""
        return 0

    def device_id(self) -> int:
        """The device's index."""
        return self._device_id

    def device_type(self) -> int:
        """The device type number (see the static methods)."""
        return self._type

    def device_mem_type(self) -> int:
        """The memory type number (0: the device's own memory)."""
        return self._mem_type

    def device_vendor_id(self) -> int:
        """The PCI vendor id (0: none)."""
        return self._vendor_id

    # onnxruntime's C++ class spells these as properties-like methods too.
    def mem_type(self) -> int:
        """Alias of :meth:`device_mem_type`."""
        return self._mem_type

    def vendor_id(self) -> int:
        """Alias of :meth:`device_vendor_id`."""
        return self._vendor_id

    @property
    def name(self) -> str:
        """The onyxrt device name (``"cpu"``, ``"cuda"``, ``"npu"``...)."""
        return device_name_of_type(self._type, self._vendor_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OrtDevice):
            return NotImplemented
        return (self._type, self._mem_type, self._vendor_id, self._device_id) == (
            other._type, other._mem_type, other._vendor_id, other._device_id)

    def __hash__(self) -> int:
        return hash((self._type, self._mem_type, self._vendor_id, self._device_id))

    def __repr__(self) -> str:
        return f"OrtDevice({self.name}:{self._device_id}, mem_type={self._mem_type}, vendor_id={self._vendor_id:#x})"


class OrtMemoryInfo:
    """A memory location: a name (``"Cpu"``, ``"Cuda"``...), allocator type, device id and
    memory type. ``create_v2`` builds one from a device type and vendor id instead."""

    __slots__ = ("name", "allocator_type", "device_id", "mem_type", "device_mem_type",
                 "device_vendor_id", "_device_type", "_alignment")

    def __init__(self, name: str, allocator_type: Any, device_id: int, mem_type: Any) -> None:
        self.name = str(name)
        self.allocator_type = OrtAllocatorType(int(allocator_type))
        self.device_id = int(device_id)
        self.mem_type = OrtMemType(int(mem_type))
        self.device_mem_type = OrtDeviceMemoryType.DEFAULT
        self.device_vendor_id = int(_VENDOR_BY_NAME.get(self.name.lower(), 0))
        self._device_type = _TYPE_BY_NAME.get(self.name.lower(), _CPU)
        self._alignment = 0

    @staticmethod
    def create_v2(
        name: str,
        device_type: Any,
        vendor_id: int,
        device_id: int,
        device_mem_type: Any,
        alignment: int,
        allocator_type: Any,
    ) -> OrtMemoryInfo:
        """onnxruntime's ``CreateMemoryInfo_V2``: from a device type and vendor id."""
        info = OrtMemoryInfo(name, allocator_type, device_id, OrtMemType.DEFAULT)
        info.device_mem_type = OrtDeviceMemoryType(int(device_mem_type))
        info.device_vendor_id = int(vendor_id)
        info._device_type = int(OrtMemoryInfoDeviceType(int(device_type)))
        info._alignment = int(alignment)
        return info

    @staticmethod
    def for_device(device_name: str, device_id: int = 0, vendor_id: int = 0) -> OrtMemoryInfo:
        """The memory info of an onyxrt device name (``"cpu"``, ``"cuda"``, ``"npu"``...),
        named as onnxruntime names its allocators (``"Cpu"``, ``"Cuda"``...)."""
        info = OrtMemoryInfo(device_name.capitalize(), OrtAllocatorType.ORT_ARENA_ALLOCATOR, device_id,
                             OrtMemType.DEFAULT)
        info._device_type = _TYPE_BY_NAME.get(device_name.lower(), _NPU)
        info.device_vendor_id = int(vendor_id)
        return info

    @property
    def device(self) -> OrtDevice:
        """The :class:`OrtDevice` this memory belongs to."""
        return OrtDevice(self._device_type, int(self.device_mem_type), self.device_vendor_id, self.device_id)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, OrtMemoryInfo):
            return NotImplemented
        return (self.name, self.device_id, self.mem_type, self.allocator_type) == (
            other.name, other.device_id, other.mem_type, other.allocator_type)

    def __hash__(self) -> int:
        return hash((self.name, self.device_id, int(self.mem_type), int(self.allocator_type)))

    def __repr__(self) -> str:
        return (f"OrtMemoryInfo(name={self.name!r}, device_id={self.device_id}, "
                f"mem_type={self.mem_type.name}, allocator_type={self.allocator_type.name})")


_ARENA_KEYS = ("max_mem", "arena_extend_strategy", "initial_chunk_size_bytes",
               "max_dead_bytes_per_chunk", "initial_growth_chunk_size_bytes",
               "max_power_of_two_extend_bytes")


class OrtArenaCfg:
    """Arena settings: ``OrtArenaCfg(max_mem, arena_extend_strategy,
    initial_chunk_size_bytes, max_dead_bytes_per_chunk)`` or ``OrtArenaCfg({key: value})``
    with any of the six keys; -1 means the provider's default."""

    def __init__(self, *args: Any) -> None:
        values = dict.fromkeys(_ARENA_KEYS, -1)
        values["max_mem"] = 0
        if len(args) == 1 and isinstance(args[0], Mapping):
            for key, value in args[0].items():
                if key not in _ARENA_KEYS:
                    close = difflib.get_close_matches(str(key), _ARENA_KEYS, n=1)
                    hint = f" Did you mean {close[0]!r}?" if close else ""
                    raise InvalidArgument(
                        f"Invalid OrtArenaCfg option: {key!r}.{hint} Known: {', '.join(_ARENA_KEYS)}"
                    )
                values[key] = _arena_int(key, value)
        elif len(args) == 4:
            for key, value in zip(_ARENA_KEYS[:4], args):
                values[key] = _arena_int(key, value)
        elif args:
            raise InvalidArgument(
                "OrtArenaCfg takes (max_mem, arena_extend_strategy, initial_chunk_size_bytes, "
                f"max_dead_bytes_per_chunk) or a dict, got {len(args)} arguments"
            )
        for key, value in values.items():
            setattr(self, key, value)

    def as_dict(self) -> dict[str, int]:
        """The six settings by name."""
        return {key: getattr(self, key) for key in _ARENA_KEYS}

    def __repr__(self) -> str:
        return f"OrtArenaCfg({self.as_dict()})"


def _arena_int(key: str, value: Any) -> int:
    if key == "arena_extend_strategy" and isinstance(value, str) and value in ArenaExtendStrategy.__members__:
        return int(ArenaExtendStrategy[value])
    try:
        return int(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"OrtArenaCfg option {key!r} must be an integer, got {value!r}") from None


@record(frozen=True)
class RegisteredAllocator:
    """One ``create_and_register_allocator(_v2)`` call: where, for which provider, how."""

    memory_info: OrtMemoryInfo
    arena: dict[str, int]
    provider: str = ""
    options: Mapping[str, str] | None = None


_registered: list[RegisteredAllocator] = []
_registered_lock = threading.Lock()


def create_and_register_allocator(mem_info: OrtMemoryInfo, arena_cfg: OrtArenaCfg | None = None) -> None:
    """Register a process-wide allocator that sessions may share (onnxruntime's
    ``session.use_env_allocators``). onyxrt records it (see :func:`registered_allocators`);
    its CPU provider allocates through numpy, so on the CPU this changes nothing."""
    if not isinstance(mem_info, OrtMemoryInfo):
        raise InvalidArgument(f"create_and_register_allocator: expected an OrtMemoryInfo, got {type(mem_info).__name__}")
    arena = (arena_cfg or OrtArenaCfg()).as_dict()
    with _registered_lock:
        _registered.append(RegisteredAllocator(mem_info, arena))


def create_and_register_allocator_v2(
    provider_type: str, mem_info: OrtMemoryInfo, options: Mapping[str, str], arena_cfg: OrtArenaCfg | None = None
) -> None:
    """As :func:`create_and_register_allocator`, for the named provider's memory."""
    if not isinstance(mem_info, OrtMemoryInfo):
        raise InvalidArgument(f"create_and_register_allocator_v2: expected an OrtMemoryInfo, got {type(mem_info).__name__}")
    arena = (arena_cfg or OrtArenaCfg()).as_dict()
    with _registered_lock:
        _registered.append(RegisteredAllocator(mem_info, arena, str(provider_type), dict(options or {})))


def registered_allocators() -> list[RegisteredAllocator]:
    """Allocators registered in this process, oldest first."""
    with _registered_lock:
        return list(_registered)
