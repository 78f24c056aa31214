"""``IOBinding``: bind inputs and outputs to devices or preallocated buffers.

Outputs bound to a device stay there (no copy back to the host until the caller asks
with ``copy_outputs_to_cpu()``); outputs bound to a preallocated ``OrtValue`` or buffer
are written into it.
"""

from __future__ import annotations

import ctypes
from typing import Any, Protocol

import numpy as np

from .errors import InvalidArgument
from .ortvalue import OrtValue, OrtValueVector, _as_dtype, resolve_device_provider

__all__ = ["BoundSession", "IOBinding"]


class BoundSession(Protocol):
    """What a binding needs of its session (:class:`~onyxrt.InferenceSession` is one):
    a way to wait for its providers' queued work. The session runs the binding
    (``run_with_iobinding``), so the binding only holds it, it does not import it."""

    def _sync_providers(self) -> None: ...


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
        """Bind raw memory at ``buffer_ptr`` (host memory only for pointers)."""
        if str(device_type).lower() != "cpu":
            raise InvalidArgument(
                f"bind_input({name!r}): raw pointers are accepted for 'cpu' only; for "
                f"{device_type!r} bind an OrtValue with bind_ortvalue_input"
            )
        arr = _array_from_pointer(buffer_ptr, _as_dtype(element_type), tuple(int(d) for d in shape))
        self._inputs[name] = OrtValue(arr)

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
        or, with ``buffer_ptr``, to preallocated host memory of ``shape``/``element_type``."""
        target = None
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise InvalidArgument(f"bind_output({name!r}): buffer_ptr needs element_type and shape")
            if str(device_type).lower() != "cpu":
                raise InvalidArgument(f"bind_output({name!r}): raw pointers are accepted for 'cpu' only")
            target = OrtValue(_array_from_pointer(buffer_ptr, _as_dtype(element_type), tuple(int(d) for d in shape)))
        else:
            resolve_device_provider(device_type, device_id)  # fail now if the device is unknown
        self._outputs[name] = _OutputBinding(str(device_type).lower(), int(device_id), target)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Write output ``name`` into the preallocated ``ortvalue``."""
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
