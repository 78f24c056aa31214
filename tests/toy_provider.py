"""A toy "device" provider with its own memory space, for tests.

Values on the toy device are :class:`ToyBuffer` objects that refuse implicit conversion
to numpy, so any value the core forgets to copy fails loudly. Their memory comes from the
provider's :class:`~onyxrt.allocator.ArenaAllocator` (options ``arena_extend_strategy``
and ``memory_limit``) and goes back to it when the buffer dies. It claims Add, Mul and
Relu (float32 only) and records every transfer, like a real accelerator's provider.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from onyxrt.allocator import EXTEND_STRATEGIES, ArenaAllocator, HostMemory
from onyxrt.devices import Device
from onyxrt.dtypes import FLOAT_TYPES
from onyxrt.hookspecs import ProviderSpec, hookimpl
from onyxrt.kernels import Kernel, KernelRegistry
from onyxrt.options import Option, OptionSchema
from onyxrt.protocol import KernelRegistryProvider

TOY_SPACE = "toy:0"
registry = KernelRegistry("ToyDeviceExecutionProvider")


class ToyBuffer:
    """A tensor in toy device memory; the host cannot read it directly."""

    def __init__(self, data: np.ndarray, arena: ArenaAllocator) -> None:
        data = np.ascontiguousarray(data)
        block = arena.allocate(data.nbytes)
        self._data = block.buffer[: data.nbytes].view(data.dtype).reshape(data.shape)
        self._data[...] = data
        self.shape = data.shape
        self.dtype = data.dtype
        self.arena = arena
        weakref.finalize(self, arena.free, block)

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError("ToyBuffer lives in toy device memory; copy it to the host first")


class ToyTransfer:
    """Host ↔ toy copies, counted."""

    def __init__(self, arena: ArenaAllocator) -> None:
        self.arena = arena
        self.to_device = 0
        self.to_host = 0

    def can_copy(self, src: Device, dst: Device) -> bool:
        spaces = {src.memory_space, dst.memory_space}
        return spaces <= {"cpu", TOY_SPACE} and src.memory_space != dst.memory_space

    def copy(self, value: Any, src: Device, dst: Device) -> Any:
        if dst.memory_space == TOY_SPACE:
            self.to_device += 1
            assert isinstance(value, np.ndarray), f"host value expected, got {type(value)}"
            return ToyBuffer(value, self.arena)
        self.to_host += 1
        assert isinstance(value, ToyBuffer), f"toy value expected, got {type(value)}"
        return value._data.copy()


def _binary(fn: Any) -> type[Kernel]:
    class Binary(Kernel):
        def compute(self, a: ToyBuffer, b: ToyBuffer) -> tuple[ToyBuffer]:
            assert isinstance(a, ToyBuffer) and isinstance(b, ToyBuffer)
            return (ToyBuffer(fn(a._data, b._data), a.arena),)

    return Binary


registry.register("Add", since=(7, 13, 14), types={"T": {np.float32}})(_binary(np.add))
registry.register("Mul", since=(7, 13, 14), types={"T": {np.float32}})(_binary(np.multiply))


@registry.register("Relu", since=(6, 13, 14), types={"T": FLOAT_TYPES})
class ToyRelu(Kernel):
    def compute(self, x: ToyBuffer) -> tuple[ToyBuffer]:
        assert isinstance(x, ToyBuffer)
        return (ToyBuffer(np.maximum(x._data, 0), x.arena),)


@registry.register("Reshape", since=(5, 13, 14, 19, 21, 23, 24, 25), types={"T": {np.float32}},
                   host_inputs=(1,))
class ToyReshape(Kernel):
    """Reads its target shape from host memory (``host_inputs``), the data on the device."""

    def compute(self, x: ToyBuffer, shape: np.ndarray) -> tuple[ToyBuffer]:
        assert isinstance(x, ToyBuffer) and isinstance(shape, np.ndarray)
        return (ToyBuffer(x._data.reshape([int(d) for d in shape]), x.arena),)


class ToyDeviceExecutionProvider(KernelRegistryProvider):
    """A kernel-registry provider whose values live in their own memory space."""

    name: ClassVar[str] = "ToyDeviceExecutionProvider"
    vendor: ClassVar[str] = "onyxrt tests"
    device_names: ClassVar[tuple[str, ...]] = ("toy",)
    registry = registry
    option_schema: ClassVar[OptionSchema] = OptionSchema([
        Option("device_id", int, 0, "which toy device", minimum=0, maximum=0),
        Option("arena_extend_strategy", str, "kNextPowerOfTwo", "how the arena grows",
               choices=EXTEND_STRATEGIES),
        Option("memory_limit", "size", 0, "bytes the arena may reserve (0: no limit)",
               minimum=0, aliases=("gpu_mem_limit",)),
    ])

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.arena = ArenaAllocator(
            HostMemory(),
            strategy=self.options["arena_extend_strategy"],
            limit=self.options["memory_limit"] or None,
            initial_region=4096,
            name="ToyDeviceExecutionProvider arena",
        )
        self.transfer = ToyTransfer(self.arena)

    def devices(self) -> Sequence[Device]:
        return (Device("npu", "onyxrt tests", virtual=True, memory_space=TOY_SPACE),)

    def data_transfer(self) -> ToyTransfer:
        return self.transfer

    def allocator(self) -> ArenaAllocator:
        return self.arena


def _load() -> type[ToyDeviceExecutionProvider]:
    return ToyDeviceExecutionProvider


@hookimpl
def onyxrt_providers() -> list[ProviderSpec]:
    return [ProviderSpec("ToyDeviceExecutionProvider", _load, priority=50, device_types=("npu",))]


def plugin_module(module: str, cls: str, priority: int) -> str:
    """The source of a fake distribution's plugin module offering ``module.cls`` (an NPU
    device provider) through the ``onyxrt.providers`` entry point."""
    return f"""
from onyxrt.hookspecs import ProviderSpec, hookimpl

def _load():
    from {module} import {cls}
    return {cls}

@hookimpl
def onyxrt_providers():
    return [ProviderSpec("{cls}", _load, priority={priority}, device_types=("npu",))]
"""


#: The plugin module of a fake ``onyxrt-toy`` distribution offering this toy provider.
TOY_PLUGIN = plugin_module("toy_provider", "ToyDeviceExecutionProvider", 50)
