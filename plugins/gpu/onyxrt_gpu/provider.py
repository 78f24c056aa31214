"""``GPUExecutionProvider``: the one GPU implementation behind CUDA and ROCm.

``CUDAExecutionProvider`` (onyxrt-cuda) and ``ROCMExecutionProvider`` (onyxrt-rocm) are
subclasses that only name themselves, their CuPy build and their vendor; kernels, memory,
transfers, options and the probe are all here, written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar

import numpy as np

from onyxrt.allocator import EXTEND_STRATEGIES, ArenaAllocator
from onyxrt.devices import Device
from onyxrt.errors import InvalidProviderOption
from onyxrt.graph import Graph, Node
from onyxrt.kernels import Kernel, KernelInfo
from onyxrt.options import Option, OptionSchema
from onyxrt.protocol import KernelRegistryProvider, ProbeResult

from .cupy_loader import cupy_module, probe_cupy
from .graphs import CudaGraphCapture
from .kernels import registry
from .memory import ArenaCupyAllocator, CupyDeviceMemory
from .transfer import CupyTransfer

__all__ = ["GPUExecutionProvider", "GPU_OPTIONS", "SHAPE_OPS"]

#: Operators that only compute shapes: they stay on CPU, as in onnxruntime, so shapes
#: never bounce through the device.
SHAPE_OPS = frozenset({"Shape", "Size"})
_SMALL_INT = 64  # int64 tensors up to this many elements are shape arithmetic

GPU_OPTIONS = OptionSchema([
    Option("device_id", int, 0, "which GPU", minimum=0),
    Option("gpu_mem_limit", "size", 0, "bytes the device arena may reserve (0: no limit)",
           minimum=0, aliases=("memory_limit",)),
    Option("arena_extend_strategy", str, "kNextPowerOfTwo", "how the device arena grows",
           choices=EXTEND_STRATEGIES),
    Option("do_copy_in_default_stream", bool, True,
           "copy on the compute stream (False: a separate copy stream)"),
    # onnxruntime's CUDA provider key and default: float32 MatMul/Gemm/Conv GEMMs may use
    # TF32 tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32); "0" keeps full float32 products.
    Option("use_tf32", bool, True,
           "float32 matrix products on TF32 tensor cores (0: full float32 accumulation; "
           "CUDA only, ROCm products are unchanged)"),
    # onnxruntime's key and default (off). Unlike onnxruntime, plain host feeds and several
    # input shapes work (one graph per shape signature), and a model that cannot be
    # captured runs as usual with a warning instead of failing.
    Option("enable_cuda_graph", bool, False,
           "record each input shape's run once as a CUDA graph and replay it with one launch "
           "(CUDA only; see docs/gpu.md, \"CUDA graphs\")"),
    # onnxruntime's cuDNN keys: validated and reported so existing code keeps working;
    # onyxrt's convolutions are im2col + cuBLAS/hipBLAS GEMMs, so they select nothing.
    Option("cudnn_conv_algo_search", str, "EXHAUSTIVE",
           "accepted for onnxruntime compatibility (no cuDNN algorithm search here)",
           choices=("EXHAUSTIVE", "HEURISTIC", "DEFAULT")),
    Option("cudnn_conv_use_max_workspace", bool, True,
           "accepted for onnxruntime compatibility (no cuDNN workspace here)"),
])


class _DeviceKernel(Kernel):
    """Runs a GPU kernel on its device with the provider's arena as CuPy's allocator."""

    def __init__(self, inner: Kernel, provider: GPUExecutionProvider) -> None:
        super().__init__(inner.info)
        self.inner = inner
        self.scope = provider.allocation_scope

    def compute(self, *inputs: Any) -> tuple[Any, ...]:
        """The inner kernel's compute inside the device and allocator scope."""
        with self.scope():
            return self.inner.compute(*inputs)


class _Scope:
    """``with``: the provider's device current and its arena as CuPy's allocator."""

    __slots__ = ("cupy", "device_id", "allocator", "_device", "_alloc")

    def __init__(self, cupy: Any, device_id: int, allocator: ArenaCupyAllocator) -> None:
        self.cupy = cupy
        self.device_id = device_id
        self.allocator = allocator

    def __enter__(self) -> None:
        self._device = self.cupy.cuda.Device(self.device_id)
        self._device.__enter__()
        self._alloc = self.cupy.cuda.using_allocator(self.allocator)
        self._alloc.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._alloc.__exit__(*exc)
        self._device.__exit__(*exc)


