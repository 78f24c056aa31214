"""``IOBinding``: bind inputs and outputs to devices or preallocated buffers.

Outputs bound to a device stay there (no copy back to the host until the caller asks
with ``copy_outputs_to_cpu()``); outputs bound to a preallocated ``OrtValue`` or buffer
are written into it, in place: on a GPU the result is copied device to device into the
bound array, so a torch tensor or CuPy array sharing that memory sees it. Raw pointers
(``buffer_ptr``) are host memory for ``'cpu'`` and device memory for a provider that can
wrap one (:class:`DevicePointerImporter`: the GPU's).
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .devices import Device
from .errors import InvalidArgument, ProviderUnavailable
from .feeds import type_name
from .ortvalue import OrtValue, OrtValueVector, _as_dtype, resolve_device_provider
from .protocol import ExecutionProvider

__all__ = ["BoundSession", "DevicePointerImporter", "IOBinding"]

_HOST = Device("cpu", "host")


class BoundSession(Protocol):
    """What a binding needs of its session (:class:`~onyxrt.InferenceSession` is one):
    a way to wait for its providers' queued work. The session runs the binding
    (``run_with_iobinding``), so the binding only holds it, it does not import it."""

    def _sync_providers(self) -> None: ...


@runtime_checkable
class DevicePointerImporter(Protocol):
    """A provider that can wrap raw device memory as one of its values, without a copy
    (the GPU provider: a CuPy array over ``cupy.cuda.UnownedMemory``)."""

    def from_pointer(self, ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any]) -> Any:
        """A value of ``shape``/``dtype`` over the device memory at ``ptr``; ``ValueError``
        when the pointer is not usable device memory."""


def _pointer_value(
    call: str, device_type: str, device_id: int, element_type: Any, shape: Any, buffer_ptr: int
) -> OrtValue:
    """``buffer_ptr`` as an ``OrtValue``: host memory for ``'cpu'``, else wrapped by the
    device's provider (no copy either way)."""
    dtype, dims = _as_dtype(element_type), tuple(int(d) for d in shape)
    try:
        provider = resolve_device_provider(device_type, device_id)
    except ProviderUnavailable as exc:
        raise InvalidArgument(
            f"{call}: {exc}; a raw pointer to {device_type!r} memory needs that device's "
            "provider (or bind an OrtValue with bind_ortvalue_input/bind_ortvalue_output)"
        ) from exc
    if provider is None:
        return OrtValue(_array_from_pointer(buffer_ptr, dtype, dims))
    if not isinstance(provider, DevicePointerImporter):
        raise InvalidArgument(
            f"{call}: {provider.name} cannot wrap a raw {device_type!r} pointer; bind an "
            "OrtValue with bind_ortvalue_input/bind_ortvalue_output instead"
        )
    try:
        value = provider.from_pointer(int(buffer_ptr), dims, dtype)
    except ValueError as exc:
        raise InvalidArgument(
            f"{call}: buffer_ptr 0x{int(buffer_ptr):x} is not usable {device_type}:{device_id} "
            f"memory for {type_name(dtype)} {list(dims)}: {exc}"
        ) from exc
    return OrtValue(value, provider)


def _array_from_pointer(ptr: int, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = (ctypes.c_char * nbytes).from_address(int(ptr))
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(memoryview(buf), dtype=dtype, count=count).reshape(shape)


class _OutputBinding:
    __slots__ = ("device_type", "device_id", "target")

    def __init__(self, device_type: str, device_id: int, target: OrtValue | None) -> None:
        self.device_type = device_type
        self.device_id = device_id
        self.target = target

    def target_on_device(self) -> ExecutionProvider | None:
        """The provider holding the preallocated target, when it is device memory."""
        holder = self.target.provider if self.target is not None else None
        return holder if holder is not None and not holder.device.is_host else None

    def fill(self, name: str, value: Any, producer: ExecutionProvider | None) -> OrtValue:
        """Write output ``name`` (``value``, in ``producer``'s memory, or on the host when
        ``producer`` is None) into the preallocated target, in place; the target is
        returned. Shape and type must match exactly (no broadcast, no cast), as in
        onnxruntime."""
        target = self.target
        assert target is not None
        shape, dtype = producer.describe(value) if producer is not None else _host_shape_type(value)
        want_shape, want_dtype = target.shape(), target.numpy_dtype()
        if list(shape) != list(want_shape) or dtype != want_dtype:
            raise InvalidArgument(
                f"output {name!r}: the bound buffer is {type_name(want_dtype)} {list(want_shape)}, "
                f"but the output is {type_name(dtype)} {list(shape)}; bind a buffer of the "
                "output's shape and type, or bind the output to a device instead"
            )
        target.write_from(value, producer.device if producer is not None else _HOST)
        return target


def _host_shape_type(value: Any) -> tuple[tuple[int, ...], np.dtype[Any]]:
    arr = np.asarray(value)
    return tuple(arr.shape), arr.dtype


class IOBinding:
    """Inputs and outputs bound for :meth:`InferenceSession.run_with_iobinding`."""

    def __init__(self, session: BoundSession) -> None:
        self._session = session
        self._inputs: dict[str, OrtValue] = {}
        self._outputs: dict[str, _OutputBinding] = {}
        self._results: list[OrtValue] = []

    @property
    def _iobinding(self) -> IOBinding:
        """onnxruntime's private native binding (``binding._iobinding``): this binding."""
        return self

    # -- inputs ------------------------------------------------------------------------
    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Bind a host numpy array to input ``name`` (no copy)."""
        self._inputs[name] = OrtValue(np.asarray(arr_on_cpu))

    def bind_input(
        self,
        name: str,
        device_type: str,
        device_id: int,
        element_type: Any,
        shape: Any,
        buffer_ptr: int,
    ) -> None:
        """Bind raw memory at ``buffer_ptr``: host memory for ``'cpu'``, device memory
        (e.g. a torch tensor's ``data_ptr()``) for a device whose provider can wrap it
        (the GPU's). No copy; the memory must outlive the binding's runs."""
        self._inputs[name] = _pointer_value(
            f"bind_input({name!r})", device_type, device_id, element_type, shape, buffer_ptr
        )

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind an ``OrtValue`` (on any device) to input ``name``."""
        self._inputs[name] = ortvalue

    # -- outputs -----------------------------------------------------------------------
    def bind_output(
        self,
        name: str,
        device_type: str = "cpu",
        device_id: int = 0,
        element_type: Any = None,
        shape: Any = None,
        buffer_ptr: int | None = None,
    ) -> None:
        """Bind output ``name`` to a device (the runtime allocates; shapes may be dynamic)
        or, with ``buffer_ptr``, to preallocated memory of ``shape``/``element_type`` on
        that device (host memory for ``'cpu'``; device memory where the device's provider
        can wrap a pointer, as the GPU's can), which each run writes into in place."""
        target = None
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise InvalidArgument(f"bind_output({name!r}): buffer_ptr needs element_type and shape")
            target = _pointer_value(
                f"bind_output({name!r})", device_type, device_id, element_type, shape, buffer_ptr
            )
        else:
            resolve_device_provider(device_type, device_id)  # fail now if the device is unknown
        self._outputs[name] = _OutputBinding(str(device_type).lower(), int(device_id), target)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Write output ``name`` into the preallocated ``ortvalue`` (in place, on its
        device: arrays sharing its memory see each run's result)."""
        self._outputs[name] = _OutputBinding(ortvalue.device_name(), 0, ortvalue)

    # -- results -----------------------------------------------------------------------
    def synchronize_inputs(self) -> None:
        """Wait for bound inputs to be ready (providers sync)."""
        self._session._sync_providers()

    def synchronize_outputs(self) -> None:
        """Wait for outputs to be ready (providers sync)."""
        self._session._sync_providers()

    def get_outputs(self) -> list[OrtValue]:
        """Outputs of the last ``run_with_iobinding``, where they were bound."""
        return list(self._results)

    def get_outputs_names(self) -> list[str]:
        """Names of bound outputs, in binding order."""
        return list(self._outputs)

    def get_outputs_as_ortvaluevector(self) -> OrtValueVector:
        """Outputs of the last run as an :class:`~onyxrt.ortvalue.OrtValueVector`."""
        return OrtValueVector(self._results)

    def copy_outputs_to_cpu(self) -> list[Any]:
        """Outputs of the last run as host numpy arrays."""
        return [v.numpy() for v in self._results]

    def clear_binding_inputs(self) -> None:
        """Forget bound inputs."""
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        """Forget bound outputs."""
        self._outputs.clear()
        self._results = []

    # -- used by the session -------------------------------------------------------------
    @property
    def inputs(self) -> dict[str, OrtValue]:
        """Bound inputs by name."""
        return self._inputs

    @property
    def outputs(self) -> dict[str, _OutputBinding]:
        """Bound outputs by name."""
        return self._outputs

    def _set_results(self, results: list[OrtValue]) -> None:
        self._results = results