class GPUExecutionProvider(KernelRegistryProvider):
    """A kernel-registry provider over CuPy (subclassed for CUDA and ROCm)."""

    build: ClassVar[str] = "cuda"  # "cuda" or "hip": the CuPy build this provider needs
    memory_prefix: ClassVar[str] = "cuda"
    vendor_id: ClassVar[int] = 0
    registry = registry
    option_schema: ClassVar[OptionSchema] = GPU_OPTIONS

    def __init__(self, options: Any = None) -> None:
        super().__init__(options)
        self.cupy = cupy_module()
        self.device_id = int(self.options["device_id"])
        count = int(self.cupy.cuda.runtime.getDeviceCount())
        if self.device_id >= count:
            raise InvalidProviderOption(
                f"{self.name}: option 'device_id' is {self.device_id} but this machine has "
                f"{count} device(s) (ids 0..{count - 1})"
            )
        self.simulated = bool(getattr(self.cupy, "__onyxrt_simulated__", False))
        self.arena = ArenaAllocator(
            CupyDeviceMemory(self.cupy, self.device_id),
            strategy=self.options["arena_extend_strategy"],
            limit=int(self.options["gpu_mem_limit"]) or None,
            name=f"{self.name} device {self.device_id}",
        )
        self.cupy_allocator = ArenaCupyAllocator(self.cupy, self.arena, self.device_id)
        self.transfer = CupyTransfer(
            self.cupy, self.memory_prefix, self.allocation_scope,
            bool(self.options["do_copy_in_default_stream"]),
        )
        # Constants upload asynchronously while kernels are created; True once the device
        # has been waited for after the last of them (see on_session_created).
        self._uploads_settled = True
        self._graph_capture: CudaGraphCapture | None = None

    # -- discovery ---------------------------------------------------------------------
    @classmethod
    def probe(cls) -> ProbeResult:
        """CuPy 14+ of the right build importable, a device present, and a tiny kernel and
        matmul compiled, run and checked on it (so a driver-only machine is not usable)."""
        return probe_cupy(cls.build, cls.name)

    def devices(self) -> Sequence[Device]:
        """The GPU selected by ``device_id`` (virtual when CuPy is simulated)."""
        return (Device(
            "gpu", self.vendor, self.device_id, vendor_id=self.vendor_id,
            virtual=self.simulated, memory_space=f"{self.memory_prefix}:{self.device_id}",
            metadata={"cupy": str(getattr(self.cupy, "__version__", "?"))},
        ),)

    # -- partitioning and kernels --------------------------------------------------------
    def refusal_reason(self, graph: Graph, node: Node) -> tuple[str, str]:
        """The registry's reasons, plus: shape computation stays on CPU."""
        if node.op_type in SHAPE_OPS or _is_shape_arithmetic(graph, node):
            return "shape computation stays on CPU (as in onnxruntime), so shapes never " \
                   "bounce through the device", "policy"
        for name in (*node.inputs, *node.outputs):
            vt = graph.value_type(name) if name else None
            if vt is not None and vt.kind not in ("tensor", "unknown"):
                return f"{name!r} is a {vt.kind}; GPU kernels take tensors only", "dtype"
        return super().refusal_reason(graph, node)

    def create_kernel(self, node: Node, info: KernelInfo) -> Kernel:
        """Build the kernel on this device (constants upload into the arena)."""
        with self.allocation_scope():
            inner = super().create_kernel(node, info)
        # The kernel's constants, and the weights the plan copies for it, are queued
        # uploads: the session must not count as created before they have landed.
        self._uploads_settled = False
        return _DeviceKernel(inner, self)

    # -- creation and runs -----------------------------------------------------------------
    def on_session_created(self) -> None:
        """Wait once for the weights uploaded while the session was created (a session's
        creation time then includes them, and nothing reads a half-copied weight)."""
        if not self._uploads_settled:
            self.sync()

    def graph_capture(self) -> CudaGraphCapture | None:
        """CUDA graph capture when ``enable_cuda_graph`` is on (CuPy's CUDA build only: the
        HIP build's graph support is not relied on), else ``None``."""
        if not self.options["enable_cuda_graph"] or self.cupy.cuda.runtime.is_hip:
            return None
        if self._graph_capture is None:
            self._graph_capture = CudaGraphCapture(self)
        return self._graph_capture

    def allocation_scope(self) -> AbstractContextManager[Any]:
        """A context: this device current, the arena as CuPy's allocator."""
        return _Scope(self.cupy, self.device_id, self.cupy_allocator)

    # -- memory ------------------------------------------------------------------------
    def data_transfer(self) -> CupyTransfer:
        """Host ↔ device and device ↔ device copies, counted."""
        return self.transfer

    def allocator(self) -> ArenaAllocator:
        """The device arena (``gpu_mem_limit``, extend strategy, statistics)."""
        return self.arena

    def from_dlpack(self, obj: Any) -> Any:
        """A CuPy array over the DLPack tensor's memory (no copy)."""
        with self.cupy.cuda.Device(self.device_id):
            return self.cupy.from_dlpack(obj)

    def from_pointer(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A CuPy array over ``shape``/``dtype`` device memory at ``ptr`` on this device
        (``IOBinding.bind_input``/``bind_output`` with ``buffer_ptr``), without a copy.

        The memory stays its owner's (a torch tensor, a CuPy array): the caller keeps it
        alive while the binding is used, as with onnxruntime. Raises ``ValueError`` when
        CuPy rejects the pointer."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        cp = self.cupy
        memory = cp.cuda.UnownedMemory(int(ptr), nbytes, None, self.device_id)
        return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(memory, 0))

    def describe(self, value: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
        """Shape and dtype of a CuPy array."""
        return tuple(value.shape), np.dtype(value.dtype)

    def sync(self) -> None:
        """Wait for the device (creation's uploads included)."""
        self.cupy.cuda.Device(self.device_id).synchronize()
        self._uploads_settled = True


def _is_shape_arithmetic(graph: Graph, node: Node) -> bool:
    """A node whose inputs and outputs are all small int64 tensors (shape vectors) or small
    bool tensors beside them (``Equal``/``Where`` choosing between dims, as torch exports
    compute an ``Expand``'s shape), with at least one int64."""
    names = [n for n in (*node.inputs, *node.outputs) if n]
    if not names:
        return False
    int64 = False
    for name in names:
        vt = graph.value_type(name)
        if vt is None or vt.elem_type not in (7, 9):  # TensorProto.INT64, BOOL
            return False
        int64 = int64 or vt.elem_type == 7
        size = vt.static_size
        if size is None or size > _SMALL_INT:
            return False
    return int64
